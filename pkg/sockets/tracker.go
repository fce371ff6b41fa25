package sockets

import (
	"iter"
	"net/netip"
	"time"
)

// Tracker turns successive reads of the socket table into per-client evidence. It does no
// I/O and reads no clock: every read comes with its time. Not safe for concurrent use.
type Tracker struct {
	read int // number of reads observed after Begin
	// conns are the connections the reads show, drain-start ones and others (tracked), as the
	// sockets table's events tell them (trackerPolicy).
	conns   *Conns[tracked]
	clients map[netip.Addr]*clientEvidence
	// The same drain-start connections and clients, in slices, which iterate faster.
	drainList  []*drainConn
	clientList []*clientEvidence
	// undrained: the pod's sidecar tells no connection to close (Undrained), and poolIdle
	// is how long an answered connection must stay open to show a pool.
	undrained bool
	poolIdle  time.Duration
	// arrived: requests reached the pod since the previous read (RequestsArrived).
	arrived bool
	// final: the kernel's records of connections freed since the previous read (Closed), and
	// finalComplete whether none was lost.
	final         []Socket
	finalComplete bool
	// drainBegins: the sidecar began to drain, for the next Observe (DrainBegins).
	drainBegins bool
	// lastAt is the time of the latest read, and begun that of the read that began the
	// drain (Begin, or the read after DrainBegins).
	lastAt, begun time.Time
}

// Closed gives the next Observe the kernel's records of the connections freed since the
// previous read (GoneWatch.Take, taken before that read), and whether none was lost. A
// drain-start connection gone from the table then counts as carrying a request only if its
// final bytes received say so, whatever other clients sent meanwhile. One gone without its
// record yet (the kernel broadcasts from a work queue, just after it drops the socket from
// the table) is judged at the next read, as still held until then; where records are lost or
// not watched, by RequestsArrived. A record of a connection no read showed (opened and closed
// between two reads: a client opening one per request) is a new connection of its client.
func (t *Tracker) Closed(final []Socket, complete bool) {
	t.final, t.finalComplete = final, complete
}

// BeganAt says that the drain began at start, a moment before the drain-start read (the hook
// starts, then reads): a record of a connection no read showed counts as activity of the
// drain unless all its data came before start.
func (t *Tracker) BeganAt(start time.Time) {
	if !start.IsZero() && start.Before(t.begun) {
		t.begun = start
	}
}

// sentAt is when the pod's side last sent data on s (its last response), from tcp_info; zero
// when unknown or it has sent nothing.
func sentAt(at time.Time, s Socket) time.Time {
	if !s.HasTCPInfo || s.NothingSent || s.BytesReceived == 0 {
		return time.Time{}
	}
	return at.Add(-s.SinceLastDataSent)
}

// RequestsArrived says that requests reached the pod since the previous read (its sidecar's
// arrival counter moved, or is unknown), for the next Observe. While the pod drains, a
// connection can carry a request, be told Connection: close and be closed by its client, all
// between two reads: gone, its bytes never seen to grow, it would look like an idle one its
// client let go. Where the kernel's records of freed connections are at hand (Closed) they
// say so for each connection; without them, a connection gone from the table counts as a
// departure only across reads between which no request reached the pod at all, from any
// client: one busy client then hides every other client's departure (issue 27).
func (t *Tracker) RequestsArrived() { t.arrived = true }

// trackerPolicy is how the tracker follows connections (ConnPolicy): by cookie and inode, so
// that two connections on the same ends that /proc shows are told apart; a connection a read
// missed is a new one when shown again, unless it is a drain-start connection (Conn.Kept); a
// record with another cookie on a connection's ends is its only if a read showed it without
// a cookie (/proc). What is the sidecar's own (sidecarsOwn) never reaches the table.
var trackerPolicy = ConnPolicy{RecordByAddress: MatchUncookied}

// tracked is what the tracker keeps of a connection: a drain-start one or another.
type tracked struct {
	drain *drainConn
	other *otherConn
}

type trackedConn = Conn[tracked]

// recordOf is the destruction record of c, if one with its own cookie has come: one matched by
// its ends to a connection read without a cookie says nothing of it.
func recordOf(c *trackedConn) (Socket, bool) {
	if c.Freed && c.ID.Cookie != 0 && c.Final.Cookie == c.ID.Cookie {
		return c.Final, true
	}
	return Socket{}, false
}

type connFate uint8

const (
	stillOpen connFate = iota
	closedByClient
	closedByPod
)

// drainConn is a connection that was ESTABLISHED when the drain began.
type drainConn struct {
	conn     *trackedConn // its identity, bytes received and record
	client   *clientEvidence
	used     bool      // data arrived since the drain began
	usedRead int       // read that first showed data (0: none, or the drain's start)
	busy     bool      // a request was in flight at the last read (tcp_info)
	sentAt   time.Time // when the pod last sent on it, as the last read showed (sentAt)
	answered bool      // the last read showed it answered (see otherConn)
	fate     connFate
	start    Socket // as the drain began
	// goneRead: the read that found it gone while its kernel record had not come
	// (Tracker.Closed), and arrivedThen whether requests had reached the pod by then.
	goneRead    int
	arrivedThen bool
}

// otherConn is any other connection: one that was not ESTABLISHED at drain start, or one
// opened since. It is kept while reads show it, to count it once and see data on it.
type otherConn struct {
	client *clientEvidence
	// sightings counts the reads that showed it ESTABLISHED; closed, that its close was
	// seen (counted once).
	sightings int
	closed    bool
	busy      bool // a request was in flight at the last read (tcp_info)
	// answered: the last read showed it answered (tcp_info), so more bytes after it are a
	// second request.
	answered bool
	// state at the last read; dataRead the read that last showed data on it (DrainBegins).
	state    State
	dataRead int
	sentAt   time.Time
}

// sidecarsOwn says whether s comes from the pod itself to one of the pod's own addresses,
// from a loopback address or Istio's ::6, which no client pod has: the sidecar's connection
// to the app, or a health probe pilot-agent forwards, when the watched ports include an app's.
// Istio binds its inbound upstream connections to 127.0.0.6, or ::6 where the pod has no
// IPv4 (istio/istio pilot/pkg/networking/core cluster_builder.go, the inbound clusters'
// upstream_bind_config; "6 is the magical number for inbound"), so that its iptables rules
// let them through. Kept, such a connection would look like a client's idle pooled
// connection and hold the app. (Under TPROXY interception Istio keeps the client's address
// instead, with Envoy's original_src listener filter: those connections then carry the
// client's address, and only their owner tells them apart: Owned.) A socket whose own end is
// on loopback (a pod whose listener is 127.0.0.1, as the simulator's is) keeps its loopback
// clients.
func (s Socket) sidecarsOwn() bool {
	return s.FromThePod() || (s.Remote.Addr() == istioInboundBindIPv6 && !s.Local.Addr().IsLoopback())
}

// istioInboundBindIPv6 is ::6, Istio's source address for inbound connections to the app
// where the pod has no IPv4.
var istioInboundBindIPv6 = netip.AddrFrom16([16]byte{15: 6})

// Begin starts tracking from the read taken when the drain began: its ESTABLISHED sockets
// are the drain-start connections whose fate is the evidence.
func Begin(at time.Time, drainStart []Socket) *Tracker {
	t := &Tracker{
		conns:   NewConns[tracked](trackerPolicy),
		clients: make(map[netip.Addr]*clientEvidence),
	}
	for _, s := range drainStart {
		if s.sidecarsOwn() {
			continue
		}
		ev := t.conns.Show(s)
		if ev.Kind != Accepted {
			continue
		}
		if s.State != Established {
			o := &otherConn{}
			if s.State == SynRecv || s.State == NewSynRecv {
				// A client connecting as the drain begins; a connection already closing
				// is no client's (it counts if it shows data, in Observe).
				o.client = t.client(s.Remote.Addr(), at)
			}
			ev.Conn.Of = tracked{other: o}
			continue
		}
		c := t.client(s.Remote.Addr(), at)
		c.heldAtStart++
		// A request in flight as the drain begins is answered during it: the connection
		// is not idle since the start.
		d := &drainConn{conn: ev.Conn, client: c, used: s.InFlight(), busy: s.InFlight(), answered: answered(s), start: s, sentAt: sentAt(at, s)}
		ev.Conn.Of, ev.Conn.Kept = tracked{drain: d}, true
		t.drainList = append(t.drainList, d)
	}
	t.lastAt, t.begun = at, at
	t.judge(at)
	return t
}

// Observe takes a later read of the table, taken at at.
func (t *Tracker) Observe(at time.Time, socks []Socket) {
	t.read++
	if t.drainBegins {
		t.undrained = false
		for _, c := range t.clientList {
			if c.state == Left {
				c.leftRead = t.read - 1
			}
		}
	}
	t.conns.NextRead()
	for _, s := range socks {
		if s.sidecarsOwn() {
			continue
		}
		ev := t.conns.Show(s)
		if d := ev.Conn.Of.drain; d != nil {
			t.observeDrainConn(at, d, ev)
			continue
		}
		t.observeOtherConn(at, ev)
	}
	t.records(at)
	t.drainConnsGone(at)
	t.arrived = false
	t.conns.EndRead(func(ev ConnEvent[tracked]) { t.otherConnGone(at, ev) })
	if t.drainBegins {
		t.rebase()
		t.drainBegins, t.begun = false, at
	}
	t.lastAt = at
	t.judge(at)
}

// observeOtherConn takes a socket of the read at that is no drain-start connection: a new
// connection of its client, or data on one seen before.
func (t *Tracker) observeOtherConn(at time.Time, ev ConnEvent[tracked]) {
	s, o := ev.Socket, ev.Conn.Of.other
	if ev.Kind == Accepted {
		o = &otherConn{}
		ev.Conn.Of = tracked{other: o}
		o.client = t.client(s.Remote.Addr(), at)
		o.client.newConns++
		o.client.lastNewConn = t.read
		t.newConnSeen(o.client, s, at)
	} else if ev.Data {
		if o.client == nil {
			o.client = t.client(s.Remote.Addr(), at)
		}
		o.dataRead = t.read
		t.newConnData(o.client, s.DataAt(at))
		// A request after an answered one: the connection is reused, as a pool's.
		o.client.pools = o.client.pools || (t.undrained && o.answered)
	}
	o.answered = answered(s)
	o.state = s.State
	if sent := sentAt(at, s); !sent.IsZero() {
		o.sentAt = sent
	}
	if s.State == Established {
		if o.client == nil {
			o.client = t.client(s.Remote.Addr(), at)
		}
		o.sightings++
		o.busy = s.InFlight()
		o.client.pools = o.client.pools || (t.undrained && t.pooled(s))
	}
	if ev.ClosedBy() == ClosedByClient {
		t.closedOther(o, at)
	}
}

// drainConnsGone judges the drain-start connections still open at the last read that the
// read at no longer shows, with their records if they have come (this read's, or one that
// came while a read still showed it).
func (t *Tracker) drainConnsGone(at time.Time) {
	for _, d := range t.drainList {
		c := d.conn
		if d.fate != stillOpen || c.Seen == t.read {
			continue
		}
		// Gone without passing through FIN_WAIT or TIME_WAIT on our side: the client closed
		// it (or one side reset it). Whether it carried a request before, its final bytes
		// tell (Closed); without them, if requests arrived meanwhile, one may have been on it.
		f, recorded := recordOf(c) // without a record, closedBy is this read
		switch {
		case recorded:
			d.client.pools = d.client.pools || t.pooledAtClose(d.answered, c.Recv, f)
			if !c.Recv.Have || !f.HasTCPInfo || c.Recv.InRecord(f) {
				// Data, or nothing to tell: counted as data.
				t.usedBeforeClose(d, f.DataAt(at))
			}
		case t.finalComplete && c.ID.Cookie != 0 && d.goneRead == 0:
			d.goneRead, d.arrivedThen = t.read, t.arrived
			continue // judged at the next read, when its record has come
		case (t.arrived || d.arrivedThen) && !t.undrained:
			t.usedBeforeClose(d, at)
		}
		t.closed(d, closedByClient, f.closedBy(at))
	}
}

// otherConnGone closes an other connection the read at no longer shows, with its record if
// it came with this read (one that came while a read still showed it says nothing more).
func (t *Tracker) otherConnGone(at time.Time, ev ConnEvent[tracked]) {
	o := ev.Conn.Of.other
	if o == nil {
		return
	}
	// Gone without TIME_WAIT on our side: closed by the client.
	f, recorded := recordOf(ev.Conn)
	if recorded = recorded && ev.Conn.FreedRead == t.read; !recorded {
		f = Socket{} // without a record, closedBy is this read
	}
	t.closedOther(o, f.closedBy(at))
	if recorded && o.client != nil {
		o.client.pools = o.client.pools || t.pooledAtClose(o.answered, ev.Conn.Recv, f)
		if ev.Conn.Recv.InRecord(f) {
			t.activity(o.client, f.DataAt(at))
		}
	}
}

// usedBeforeClose records that a drain-start connection carried data before its client
// closed it, between two reads.
func (t *Tracker) usedBeforeClose(d *drainConn, when time.Time) {
	d.used = true
	if d.usedRead == 0 {
		d.usedRead = t.read
	}
	t.activity(d.client, when)
}

// records takes the records Closed gave for this read: a record the table matches to no
// connection a read showed is a brief one (briefConnection).
func (t *Tracker) records(at time.Time) {
	for _, f := range t.final {
		if f.sidecarsOwn() {
			continue
		}
		if ev, ok := t.conns.Record(f); ok && ev.Kind == Brief {
			t.briefConnection(at, f)
		}
	}
	t.final = nil
}

// Vanished returns the cookies of the drain-start connections that socks, a read about to
// be observed, no longer shows and whose records final does not hold: the records to wait
// for (GoneWatch.Await) before judging that read.
func (t *Tracker) Vanished(socks, final []Socket) []uint64 {
	shown := make(map[uint64]bool, len(socks)+len(final))
	for _, list := range [][]Socket{socks, final} {
		for _, s := range list {
			shown[s.Cookie] = true
		}
	}
	var missing []uint64
	for _, d := range t.drainList {
		c := d.conn
		if _, early := recordOf(c); d.fate == stillOpen && c.ID.Cookie != 0 && !shown[c.ID.Cookie] && !early {
			missing = append(missing, c.ID.Cookie)
		}
	}
	return missing
}

// briefConnection counts the record f of a connection no read showed: opened and closed
// between two reads, as a client opening a connection per request does while the pod drains.
// A record of a connection a read did show (a drain-start one, one still in the table as
// TIME_WAIT, one gone in the last reads) is not one: the table matched it (Conns.Record).
func (t *Tracker) briefConnection(at time.Time, f Socket) {
	c := t.client(f.Remote.Addr(), at)
	if t.undrained {
		c.pools = c.pools || t.pooledAtClose(false, Received{}, f)
	}
	if f.DataBefore(t.begun) {
		// Its data all came before the drain-start read, which did not show it: it
		// closed just before that read, or as it walked the table. It was no connection
		// of the drain, and what it carried was sent before the drain began (a client
		// that lets go of it at the deletion shows no activity since).
		return
	}
	c.newConns++
	c.lastNewConn = t.read
	t.newConnSeen(c, f, at)
	if t.undrained {
		// Gone without TIME_WAIT on our side: its client closed it (Undrained).
		c.lastUsedClose = t.read
		c.closedAt(f.closedBy(at))
	}
}

func (t *Tracker) observeDrainConn(at time.Time, d *drainConn, ev ConnEvent[tracked]) {
	s := ev.Socket
	if d.fate != stillOpen {
		return
	}
	d.busy = s.State == Established && s.InFlight()
	if sent := sentAt(at, s); !sent.IsZero() {
		d.sentAt = sent
	}
	d.client.pools = d.client.pools || (t.undrained && t.pooled(s))
	if ev.Data {
		d.used = true
		if d.usedRead == 0 {
			d.usedRead = t.read
		}
		t.activity(d.client, s.DataAt(at))
		d.client.pools = d.client.pools || (t.undrained && d.answered)
	}
	d.answered = answered(s)
	switch ev.ClosedBy() {
	case ClosedByClient:
		t.closed(d, closedByClient, at)
	case ClosedByPod:
		t.closed(d, closedByPod, at)
		// The pod's Envoy closes a connection only after answering a request on it; the
		// request may have come and gone between two reads, unseen in bytes received.
		t.activity(d.client, at)
	}
}

// closed records the fate of a drain-start connection, known to have come by when.
func (t *Tracker) closed(d *drainConn, fate connFate, when time.Time) {
	d.fate = fate
	if fate == closedByClient && t.undrained {
		d.client.closedAt(when)
	}
	switch {
	case fate != closedByClient:
	case !d.used:
		d.client.lastClose = t.read
	case t.undrained:
		d.client.lastUsedClose = t.read
	}
}

// closedOther records a client's close of a connection that was not an idle drain-start one:
// a departure only when the pod is not draining and the client pools (Undrained).
func (t *Tracker) closedOther(o *otherConn, when time.Time) {
	if o.closed {
		return
	}
	o.closed = true
	if t.undrained && o.client != nil {
		o.client.lastUsedClose = t.read
		o.client.closedAt(when)
	}
}

// answered says whether s is an established connection whose requests so far were answered,
// whatever its idle time: more bytes at a later read are another request on it.
func answered(s Socket) bool { return s.State == Established && s.Answered(0) }

// newConnSeen is the activity of a connection c opened since the drain began, seen for the
// first time at the read at, open (s) or in its record: data if it carried any (cameBack).
func (t *Tracker) newConnSeen(c *clientEvidence, s Socket, at time.Time) {
	if s.HasTCPInfo && s.BytesReceived > 0 {
		t.newConnData(c, s.DataAt(at))
	} else {
		t.activity(c, s.DataAt(at))
	}
}

// newConnData is activity that is data on a connection c opened since the drain began
// (cameBack).
func (t *Tracker) newConnData(c *clientEvidence, when time.Time) {
	t.activity(c, when)
	if when.After(c.lastNewData) {
		c.lastNewData = when
	}
}

func (t *Tracker) activity(c *clientEvidence, when time.Time) {
	c.lastActivity = t.read
	if when.After(c.lastData) {
		c.lastData = when
	}
}

func (t *Tracker) client(addr netip.Addr, at time.Time) *clientEvidence {
	c, ok := t.clients[addr]
	if !ok {
		c = &clientEvidence{addr: addr, firstSeen: at}
		t.clients[addr] = c
		t.clientList = append(t.clientList, c)
	}
	return c
}

// otherConns are the connections the tracker follows that are no drain-start ones.
func (t *Tracker) otherConns() iter.Seq[*otherConn] {
	return func(yield func(*otherConn) bool) {
		for c := range t.conns.All() {
			if o := c.Of.other; o != nil && !yield(o) {
				return
			}
		}
	}
}
