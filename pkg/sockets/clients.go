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
	// it opened a new connection (seen in a read, or opened and closed between two in the
	// kernel's records: Tracker.Closed), data arrived on a drain-start connection, or the
	// pod's side closed a drain-start connection, which the pod's Envoy does after answering
	// a request on it. It was routing to the pod at Client.LastData; whether it still does
	// only silence tells.
	Sending
	// Left: the client closed, itself, a drain-start connection that carried no data since
	// the drain began (no TIME_WAIT on the pod's side: it was seen in CLOSE_WAIT or
	// LAST_ACK, or disappeared from ESTABLISHED), keeps none of them open, and has shown
	// no activity since. For a connection gone between two reads, the kernel's record of it
	// says whether data came (Tracker.Closed); without records, one gone while requests
	// reached the pod counts as having carried one (Tracker.RequestsArrived), whoever sent
	// them. That is what its Envoy does on applying the removal, so it no
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
	// NewConns counts connections first seen after the drain began, in a read or, opened and
	// closed between two reads, in the kernel's record of its close (Tracker.Closed).
	NewConns int
	// Open counts its connections open at the last read (ESTABLISHED, or gone but not yet
	// judged: see Tracker.Closed).
	Open int
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
	// final: the kernel's records of connections freed since the previous read (Closed), and
	// finalComplete whether none was lost; goneOther: reads at which other connections with
	// these cookies vanished, so that a record coming a read late is not taken for a
	// connection opened and closed unseen.
	final         []Socket
	finalComplete bool
	goneOther     map[uint64]int
	// early: records of drain-start connections a read still showed (freed just after it,
	// their records taken with it), kept for the read that finds them gone.
	early []Socket
	// drainBegins: the sidecar began to drain, for the next Observe (DrainBegins).
	drainBegins bool
	// lastAt is the time of the latest read, and begun that of the read that began the
	// drain (Begin, or the read after DrainBegins).
	lastAt, begun time.Time
}

// goneOtherReads is how many reads a vanished connection's cookie is remembered: its record
// comes within one, unless the kernel's work queue lags a whole read interval.
const goneOtherReads = 3

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

// DrainBegins says, for the next Observe, that the pod's sidecar has begun to drain (its
// stats show connections told to close), for a tracker in the undrained mode that watched
// before the drain (meshdrain status): that read is judged as in a draining pod, where a
// close right after a request follows Connection: close and says nothing; and the
// connections open after it become drain-start connections, as at Begin, so that requests
// they carried before the drain do not count as sending after it. A client judged Left
// stays Left until it shows activity again.
func (t *Tracker) DrainBegins() { t.drainBegins = true }

// DrainedSince says that the pod's sidecar has drained since start, before the drain-start
// read: a drain-start connection the pod answered since then was told Connection: close, and
// its client closes it right after the response. Such a close says nothing, so the
// connection counts as used, not idle.
func (t *Tracker) DrainedSince(start time.Time) {
	for _, d := range t.drainList {
		if d.sentAt.After(start) {
			d.used = true
		}
	}
	t.judge(t.lastAt)
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

// Undrained says that the pod's sidecar is not draining (its drain is deferred until the
// app may stop: regime b). It then tells no connection to close, so a client's Envoy closes
// a pooled connection only when it drops the endpoint (idle ones at once, busy ones when their
// request ends; envoyproxy/envoy source/common/upstream/cluster_manager_impl.cc) or at its
// idle timeout (an hour by default). So, for a client that pools, a close of any of its
// connections is a departure, whether or not it carried requests; a client keeping an idle
// connection open is holding; a connection with a request in flight holds nothing (its
// client drops it after the request either way). A client pools once one of its connections
// has been seen carrying a second request, or answered and still open poolIdle later, in a
// read or in the kernel's record of its close (Closed): a client that opens a connection per
// request closes it right after the response, so its closes say nothing, however idle the
// connection was when the drain began. A connection opened and closed between two reads,
// gone without TIME_WAIT on the pod's side, was closed by its client. poolIdle is
// best the read interval: a loaded client may take tens of milliseconds to close. A client
// that sends on a new connection more than poolIdle after closing one is no pool that let go
// (cameBack), so a late close by a per-request client misleads only until its next request.
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

// pooledAtClose says whether the kernel's record of a connection its client closed (f) shows
// a pool's use that no read caught: data after a read that showed every request answered (a
// second request), or its last request answered poolIdle or more before the close (kept open
// idle: a client that opens a connection per request closes it within milliseconds). Reads
// while the stats move are BusyReads intervals apart, so a client that sends and then lets go
// between two of them is known to pool only from its record (Undrained).
func (t *Tracker) pooledAtClose(answeredBefore bool, bytesBefore uint64, haveBefore bool, f Socket) bool {
	if !t.undrained || !f.HasTCPInfo {
		return false
	}
	return (answeredBefore && dataInRecord(bytesBefore, haveBefore, f)) || f.Answered(t.poolIdle)
}

// dataInRecord says whether the record f of a freed connection shows data received since a
// read counted bytes (have: that read had tcp_info): more than the FIN the count may hold.
func dataInRecord(bytes uint64, have bool, f Socket) bool {
	return have && f.HasTCPInfo && f.BytesReceived > bytes+1
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
	used      bool      // data arrived since the drain began
	usedRead  int       // read that first showed data (0: none, or the drain's start)
	busy      bool      // a request was in flight at the last read (tcp_info)
	sentAt    time.Time // when the pod last sent on it, as the last read showed (sentAt)
	answered  bool      // the last read showed it answered (see otherConn)
	fate      connFate
	start     Socket // as the drain began
	seen      int    // last read that showed it
	// goneRead: the read that found it gone while its kernel record had not come
	// (Tracker.Closed), and arrivedThen whether requests had reached the pod by then.
	goneRead    int
	arrivedThen bool
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
	// state at the last read; firstRead and dataRead the reads that first showed it and
	// last showed data on it (DrainBegins).
	state               State
	firstRead, dataRead int
	sentAt              time.Time
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
	// firstClose: when it was first seen to close a connection (Undrained), no earlier than
	// it did: the kernel's record of the close came then, or the read that showed it.
	firstClose time.Time
	// lastNewData: when the latest data came on a connection it opened since the drain
	// began (Socket.DataAt).
	lastNewData time.Time
	// lastNewConn: read that last showed a connection it opened since the drain began.
	lastNewConn int
	leftAt      time.Time
	// leftRead: the last read before the drain began in which it was Left (DrainBegins).
	leftRead    int
	heldAtStart int
	newConns    int
	state       ClientState
	// Counts of drain-start connections, worked out again by each judge, and openNew of the
	// others still open.
	held, openUsed, openNew int
}

// cameBack says that, more than slack after closing a connection, it sent on one it had
// opened since the drain began. Nothing drains the pod (Undrained), so a pool closes
// connections to a host it still routes to only at its own idle timeout: what looked like a
// pool's use was not one. Most likely it opens a connection per request and was slow to close
// one (a loaded or throttled process), or its pool's idle timeout is short. Either way its
// closes are no departures. Within slack, the data is a request the pool had sent before it
// dropped the endpoint (closing its idle connections as it did), on a connection it was
// opening then.
func (c *clientEvidence) cameBack(slack time.Duration) bool {
	return !c.firstClose.IsZero() && c.lastNewData.After(c.firstClose.Add(slack))
}

// closedAt records a close of one of its connections, when (see firstClose).
func (c *clientEvidence) closedAt(when time.Time) {
	if c.firstClose.IsZero() || when.Before(c.firstClose) {
		c.firstClose = when
	}
}

// lastClosed is the read that last showed the client close a connection, any kind.
func (c *clientEvidence) lastClosed() int { return max(c.lastClose, c.lastUsedClose) }

// Begin starts tracking from the read taken when the drain began: its ESTABLISHED sockets
// are the drain-start connections whose fate is the evidence.
func Begin(at time.Time, drainStart []Socket) *Tracker {
	t := &Tracker{
		drain:     make(map[connKey]*drainConn),
		other:     make(map[connKey]*otherConn),
		clients:   make(map[netip.Addr]*clientEvidence),
		goneOther: make(map[uint64]int),
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
		d := &drainConn{id: idOf(s), client: c, bytes: s.BytesReceived, haveBytes: s.HasTCPInfo, used: s.InFlight(), busy: s.InFlight(), answered: answered(s), start: s, sentAt: sentAt(at, s)}
		t.drain[k] = d
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
			o = &otherConn{id: idOf(s), bytes: s.BytesReceived, haveBytes: s.HasTCPInfo, firstRead: t.read}
			t.other[k] = o
			o.client = t.client(s.Remote.Addr(), at)
			o.client.newConns++
			o.client.lastNewConn = t.read
			t.newConnSeen(o.client, s, at)
		} else if grew(&o.bytes, &o.haveBytes, s) {
			if o.client == nil {
				o.client = t.client(s.Remote.Addr(), at)
			}
			o.dataRead = t.read
			t.newConnData(o.client, s.DataAt(at))
			// A request after an answered one: the connection is reused, as a pool's.
			o.client.pools = o.client.pools || (t.undrained && o.answered)
		}
		o.answered = answered(s)
		o.id.update(s)
		o.seen = t.read
		o.state = s.State
		if sent := sentAt(at, s); !sent.IsZero() {
			o.sentAt = sent
		}
		switch s.State {
		case Established:
			if o.client == nil {
				o.client = t.client(s.Remote.Addr(), at)
			}
			o.sightings++
			o.busy = s.InFlight()
			o.client.pools = o.client.pools || (t.undrained && t.pooled(s))
		case CloseWait, LastAck:
			t.closedOther(o, at)
		}
	}
	final := t.finalByCookie()
	for _, d := range t.drainList {
		if d.fate != stillOpen || d.seen == t.read {
			continue
		}
		// Gone without passing through FIN_WAIT or TIME_WAIT on our side: the client closed
		// it (or one side reset it). Whether it carried a request before, its final bytes
		// tell (Closed); without them, if requests arrived meanwhile, one may have been on it.
		f, recorded := final[d.id.cookie] // without a record, closedBy is this read
		switch {
		case recorded:
			delete(final, d.id.cookie)
			d.client.pools = d.client.pools || t.pooledAtClose(d.answered, d.bytes, d.haveBytes, f)
			if !d.haveBytes || !f.HasTCPInfo || dataInRecord(d.bytes, d.haveBytes, f) {
				// Data, or nothing to tell: counted as data.
				t.usedBeforeClose(d, f.DataAt(at))
			}
		case t.finalComplete && d.id.cookie != 0 && d.goneRead == 0:
			d.goneRead, d.arrivedThen = t.read, t.arrived
			continue // judged at the next read, when its record has come
		case (t.arrived || d.arrivedThen) && !t.undrained:
			t.usedBeforeClose(d, at)
		}
		t.closed(d, closedByClient, f.closedBy(at))
	}
	t.arrived = false
	for k, o := range t.other {
		if o.seen != t.read {
			// Gone without TIME_WAIT on our side: closed by the client.
			f, recorded := final[o.id.cookie] // without a record, closedBy is this read
			t.closedOther(o, f.closedBy(at))
			delete(t.other, k)
			if recorded && o.client != nil {
				o.client.pools = o.client.pools || t.pooledAtClose(o.answered, o.bytes, o.haveBytes, f)
				if dataInRecord(o.bytes, o.haveBytes, f) {
					t.activity(o.client, f.DataAt(at))
				}
			}
			if o.id.cookie != 0 {
				t.goneOther[o.id.cookie] = t.read
			}
		}
	}
	t.briefConnections(at, final)
	if t.drainBegins {
		t.rebase()
		t.drainBegins, t.begun = false, at
	}
	t.lastAt = at
	t.judge(at)
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

// finalByCookie indexes the records Closed gave for this read, with those kept from the
// last, and forgets them.
func (t *Tracker) finalByCookie() map[uint64]Socket {
	final := make(map[uint64]Socket, len(t.final)+len(t.early))
	for _, f := range append(t.early, t.final...) {
		if f.Cookie != 0 {
			final[f.Cookie] = f
		}
	}
	t.final, t.early = nil, nil
	return final
}

// Vanished returns the cookies of the drain-start connections that socks, a read about to
// be observed, no longer shows and whose records final does not hold: the records to wait
// for (GoneWatch.Await) before judging that read.
func (t *Tracker) Vanished(socks, final []Socket) []uint64 {
	shown := make(map[uint64]bool, len(socks)+len(final)+len(t.early))
	for _, list := range [][]Socket{socks, final, t.early} {
		for _, s := range list {
			shown[s.Cookie] = true
		}
	}
	var missing []uint64
	for _, d := range t.drainList {
		if d.fate == stillOpen && d.id.cookie != 0 && !shown[d.id.cookie] {
			missing = append(missing, d.id.cookie)
		}
	}
	return missing
}

// briefConnections counts the records of connections no read showed: opened and closed
// between two reads, as a client opening a connection per request does while the pod drains.
// A record of a connection a read did show (a drain-start one already judged, one still in the
// table as TIME_WAIT, one gone in the last reads) is not one.
func (t *Tracker) briefConnections(at time.Time, final map[uint64]Socket) {
	for cookie, f := range final {
		if _, gone := t.goneOther[cookie]; gone || f.sidecarsOwn() {
			continue
		}
		k := connKey{f.Local, f.Remote}
		// The same addresses without a cookie (read from /proc) cannot be told apart.
		if d, ok := t.drain[k]; ok && (d.id.cookie == cookie || d.id.cookie == 0) {
			if d.fate == stillOpen && d.seen == t.read {
				t.early = append(t.early, f)
			}
			continue
		}
		if o, ok := t.other[k]; ok && (o.id.cookie == cookie || o.id.cookie == 0) {
			continue
		}
		c := t.client(f.Remote.Addr(), at)
		if t.undrained {
			c.pools = c.pools || t.pooledAtClose(false, 0, false, f)
		}
		if f.DataBefore(t.begun) {
			// Its data all came before the drain-start read, which did not show it: it
			// closed just before that read, or as it walked the table. It was no connection
			// of the drain, and what it carried was sent before the drain began (a client
			// that lets go of it at the deletion shows no activity since).
			continue
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
	for cookie, read := range t.goneOther {
		if t.read-read >= goneOtherReads {
			delete(t.goneOther, cookie)
		}
	}
}

// rebase makes the connections open now drain-start ones (DrainBegins): a request they
// carried before this read no longer counts; one seen in this read, or answered since the
// read before (its response may have said Connection: close), may have come after the drain
// began, and still does. Those opened in this read stay new connections.
func (t *Tracker) rebase() {
	for _, d := range t.drainList {
		if d.fate == stillOpen && d.usedRead < t.read {
			d.used, d.usedRead = d.busy || d.sentAt.After(t.lastAt), 0
		}
	}
	for k, o := range t.other {
		if o.closed || o.state != Established || o.client == nil || o.firstRead == t.read {
			continue
		}
		d := &drainConn{id: o.id, client: o.client, bytes: o.bytes, haveBytes: o.haveBytes, busy: o.busy,
			answered: o.answered, seen: t.read, start: Socket{State: Established}, sentAt: o.sentAt}
		d.used = o.busy || o.dataRead == t.read || o.sentAt.After(t.lastAt)
		if o.dataRead == t.read {
			d.usedRead = t.read
		}
		t.drain[k] = d
		t.drainList = append(t.drainList, d)
		o.client.heldAtStart++
		delete(t.other, k)
	}
}

func (t *Tracker) observeDrainConn(at time.Time, d *drainConn, s Socket) {
	d.seen = t.read
	d.id.update(s)
	if d.fate != stillOpen {
		return
	}
	d.busy = s.State == Established && s.InFlight()
	if sent := sentAt(at, s); !sent.IsZero() {
		d.sentAt = sent
	}
	d.client.pools = d.client.pools || (t.undrained && t.pooled(s))
	if grew(&d.bytes, &d.haveBytes, s) {
		d.used = true
		if d.usedRead == 0 {
			d.usedRead = t.read
		}
		t.activity(d.client, s.DataAt(at))
		d.client.pools = d.client.pools || (t.undrained && d.answered)
	}
	d.answered = answered(s)
	switch s.State {
	case CloseWait, LastAck:
		t.closed(d, closedByClient, at)
	case FinWait1, FinWait2, TimeWait, Closing:
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

// judge is the one place that sets client states; see ClientState for the rules.
func (t *Tracker) judge(at time.Time) {
	for _, c := range t.clientList {
		c.held, c.openUsed, c.openNew = 0, 0, 0
	}
	for _, o := range t.other {
		if !o.closed && o.client != nil && (o.state == Established || o.state == SynRecv || o.state == NewSynRecv) {
			o.client.openNew++
		}
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
		case c.leftRead > 0 && c.openUsed == 0 && c.lastActivity <= c.leftRead:
			// Left before the drain began, under the undrained rules, and quiet since.
			state = Left
		case !t.undrained && c.openUsed == 0 && c.lastClose > 0 && c.lastActivity < c.lastClose:
			state = Left
		case t.undrained && c.pools && !c.cameBack(t.poolIdle) && c.lastClosed() > 0 && c.lastActivity <= c.lastClosed() && (c.lastNewConn < c.lastClosed() || c.openNew == 0):
			// A pooling client closed a connection and keeps no idle one: activity seen in
			// the read of the close was on it (unless a connection opened then carried it,
			// and is still open: a connection it opened and has closed by this read, it let
			// go of too), and a request still in flight ends on its own.
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
	for _, o := range t.other {
		if o.client != nil && !o.closed && (o.state == Established || o.state == SynRecv || o.state == NewSynRecv) {
			out[index[o.client]].Open++
		}
	}
	for _, d := range t.drainList {
		cl := &out[index[d.client]]
		if d.fate == stillOpen {
			cl.Open++
		}
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
