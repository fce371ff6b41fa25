// Package kernel is the sidecar of a pod that has none (--mesh none): the pod's own kernel.
// Without a proxy, every client connection is a socket in the pod's network namespace on one
// of the app's listening ports (--port), readable without privilege (package sockets), and
// every connection accepted, even one opened and closed between two reads, is counted in the
// namespace's /proc/net/snmp (Tcp: PassiveOpens). So the kernel gives what a sidecar's
// inbound counters give, per client: who opens new connections, who sends on the ones
// already open, what is in flight (docs/facts.md §7).
//
// What counts as activity (the arrival counter the drain rule watches, mesh.SignalKernel):
//
//   - a connection accepted on a watched port from a client that counts (not --ignore-source,
//     not the pod itself), named by a read of the table or, for one that opened and closed
//     between two reads, by the kernel's record of its destruction (sockets.GoneWatch);
//   - an accept that PassiveOpens counted and that no read and no record named for 250 ms
//     and a read after it was counted: a client nobody could name (an unknown client);
//   - new data on an open connection (tcp_info's bytes received grew; counted as the data
//     segments received since, about one per small request), unless the connection
//     was opened before the lag bound and the data came after it: such a client is routed per
//     connection and will never learn (kube-proxy, Cilium's socket load balancing and
//     ztunnel pick the backend at connect), so it is named (NeverLearn) and left to the app's
//     graceful shutdown, and never keeps the hook past the bound;
//   - a new connection, unless it comes past the lag bound from a client that kept, past the
//     bound, the period at which it opened connections before it: such a client addresses
//     the pod directly (a monitor, a scraper) and will never learn either (cadence.go), so
//     it is named (Client.AddressesPod) and, unless Options.WaitPastBoundOpeners, neither its
//     new connections nor the data on them keep the hook past the bound;
//   - with --app-metrics (Options.AppRequests), before the bound, the requests the app's own
//     counter counted that none of the above paid for within a second (appRequests): a
//     request both count moves the counter once.
//
// Where only /proc can be read (inet_diag refused), there is no tcp_info: data on open
// connections and requests in flight cannot be seen, only accepts (from the table and
// PassiveOpens) count, and a keep-alive client is judged by silence, the lag bound and
// --min-wait.
//
// There is nothing to drain: DrainListeners does nothing and Hints.NoDrainCall says why.
package kernel

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/meshdrain/meshdrain/pkg/mesh"
	"github.com/meshdrain/meshdrain/pkg/sockets"
)

// Options are how the kernel is read.
type Options struct {
	// Ports are the app's own listening ports (--port): their connections are the clients'.
	Ports []int
	// Ignore are the sources that are never clients (--ignore-source): the kubelet's probes
	// from the node, a metrics scraper.
	Ignore []netip.Prefix
	// LagBound is how late the last client's routing learns of the removal, from Start
	// (--eds-lag-bound; for kube-proxy its sync bound); 0 when unknown.
	LagBound time.Duration
	// Start is when the hook started: the deletion, near enough.
	Start time.Time
	// Reader reads the socket table (sockets.NewReader in a pod).
	Reader sockets.Reader
	// SNMPPath is the namespace's counters (sockets.DefaultSNMPPath).
	SNMPPath string
	// Now is the clock (time.Now).
	Now func() time.Time
	// AppRequests, when set, is the app's own request counter (--app-metrics): before the lag
	// bound, what it counts beyond the kernel's activity is activity too (appRequests).
	AppRequests RequestCounter
	// Own, when set, says whether a connection from this remote address is the hook's own
	// (its reads of --app-metrics on one of the app's ports): never a client's.
	Own func(remote netip.AddrPort) bool
	// WaitPastBoundOpeners (--wait-past-bound-openers) keeps counting the activity of the
	// clients taken for callers that address the pod directly (cadence.go): the hook waits
	// for them as for any client opening past the bound, and still names them.
	WaitPastBoundOpeners bool
}

// Activity kinds: what moved the counter last, for the final event.
const (
	ActivityNone          = "none"
	ActivityNewConnection = "new-connection"
	ActivityData          = "data-on-open-connection"
	ActivityUnknownClient = "accept-from-unknown-client"
)

// Kernel is the pod's kernel read as a sidecar (mesh.Sidecar). Safe for concurrent use.
type Kernel struct {
	opts Options

	mu      sync.Mutex
	opened  bool
	openErr error
	// watched are --port; listening every port with a listener in the namespace at the
	// latest read (the watched ones and others: ztunnel's 15008/15006/15001, a metrics
	// port), whose accepts PassiveOpens counts too; readPorts what the table is read on.
	watched   map[uint16]bool
	listening []uint16
	readPorts []uint16
	gone      *sockets.GoneWatch
	goneErr   error
	tcpInfo   bool

	counters   sockets.TCPCounters // at the latest poll
	atRead     sockets.TCPCounters // at the latest read
	lastRead   time.Time
	baselineAt time.Time // the baseline read (open)
	reads      int
	prevPoll   time.Time // the poll before the latest one
	// schedule says when a poll reads the table (schedule.go); credit is the activity counted
	// ahead of the next read while the traffic is dense, on creditPort.
	schedule   readSchedule
	credit     map[uint16]float64
	creditPort uint16

	conns map[sockets.ConnKey]*conn
	// forgotten are the connections gone from the table whose destruction record has not come
	// (sockets.VanishedReads); synRecv the full sockets a read skipped half open (a TCP Fast
	// Open accept, counted at its SYN), by cookie, remembered as long.
	forgotten sockets.VanishedConns[*conn]
	synRecv   sockets.VanishedConns[struct{}]
	clients   map[netip.Addr]*client
	// pending are accepts PassiveOpens counted that no read or record has named yet, oldest
	// first, and unattributed their sum.
	pending      []unnamedAccepts
	unattributed int64

	activity       map[uint16]float64 // counted activity per watched port
	active         map[uint16]float64 // requests in flight at the latest read
	unknownAccepts int
	lastUnknown    time.Time // the latest read whose counters held an unknown client's accept
	// movedAt is when the latest poll at which the activity counter went up had read the
	// counters (one that counted an activity ahead of a read, or a read that found activity
	// the credit had not paid for): the rule sees that move no earlier.
	movedAt time.Time

	lastKind     string
	lastActivity time.Time

	app *appRequests // nil without Options.AppRequests
	// appExtra is what of the activity the app's counts alone moved (appRequests), added to
	// the first listening watched port's in every snapshot.
	appExtra float64
}

type connKind uint8

const (
	clientConn  connKind = iota // a watched port, from a client that counts
	ignoredConn                 // a watched port, from --ignore-source or the pod itself
	otherPort                   // another listening port: not a client's (ztunnel's own, a metrics port)
)

// conn is a connection on a port the table is read on. Its identity is its cookie alone
// (id): the backend does not tell apart, by inode, two connections on the same ends that a
// read from /proc shows (see id).
type conn struct {
	cookie    uint64
	kind      connKind
	port      uint16
	client    *client
	opened    time.Time
	baseline  bool // open when the watch began
	recv      sockets.Received
	seen      int
	destroyed bool
	// timeWait: first seen as TIME_WAIT. A connection no read showed open carries no cookie
	// of its own into TIME_WAIT (the kernel makes one only when asked), so its full socket's
	// record, with another cookie, is matched by its addresses.
	timeWait bool
}

type client struct {
	addr              netip.Addr
	ignored           bool
	firstSeen         time.Time
	open              int
	newConns          int
	lastNewConn       time.Time
	newPastBound      int
	lastNewPastBound  time.Time
	lastData          time.Time
	oldData           time.Time // latest data on a connection opened before the bound (or the watch)
	sendingOldSince   time.Time // first data past the bound on such a connection
	counted           bool      // showed activity that counted
	lastCountedAction time.Time
	// lastCountedOther is its latest counted activity but the data on connections opened
	// before the bound: once it is seen to never learn (sendingOldSince), that data was no
	// learning client's (Summary.LastLearning).
	lastCountedOther time.Time
	// opens is how it opens connections: past the bound, at the period it had before, it
	// addresses the pod directly (cadence.go).
	opens cadence
}

// New checks the options; nothing is read until the first Inbound.
func New(o Options) (*Kernel, error) {
	if len(o.Ports) == 0 {
		return nil, errors.New("--port: --mesh none needs the app's own listening ports (repeatable)")
	}
	if err := (mesh.Selector{Ports: o.Ports}).Validate(); err != nil {
		return nil, fmt.Errorf("--%w", err)
	}
	if o.Reader == nil {
		o.Reader = sockets.NewReader()
	}
	if o.SNMPPath == "" {
		o.SNMPPath = sockets.DefaultSNMPPath
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Start.IsZero() {
		o.Start = o.Now()
	}
	k := &Kernel{opts: o, watched: map[uint16]bool{}, conns: map[sockets.ConnKey]*conn{},
		clients: map[netip.Addr]*client{}, activity: map[uint16]float64{}, active: map[uint16]float64{}, credit: map[uint16]float64{}, lastKind: ActivityNone}
	for _, p := range o.Ports {
		k.watched[uint16(p)] = true
	}
	if o.AppRequests != nil {
		k.app = &appRequests{src: o.AppRequests}
	}
	return k, nil
}

// Hints: there is no sidecar to fix, only --port.
func (k *Kernel) Hints() mesh.Hints {
	return mesh.Hints{
		MissingStats: "--port: name the app's own listening ports (meshdrain check --mesh none lists the ports that listen in the pod)",
		NoDrainCall:  NoDrainCallReason,
	}
}

// NoDrainCallReason says why a pod without a sidecar gets no drain call.
const NoDrainCallReason = "--mesh none: there is no sidecar to drain; the app's own graceful shutdown after SIGTERM closes its connections (Connection: close on the next response, HTTP/2 GOAWAY, idle connections closed)"

// DrainListeners does nothing: the app drains itself once it gets SIGTERM.
func (k *Kernel) DrainListeners(context.Context, mesh.DrainMode) error { return nil }

// Close stops watching the kernel's destruction records.
func (k *Kernel) Close() {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.gone != nil {
		k.gone.Close()
		k.gone = nil
	}
}

// Inbound reads the namespace's counters and, when they moved, the socket table, and returns
// one endpoint per watched port: a port nobody listens on has no stats (the drain names it,
// as a sidecar's missing port). With no ports selected, every listening port of the pod is
// returned, for the drain's check of --port.
func (k *Kernel) Inbound(ctx context.Context, sel mesh.Selector) (mesh.Snapshot, error) {
	requests, read, appErr := k.readApp(ctx)
	k.mu.Lock()
	defer k.mu.Unlock()
	if err := k.open(); err != nil {
		return mesh.Snapshot{}, err
	}
	if err := k.poll(); err != nil {
		return mesh.Snapshot{}, err
	}
	k.foldApp(k.opts.Now(), requests, read, appErr)
	return k.snapshot(sel), nil
}

func (k *Kernel) snapshot(sel mesh.Selector) mesh.Snapshot {
	snap := mesh.Snapshot{Naming: mesh.NamingKernel}
	ports := sel.Ports
	if len(ports) == 0 {
		for _, p := range k.listening {
			ports = append(ports, int(p))
		}
	}
	appPort := k.firstListeningWatched() // where the app's own counts are shown
	for _, p := range ports {
		port := p
		e := mesh.Endpoint{Port: &port, Name: fmt.Sprintf("kernel:%d", p)}
		if slices.Contains(k.listening, uint16(p)) {
			e.ClientActivityTotal = ptr(k.activity[uint16(p)])
			if uint16(p) == appPort {
				*e.ClientActivityTotal += k.appExtra
			}
			if k.tcpInfo {
				e.ClientRequestsActive = ptr(k.active[uint16(p)])
			}
		}
		snap.Endpoints = append(snap.Endpoints, e)
	}
	return snap
}

func ptr(v float64) *float64 { return &v }

// open reads the baseline: the listeners, the connections open now (not accepts), and the
// counters; it joins the destruction records.
func (k *Kernel) open() error {
	if k.opened {
		return k.openErr
	}
	counters, err := sockets.ReadTCPCounters(k.opts.SNMPPath)
	if err != nil {
		// Without PassiveOpens, accepts between two reads cannot be counted: no signal.
		return fmt.Errorf("--mesh none: reading the pod's TCP counters: %w", err)
	}
	if err := k.listeners(); err != nil {
		return err
	}
	if g, ok := k.opts.Reader.(sockets.GoneWatcher); ok && len(k.readPorts) > 0 {
		k.gone, k.goneErr = g.WatchGone(k.readPorts)
	} else {
		k.goneErr = errors.New("the socket table reader cannot watch connections being freed")
	}
	now := k.opts.Now()
	socks, err := k.opts.Reader.Read(k.readPorts)
	if err != nil {
		k.Close()
		return fmt.Errorf("--mesh none: reading the socket table: %w", err)
	}
	k.opened = true
	for _, s := range socks {
		k.tcpInfo = k.tcpInfo || s.HasTCPInfo
		if skipped(s) {
			continue
		}
		c := k.newConn(now, s)
		c.baseline, c.seen = true, 0
		k.conns[sockets.KeyOf(s)] = c
		if c.client != nil {
			c.client.open++
		}
	}
	if k.gone != nil {
		k.gone.Take() // connections freed before the baseline
	}
	if _, diag := k.opts.Reader.(sockets.DiagReader); diag {
		k.tcpInfo = true
	}
	if a, ok := k.opts.Reader.(*sockets.AutoReader); ok && a.FellBack() == nil {
		k.tcpInfo = true
	}
	k.counters, k.atRead, k.lastRead, k.baselineAt = counters, counters, now, now
	return nil
}

// listeners reads the namespace's listening ports: the accepts on every one of them are in
// PassiveOpens, so the table is read on all of them to name each accept.
func (k *Kernel) listeners() error {
	lr, ok := k.opts.Reader.(sockets.ListenerReader)
	if !ok {
		return errors.New("--mesh none: the socket table reader cannot read listening sockets")
	}
	ls, err := lr.Listeners(nil)
	if err != nil {
		return fmt.Errorf("--mesh none: reading the listening sockets: %w", err)
	}
	seen := map[uint16]bool{}
	var ports []uint16
	for _, l := range ls {
		if p := l.Local.Port(); !seen[p] {
			seen[p] = true
			ports = append(ports, p)
		}
	}
	sort.Slice(ports, func(i, j int) bool { return ports[i] < ports[j] })
	k.listening = ports
	read := slices.Clone(ports)
	for p := range k.watched {
		if !seen[p] {
			read = append(read, p)
		}
	}
	if len(read) > maxReadPorts {
		// The watched ports first: accepts on the others left out become unknown clients.
		sort.Slice(read, func(i, j int) bool { return k.watched[read[i]] && !k.watched[read[j]] })
		read = read[:maxReadPorts]
	}
	k.readPorts = read
	return nil
}

// maxReadPorts is the most ports the table and the destruction records are read on
// (sockets.WatchGone's limit).
const maxReadPorts = 200

// skipped are the sockets that are no connection yet: a handshake in progress is not
// counted in PassiveOpens until it completes.
func skipped(s sockets.Socket) bool {
	return s.State == sockets.SynRecv || s.State == sockets.NewSynRecv || s.State == sockets.Listen
}

// own says whether a connection from remote is the hook's own (Options.Own).
func (k *Kernel) own(remote netip.AddrPort) bool {
	return k.opts.Own != nil && k.opts.Own(remote)
}

func (k *Kernel) ignored(addr netip.Addr) bool {
	for _, p := range k.opts.Ignore {
		if p.Contains(addr) {
			return true
		}
	}
	return false
}

func (k *Kernel) newConn(now time.Time, s sockets.Socket) *conn {
	c := &conn{cookie: s.Cookie, port: s.Local.Port(), opened: now, recv: sockets.ReceivedBy(s), seen: k.reads}
	switch {
	case !k.watched[c.port] || k.own(s.Remote):
		// The hook's own reads of the app's metrics are no client's, nor is their address:
		// a proxy of the pod that forwards to the app from the same loopback address stays
		// a client.
		c.kind = otherPort
	case s.FromThePod() || k.ignored(s.Remote.Addr()):
		c.kind = ignoredConn
		c.client = k.client(s.Remote.Addr(), now, true)
	default:
		c.client = k.client(s.Remote.Addr(), now, false)
	}
	return c
}

func (k *Kernel) client(addr netip.Addr, now time.Time, ignored bool) *client {
	c, ok := k.clients[addr]
	if !ok {
		c = &client{addr: addr, firstSeen: now, ignored: ignored}
		k.clients[addr] = c
	}
	return c
}

// boundAt is when the lag bound passes; zero when there is none.
func (k *Kernel) boundAt() time.Time {
	if k.opts.LagBound <= 0 {
		return time.Time{}
	}
	return k.opts.Start.Add(k.opts.LagBound)
}

// pastBound says whether t is past the lag bound.
func (k *Kernel) pastBound(t time.Time) bool {
	b := k.boundAt()
	return !b.IsZero() && !t.Before(b)
}

// old says whether c was opened before the lag bound (with none, before the watch began):
// routed per connection, it goes on to this pod whatever its client's routing learns.
func (k *Kernel) old(c *conn) bool {
	if b := k.boundAt(); !b.IsZero() {
		return c.baseline || c.opened.Before(b)
	}
	return c.baseline
}

// countedOpen says whether a connection still open at the latest read counts: a client's
// that is not old (opened past the lag bound, or with none, since the watch began), nor a
// caller's that addresses the pod directly.
func (k *Kernel) countedOpen() bool {
	for _, c := range k.conns {
		if c.kind == clientConn && !c.destroyed && !c.timeWait && !k.old(c) && !k.notWaitedFor(c.client) {
			return true
		}
	}
	return false
}

// addActivity counts n on port, the latest of it at at, found by the read r: first against
// the credit counted ahead of r, so that an activity is in the counter once. r has then found
// activity that counts, and the next credit goes to port.
func (k *Kernel) addActivity(r *readResult, port uint16, n float64, at time.Time) {
	paid := min(n, k.credit[port])
	k.credit[port] -= paid
	k.activity[port] += n - paid
	if n > paid {
		k.movedAt = r.countersAt
	}
	r.counted, k.creditPort = later(r.counted, at), port
}

// account sets what PassiveOpens counted against the accepts this read named (namedNew: shown
// by the table for the first time; namedLate: by a record, or first seen half open): one that
// stays unnamed for unnamedAfter (and at least one more read) is an unknown client's. The
// kernel broadcasts a freed socket's record from a work queue, so a connection opened and
// closed just before a read is named a little later; a read can come milliseconds after the
// last.
func (k *Kernel) account(r *readResult, counters sockets.TCPCounters, namedNew, namedLate int) {
	now := r.at
	opened := int64(0)
	if counters.PassiveOpens > k.atRead.PassiveOpens {
		opened = int64(counters.PassiveOpens - k.atRead.PassiveOpens)
	}
	// An accept that PassiveOpens counted at a read and that the next read did not name
	// either is an unknown client's once unnamedAfter has passed, before this read's names pay
	// for anything: a connection is named at the read whose counters hold its accept or at the
	// next (it was accepted between that read's table and its counters, or its record came a
	// little late), so a name now belongs to a recent accept, and paying an old one with it
	// would leave the recent one to count as an unknown client's later, stretching the wait.
	var unknown int64
	var unknownAt time.Time // the latest read whose counters held one of them
	for len(k.pending) > 0 && now.Sub(k.pending[0].at) >= unnamedAfter && k.reads > k.pending[0].read+1 {
		unknown += k.pending[0].n
		unknownAt = later(unknownAt, k.pending[0].at)
		k.pending = k.pending[1:]
	}
	// The named accepts pay for the oldest unnamed ones each can be first: what is left
	// unnamed is the least that can be, at the latest reads. A record may name an accept of
	// any earlier read. A connection the table shows for the first time is one of the
	// previous read's (accepted between its table and its counters) or of this one's, never
	// older: a kubelet probe answered and closed between two reads pays for its own accept,
	// not for an older one that no name will come for, which would leave its own unnamed with
	// a late time, to count as an arrival long after the traffic stopped.
	left := k.pay(int64(namedLate), 0) + k.pay(int64(namedNew), k.reads-1)
	if rest := opened - left; rest > 0 {
		k.pending = append(k.pending, unnamedAccepts{n: rest, at: r.countersAt, read: k.reads})
	}
	for len(k.pending) > 0 && now.Sub(k.pending[0].at) >= unnamedAfter && k.reads > k.pending[0].read {
		unknown += k.pending[0].n
		unknownAt = later(unknownAt, k.pending[0].at)
		k.pending = k.pending[1:]
	}
	k.unattributed = 0
	for _, p := range k.pending {
		k.unattributed += p.n
	}
	if unknown > 0 {
		// They came no later than unknownAt. Where the counter went up at a poll that read the
		// counters no earlier, the silence the rule measures began after them (the rule takes
		// a poll's time once it has returned): counting them now would move the
		// counter long after they came (names pay the oldest unnamed accepts first, so while
		// requests come the unnamed ones move on to the latest reads, and are known for
		// unknown only a while after the last request) and pass for a late arrival.
		k.unknownAccepts += int(unknown)
		k.lastUnknown = later(k.lastUnknown, unknownAt)
		if k.movedAt.Before(unknownAt) {
			k.addActivity(r, k.firstListeningWatched(), float64(unknown), unknownAt)
			k.lastKind, k.lastActivity = ActivityUnknownClient, unknownAt
		}
	}
}

// unnamedAccepts are accepts PassiveOpens counted at a read that no read or record named.
type unnamedAccepts struct {
	n    int64
	at   time.Time
	read int
}

// pay lets n names pay for the oldest unnamed accepts counted at read since or later, and
// returns the names left for this read's own accepts.
func (k *Kernel) pay(n int64, since int) int64 {
	for i := 0; i < len(k.pending) && n > 0; {
		p := &k.pending[i]
		if p.read < since {
			i++
			continue
		}
		m := min(n, p.n)
		p.n -= m
		n -= m
		if p.n == 0 {
			k.pending = slices.Delete(k.pending, i, i+1)
		}
	}
	return n
}

// unnamedAfter is how long an accept may stay unnamed before it counts as an unknown
// client's: the kernel's work queue sends a freed socket's record within milliseconds, far
// less on a machine that keeps its work queues running.
const unnamedAfter = 250 * time.Millisecond

func (k *Kernel) firstListeningWatched() uint16 {
	for _, p := range k.opts.Ports {
		if slices.Contains(k.listening, uint16(p)) {
			return uint16(p)
		}
	}
	return uint16(k.opts.Ports[0])
}

// observe takes one socket of the read r and returns 1 if it names an accept.
func (k *Kernel) observe(r *readResult, s sockets.Socket) int {
	now := r.at
	key := sockets.KeyOf(s)
	c, ok := k.conns[key]
	if ok && !c.id().Same(s) {
		// The same addresses, a later connection: the earlier one's record, if still to
		// come, finds it among the forgotten and names nothing.
		if !c.destroyed {
			k.forgotten.Remember(c.cookie, c, k.reads)
		}
		ok = false
	}
	if !ok {
		if gone, found := k.forgotten.Take(s.Cookie); found {
			// A connection a read missed (a dump resumes a hash bucket by position, and can
			// skip one when another in the bucket is freed meanwhile), shown again: the same.
			c, ok = gone, true
			k.conns[key] = c
		}
	}
	if !ok {
		// A TIME_WAIT socket no read showed open (the pod's side closed first, between two
		// reads) is named here, at the read whose counters hold its accept; its full
		// socket's record, now or at the next read, finds it and names nothing more.
		c = k.newConn(now, s)
		c.timeWait = s.State == sockets.TimeWait
		k.conns[key] = c
		c.seen = k.reads
		k.accepted(r, c)
		k.countOpen(c, s)
		k.inFlight(r, c, s)
		return 1
	}
	c.seen = k.reads
	if s.Cookie != 0 {
		c.cookie = s.Cookie
	}
	if c.kind == clientConn && k.own(s.Remote) {
		// The hook's own connection, recorded only once a read had shown it (a dial that
		// finished after its request gave up): what it counted stays counted, nothing more.
		c.kind, c.client = otherPort, nil
	}
	k.countOpen(c, s)
	if segsBefore := c.recv.Segs; c.recv.Grew(s) {
		k.data(r, c, s.DataAt(now), segments(segsBefore, s.DataSegsIn))
	}
	k.inFlight(r, c, s)
	return 0
}

func (k *Kernel) countOpen(c *conn, s sockets.Socket) {
	if c.client != nil && s.State == sockets.Established {
		c.client.open++
	}
}

// inFlight counts a request not yet answered, at the read r, on a connection that counts.
func (k *Kernel) inFlight(r *readResult, c *conn, s sockets.Socket) {
	if c.kind == clientConn && s.State == sockets.Established && s.InFlight() && !(k.old(c) && k.pastBound(r.at)) && !k.notWaitedFor(c.client) {
		k.active[c.port]++
	}
}

// record takes one destruction record, with the read r, and returns 1 if it names an accept
// no read showed.
func (k *Kernel) record(r *readResult, f sockets.Socket) int {
	now := r.at
	if f.Cookie == 0 {
		return 0
	}
	var c *conn
	if gone, ok := k.forgotten.Take(f.Cookie); ok {
		c = gone
	} else if known, ok := k.conns[sockets.KeyOf(f)]; ok && (known.cookie == f.Cookie || known.timeWait) {
		// Matched once: a later connection on the same addresses is another.
		c, known.timeWait = known, false
	}
	if c == nil {
		if f.DataBefore(k.baselineAt) {
			// Freed just before the baseline read, its record late: an accept of before the
			// watch, in the baseline's PassiveOpens, and no activity of the drain.
			return 0
		}
		// Opened and closed between two reads.
		c = k.newConn(now, f)
		c.destroyed = true
		k.accepted(r, c)
		return 1
	}
	if c.destroyed {
		return 0
	}
	c.destroyed = true
	// More than the FIN the record's count may hold: data since the last read.
	if c.recv.InRecord(f) {
		k.data(r, c, f.DataAt(now), segments(c.recv.Segs, f.DataSegsIn))
	}
	return 0
}

// accepted counts a new connection the read r named.
func (k *Kernel) accepted(r *readResult, c *conn) {
	now := r.at
	if c.kind != clientConn {
		r.uncounted = true
		return
	}
	cl := c.client
	cl.newConns++
	cl.lastNewConn = now
	cl.opens.open(now, k.pastBound(now))
	if k.pastBound(now) {
		cl.newPastBound++
		cl.lastNewPastBound = now
	}
	if k.notWaitedFor(cl) {
		r.uncounted = true
		return
	}
	cl.lastCountedOther = later(cl.lastCountedOther, now)
	r.accepts++
	k.count(r, now, cl, c.port, ActivityNewConnection, 1)
}

// segments is how many requests new data stands for: the data segments received since the
// last read (a small request is one), at least one.
func segments(then, now uint32) int {
	if now > then && then > 0 {
		return int(now - then)
	}
	return 1
}

// data counts new data on an open connection that the read r found (n segments, the last at
// at), unless it is an old connection's past the bound: its client never learns, and it is
// named instead.
func (k *Kernel) data(r *readResult, c *conn, at time.Time, n int) {
	if c.kind != clientConn {
		r.uncounted = true
		return
	}
	cl := c.client
	cl.lastData = later(cl.lastData, at)
	if k.old(c) {
		cl.oldData = later(cl.oldData, at)
		if k.pastBound(at) {
			if cl.sendingOldSince.IsZero() {
				cl.sendingOldSince = at
			}
			r.uncounted = true
			return
		}
		r.oldBefore = true
	} else if k.notWaitedFor(cl) {
		r.uncounted = true
		return
	} else {
		cl.lastCountedOther = later(cl.lastCountedOther, at)
	}
	r.data += n
	k.count(r, at, cl, c.port, ActivityData, n)
}

// notWaitedFor says whether cl's activity past the bound counts nothing: it addresses the
// pod directly (cadence.go), and --wait-past-bound-openers was not given. Only a client that
// opened past the bound can be one.
func (k *Kernel) notWaitedFor(cl *client) bool {
	return cl != nil && !k.opts.WaitPastBoundOpeners && cl.opens.direct()
}

func (k *Kernel) count(r *readResult, at time.Time, cl *client, port uint16, kind string, n int) {
	cl.counted = true
	cl.lastCountedAction = later(cl.lastCountedAction, at)
	k.addActivity(r, port, float64(n), at)
	if !at.Before(k.lastActivity) {
		k.lastKind, k.lastActivity = kind, at
	}
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// id is c's identity for sockets.ConnID.Same, by cookie only: a read from /proc (no cookie)
// shows the same connection as long as its ends stay, as this backend has always counted it
// (the per-client evidence's tracker tells /proc connections apart by inode too); an accept
// no read named is then PassiveOpens' unknown one.
func (c *conn) id() sockets.ConnID { return sockets.ConnID{Cookie: c.cookie} }

// observeTable takes the sockets of the read r and returns the accepts they name: namedNew
// those the table shows for the first time, namedLate those that may be older. A connection
// the table shows for the first time was accepted after the previous read's table (it would
// have been in it), unless that read skipped it half open (synRecv) or the table comes
// without cookies (/proc); a record can come any number of reads after its accept.
func (k *Kernel) observeTable(r *readResult, socks []sockets.Socket) (namedNew, namedLate int) {
	for _, cl := range k.clients {
		cl.open = 0
	}
	clear(k.active)
	for _, s := range socks {
		if skipped(s) {
			if s.State == sockets.SynRecv {
				k.synRecv.Remember(s.Cookie, struct{}{}, k.reads)
			}
			continue
		}
		if s.HasTCPInfo {
			k.tcpInfo = true
		}
		n := k.observe(r, s)
		if _, half := k.synRecv.Take(s.Cookie); half || s.Cookie == 0 {
			// Half open at an earlier read, or read from /proc (no cookie: a connection a
			// read missed cannot be told from a new one): possibly an older accept.
			namedLate += n
		} else {
			namedNew += n
		}
	}
	return namedNew, namedLate
}

// forgetUnseen drops the connections the latest read did not show, remembering those whose
// record is still to come (forgotten).
func (k *Kernel) forgetUnseen() {
	for key, c := range k.conns {
		if c.seen == k.reads {
			continue
		}
		delete(k.conns, key)
		if !c.destroyed {
			k.forgotten.Remember(c.cookie, c, k.reads)
		}
	}
	k.forgotten.Expire(k.reads)
}
