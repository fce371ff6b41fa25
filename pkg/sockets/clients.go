package sockets

import (
	"net/netip"
	"slices"
	"time"
)

// ClientState is what the socket table says about one client (one remote address) since
// the drain began. It drives the stop decision: a Holding client keeps the app up, within
// the deadline; a client that Left no longer counts; the others are judged by silence.
type ClientState uint8

const (
	// NoEvidence: the client held no connection open at drain start that it has either
	// kept open or closed itself, and nothing shows that it sent since. Either it held no
	// pooled connection, or the pod's side closed all of them (as Linkerd's proxy does on
	// its drain). The table cannot tell whether it still routes to the pod.
	NoEvidence ClientState = iota
	// Holding: the client keeps open a connection that was open when the drain began and
	// has carried no data since (as far as the reader can tell: /proc shows no bytes, so
	// there every drain-start connection that stays open counts). A client's Envoy closes
	// idle pooled connections to an endpoint as soon as it applies the EDS update removing
	// it, so the client has not applied it yet. A connection with a request in flight as
	// the drain began is not idle (tcp_info tells; /proc cannot, and there it holds).
	// Undrained, any idle connection holds (see Tracker.Undrained).
	Holding
	// Sending: the client is not Holding and has sent since the drain began, or may have:
	// it opened a new connection, data arrived on a drain-start connection, or the pod's
	// side closed a drain-start connection, which the pod's Envoy does after answering a
	// request on it. It was routing to the pod at Client.LastData; whether it still does
	// only silence tells.
	Sending
	// Left: the client closed, itself, a drain-start connection that carried no data since
	// the drain began (no TIME_WAIT on the pod's side: it was seen in CLOSE_WAIT or
	// LAST_ACK, or disappeared from ESTABLISHED), keeps none of them open, and has shown
	// no activity since. That is what its Envoy does on applying the removal, so it no
	// longer routes to the pod. Where tcp_info is missing (/proc), "no data" cannot be
	// checked, so a client that closed a connection after using it (for instance an HTTP/2
	// client after the pod's GOAWAY) also counts as Left. Limits: a close by the pod's side
	// with a reset leaves no TIME_WAIT either and is taken for the client's; a client whose
	// idle timeout happens to expire during the drain looks the same as one that let go;
	// reads must be less than TIME_WAIT's 60 s apart, or a pod-side close can leave and
	// vanish between two reads. Undrained, a pooling client's close of any connection
	// counts (see Tracker.Undrained).
	Left
)

func (s ClientState) String() string {
	switch s {
	case Holding:
		return "holding"
	case Sending:
		return "sending"
	case Left:
		return "left"
	default:
		return "no-evidence"
	}
}

// Client is the evidence about one client address. Times are those of the reads that showed
// the evidence, so they are as precise as the reads are frequent, except LastData where
// tcp_info tells when data arrived.
type Client struct {
	Addr  netip.Addr
	State ClientState
	// FirstSeen is the drain start for a client that had sockets then, else the read that
	// first showed one of its connections.
	FirstSeen time.Time
	// LastData is the latest time the client sent, or may have (see Sending); zero if
	// nothing since the drain began.
	LastData time.Time
	// LeftAt is when the client was first seen Left; zero unless State is Left.
	LeftAt time.Time
	// HeldAtStart counts its connections that were ESTABLISHED at drain start, and the
	// others split them: ClosedByPod those the pod's side closed; Used those that carried
	// data since (open, or closed by the client); Held those still open with no data
	// since; ClosedByClient those it closed with no data since.
	HeldAtStart, ClosedByPod, Used, Held, ClosedByClient int
	// NewConns counts connections first seen after the drain began.
	NewConns int
}

// Tracker turns successive reads of the socket table into per-client evidence. It does no
// I/O and reads no clock: every read comes with its time. Not safe for concurrent use.
type Tracker struct {
	read    int // number of reads observed after Begin
	drain   map[connKey]*drainConn
	other   map[connKey]*otherConn
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
}

// RequestsArrived says that requests reached the pod since the previous read (its sidecar's
// arrival counter moved, or is unknown), for the next Observe. While the pod drains, a
// connection can carry a request, be told Connection: close and be closed by its client, all
// between two reads: gone, its bytes never seen to grow, it would look like an idle one its
// client let go. So a connection gone from the table counts as a departure only across reads
// between which no request reached the pod at all.
func (t *Tracker) RequestsArrived() { t.arrived = true }

// Undrained says that the pod's sidecar is not draining (its drain is deferred until the
// app may stop: regime b). It then tells no connection to close, so a client's Envoy closes
// a pooled connection only when it drops the endpoint (idle ones at once, busy ones when their
// request ends; envoyproxy/envoy source/common/upstream/cluster_manager_impl.cc) or at its
// idle timeout (an hour by default). So, for a client that pools, a close of any of its
// connections is a departure, whether or not it carried requests; a client keeping an idle
// connection open is holding; a connection with a request in flight holds nothing (its
// client drops it after the request either way). A client pools once one of its connections
// has been seen carrying a second request, or answered and still open poolIdle later: a
// client that opens a connection per request closes it right after the response, so its
// closes say nothing, however idle the connection was when the drain began. poolIdle is
// best the read interval: a loaded client may take tens of milliseconds to close.
// Limits: a client whose idle timeout expires during the drain looks like one that let go;
// several clients behind one address (a NAT) are one. Sound only while nothing drains the
// pod: a draining Envoy's Connection: close makes clients close right after a request.
func (t *Tracker) Undrained(poolIdle time.Duration) {
	t.undrained, t.poolIdle = true, poolIdle
	for _, d := range t.drainList {
		d.client.pools = d.client.pools || t.pooled(d.start)
	}
	t.judge(time.Time{})
}

// pooled says whether an established connection shows a pool's use: carrying a request after
// an answered one, or answered and left open poolIdle (Undrained).
func (t *Tracker) pooled(s Socket) bool {
	return s.State == Established && (s.Reused() || s.Answered(t.poolIdle))
}

// connKey names a connection at one time; a later connection may reuse it, which the
// socket's inode or cookie tells apart.
type connKey struct{ local, remote netip.AddrPort }

type connFate uint8

const (
	stillOpen connFate = iota
	closedByClient
	closedByPod
)

// drainConn is a connection that was ESTABLISHED when the drain began.
type drainConn struct {
	id        connID
	client    *clientEvidence
	bytes     uint64 // bytes received at the last read that had tcp_info
	haveBytes bool
	used      bool // data arrived since the drain began
	busy      bool // a request was in flight at the last read (tcp_info)
	answered  bool // the last read showed it answered (see otherConn)
	fate      connFate
	start     Socket // as the drain began
	seen      int    // last read that showed it
}

// otherConn is any other connection: one that was not ESTABLISHED at drain start, or one
// opened since. It is kept while reads show it, to count it once and see data on it.
type otherConn struct {
	id        connID
	client    *clientEvidence
	bytes     uint64
	haveBytes bool
	seen      int
	// sightings counts the reads that showed it ESTABLISHED; closed, that its close was
	// seen (counted once).
	sightings int
	closed    bool
	busy      bool // a request was in flight at the last read (tcp_info)
	// answered: the last read showed it answered (tcp_info), so more bytes after it are a
	// second request.
	answered bool
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
	from := s.Remote.Addr()
	return (from.IsLoopback() || from == istioInboundBindIPv6) && !s.Local.Addr().IsLoopback()
}

// istioInboundBindIPv6 is ::6, Istio's source address for inbound connections to the app
// where the pod has no IPv4.
var istioInboundBindIPv6 = netip.AddrFrom16([16]byte{15: 6})

type connID struct{ inode, cookie uint64 }

func idOf(s Socket) connID { return connID{s.Inode, s.Cookie} }

// same reports whether s can be the connection id was taken from: the ids agree wherever
// both are known (the inode goes to 0 once the app closes the socket).
func (id connID) same(s Socket) bool {
	if id.cookie != 0 && s.Cookie != 0 {
		return id.cookie == s.Cookie
	}
	if id.inode != 0 && s.Inode != 0 {
		return id.inode == s.Inode
	}
	return true
}

func (id *connID) update(s Socket) {
	if s.Cookie != 0 {
		id.cookie = s.Cookie
	}
	if s.Inode != 0 {
		id.inode = s.Inode
	}
}

type clientEvidence struct {
	addr         netip.Addr
	firstSeen    time.Time
	lastData     time.Time
	lastActivity int // read that last showed activity; 0 for none
	lastClose    int // read that last showed its close of an idle drain-start connection; 0 for none
	// lastUsedClose: read that last showed its close of any other connection (Undrained;
	// a departure if it pools); 0 for none.
	lastUsedClose int
	// pools: one of its connections showed a pool's use (pooled).
	pools bool
	// lastNewConn: read that last showed a connection it opened since the drain began.
	lastNewConn int
	leftAt      time.Time
	heldAtStart int
	newConns    int
	state       ClientState
	// Counts of drain-start connections, worked out again by each judge.
	held, openUsed int
}

// lastClosed is the read that last showed the client close a connection, any kind.
func (c *clientEvidence) lastClosed() int { return max(c.lastClose, c.lastUsedClose) }

// Begin starts tracking from the read taken when the drain began: its ESTABLISHED sockets
// are the drain-start connections whose fate is the evidence.
func Begin(at time.Time, drainStart []Socket) *Tracker {
	t := &Tracker{
		drain:   make(map[connKey]*drainConn),
		other:   make(map[connKey]*otherConn),
		clients: make(map[netip.Addr]*clientEvidence),
	}
	for _, s := range drainStart {
		if s.sidecarsOwn() {
			continue
		}
		k := connKey{s.Local, s.Remote}
		if s.State != Established {
			o := &otherConn{id: idOf(s), bytes: s.BytesReceived, haveBytes: s.HasTCPInfo}
			if s.State == SynRecv || s.State == NewSynRecv {
				// A client connecting as the drain begins; a connection already closing
				// is no client's (it counts if it shows data, in Observe).
				o.client = t.client(s.Remote.Addr(), at)
			}
			t.other[k] = o
			continue
		}
		c := t.client(s.Remote.Addr(), at)
		c.heldAtStart++
		// A request in flight as the drain begins is answered during it: the connection
		// is not idle since the start.
		d := &drainConn{id: idOf(s), client: c, bytes: s.BytesReceived, haveBytes: s.HasTCPInfo, used: s.InFlight(), busy: s.InFlight(), answered: answered(s), start: s}
		t.drain[k] = d
		t.drainList = append(t.drainList, d)
	}
	t.judge(at)
	return t
}

// Observe takes a later read of the table, taken at at.
func (t *Tracker) Observe(at time.Time, socks []Socket) {
	t.read++
	for _, s := range socks {
		if s.sidecarsOwn() {
			continue
		}
		k := connKey{s.Local, s.Remote}
		if d, ok := t.drain[k]; ok && d.id.same(s) {
			t.observeDrainConn(at, d, s)
			continue
		}
		o, ok := t.other[k]
		if !ok || !o.id.same(s) {
			o = &otherConn{id: idOf(s), bytes: s.BytesReceived, haveBytes: s.HasTCPInfo}
			t.other[k] = o
			o.client = t.client(s.Remote.Addr(), at)
			o.client.newConns++
			o.client.lastNewConn = t.read
			t.activity(o.client, dataTime(at, s))
		} else if grew(&o.bytes, &o.haveBytes, s) {
			if o.client == nil {
				o.client = t.client(s.Remote.Addr(), at)
			}
			t.activity(o.client, dataTime(at, s))
			// A request after an answered one: the connection is reused, as a pool's.
			o.client.pools = o.client.pools || (t.undrained && o.answered)
		}
		o.answered = answered(s)
		o.id.update(s)
		o.seen = t.read
		switch s.State {
		case Established:
			if o.client == nil {
				o.client = t.client(s.Remote.Addr(), at)
			}
			o.sightings++
			o.busy = s.InFlight()
			o.client.pools = o.client.pools || (t.undrained && t.pooled(s))
		case CloseWait, LastAck:
			t.closedOther(o)
		}
	}
	for _, d := range t.drainList {
		if d.fate == stillOpen && d.seen != t.read {
			// Gone without passing through FIN_WAIT or TIME_WAIT on our side: the client
			// closed it (or one side reset it). If requests arrived meanwhile, one may have
			// been on it (RequestsArrived).
			if t.arrived && !t.undrained {
				d.used = true
				t.activity(d.client, at)
			}
			t.closed(d, closedByClient)
		}
	}
	t.arrived = false
	for k, o := range t.other {
		if o.seen != t.read {
			// Gone without TIME_WAIT on our side: closed by the client.
			t.closedOther(o)
			delete(t.other, k)
		}
	}
	t.judge(at)
}

func (t *Tracker) observeDrainConn(at time.Time, d *drainConn, s Socket) {
	d.seen = t.read
	d.id.update(s)
	if d.fate != stillOpen {
		return
	}
	d.busy = s.State == Established && s.InFlight()
	d.client.pools = d.client.pools || (t.undrained && t.pooled(s))
	if grew(&d.bytes, &d.haveBytes, s) {
		d.used = true
		t.activity(d.client, dataTime(at, s))
		d.client.pools = d.client.pools || (t.undrained && d.answered)
	}
	d.answered = answered(s)
	switch s.State {
	case CloseWait, LastAck:
		t.closed(d, closedByClient)
	case FinWait1, FinWait2, TimeWait, Closing:
		t.closed(d, closedByPod)
		// The pod's Envoy closes a connection only after answering a request on it; the
		// request may have come and gone between two reads, unseen in bytes received.
		t.activity(d.client, at)
	}
}

func (t *Tracker) closed(d *drainConn, fate connFate) {
	d.fate = fate
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
func (t *Tracker) closedOther(o *otherConn) {
	if o.closed {
		return
	}
	o.closed = true
	if t.undrained && o.client != nil {
		o.client.lastUsedClose = t.read
	}
}

// answered says whether s is an established connection whose requests so far were answered,
// whatever its idle time: more bytes at a later read are another request on it.
func answered(s Socket) bool { return s.State == Established && s.Answered(0) }

// grew records s's bytes received and reports whether they grew since the last read that
// had them.
func grew(bytes *uint64, have *bool, s Socket) bool {
	if !s.HasTCPInfo {
		return false
	}
	more := *have && s.BytesReceived > *bytes
	*bytes, *have = s.BytesReceived, true
	return more
}

// dataTime is when the last data of s arrived: tcp_info says so exactly; otherwise the
// read's time is the latest it can have been.
func dataTime(at time.Time, s Socket) time.Time {
	if s.HasTCPInfo {
		return at.Add(-s.SinceLastDataRecv)
	}
	return at
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

// judge is the one place that sets client states; see ClientState for the rules.
func (t *Tracker) judge(at time.Time) {
	for _, c := range t.clientList {
		c.held, c.openUsed = 0, 0
	}
	for _, d := range t.drainList {
		switch {
		case d.fate != stillOpen:
		case d.used && !t.undrained:
			d.client.openUsed++
		case d.busy && t.undrained:
			// Its client drops it when the request ends, whether or not it has let go.
		default:
			d.client.held++
		}
	}
	if t.undrained {
		// Nothing tells a client to close: an idle connection it keeps open, it still
		// routes on.
		for _, o := range t.other {
			if !o.closed && o.sightings > 0 && !o.busy {
				o.client.held++
			}
		}
	}
	for _, c := range t.clientList {
		var state ClientState
		switch {
		case c.held > 0:
			state = Holding
		case !t.undrained && c.openUsed == 0 && c.lastClose > 0 && c.lastActivity < c.lastClose:
			state = Left
		case t.undrained && c.pools && c.lastClosed() > 0 && c.lastActivity <= c.lastClosed() && c.lastNewConn < c.lastClosed():
			// A pooling client closed a connection and keeps no idle one: activity seen in
			// the read of the close was on it (unless a connection opened then carried it),
			// and a request still in flight ends on its own.
			state = Left
		case c.lastActivity > 0:
			state = Sending
		default:
			state = NoEvidence
		}
		if state == Left && c.state != Left {
			c.leftAt = at
		}
		c.state = state
	}
}

// Clients returns the evidence for every client seen since the drain began, by address.
func (t *Tracker) Clients() []Client {
	index := make(map[*clientEvidence]int, len(t.clientList))
	out := make([]Client, 0, len(t.clientList))
	for _, c := range t.clientList {
		cl := Client{
			Addr: c.addr, State: c.state, FirstSeen: c.firstSeen, LastData: c.lastData,
			HeldAtStart: c.heldAtStart, NewConns: c.newConns,
		}
		if c.state == Left {
			cl.LeftAt = c.leftAt
		}
		index[c] = len(out)
		out = append(out, cl)
	}
	for _, d := range t.drainList {
		cl := &out[index[d.client]]
		switch {
		case d.fate == closedByPod:
			cl.ClosedByPod++
		case d.used:
			cl.Used++
		case d.fate == stillOpen:
			cl.Held++
		default:
			cl.ClosedByClient++
		}
	}
	slices.SortFunc(out, func(a, b Client) int { return a.Addr.Compare(b.Addr) })
	return out
}
