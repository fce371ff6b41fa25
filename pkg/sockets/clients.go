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

// judge is the one place that sets client states; see ClientState for the rules.
func (t *Tracker) judge(at time.Time) {
	for _, c := range t.clientList {
		c.held, c.openUsed, c.openNew = 0, 0, 0
	}
	for o := range t.otherConns() {
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
		for o := range t.otherConns() {
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
	for o := range t.otherConns() {
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
