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

	// conns are the connections on the ports the table is read on (conns.go); synRecv the
	// full sockets a read skipped half open (a TCP Fast Open accept, counted at its SYN), by
	// cookie, remembered as long as a gone connection (sockets.VanishedReads).
	conns   *sockets.Conns[*conn]
	synRecv sockets.VanishedConns[struct{}]
	clients map[netip.Addr]*client
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
	k := &Kernel{opts: o, watched: map[uint16]bool{}, conns: sockets.NewConns[*conn](connPolicy),
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
		ev := k.conns.Show(s) // read 0: the baseline
		if ev.Kind != sockets.Accepted {
			continue
		}
		c := k.newConn(now, s)
		c.baseline, ev.Conn.Of = true, c
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
