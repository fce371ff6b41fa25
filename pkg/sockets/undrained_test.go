package sockets

import (
	"testing"
	"time"
)

// Regime (b): nothing drains the pod, so a client keeps using its pooled connection until it
// drops the endpoint, then closes it idle. That close is a departure in the undrained mode,
// and only sending in the default one (where a draining Envoy's Connection: close makes
// clients close right after a request).
func TestUndrainedPoolCloseIsADeparture(t *testing.T) {
	for _, undrained := range []bool{false, true} {
		tr := Begin(at(0), []Socket{withInfo(sock("10.1.0.1", 40000, Established, 11), 100, 0)})
		if undrained {
			tr.Undrained(testPoolIdle)
		}
		tr.Observe(at(1), []Socket{withInfo(sock("10.1.0.1", 40000, Established, 11), 300, 0)}) // a request
		wantState(t, clientOf(t, tr, "10.1.0.1"), map[bool]ClientState{false: Sending, true: Holding}[undrained])
		tr.Observe(at(2), []Socket{withTimes(sock("10.1.0.1", 40000, Established, 11), 300, time.Second, 900*time.Millisecond)}) // answered, idle
		tr.Observe(at(3), nil)                                                                                                   // closed by the client
		wantState(t, clientOf(t, tr, "10.1.0.1"), map[bool]ClientState{false: Sending, true: Left}[undrained])
	}
}

// A client that opens a connection per request closes it right after the response: its
// closes say nothing even when the pod is not draining, whether its connection was seen in
// one read or, with a long request, in two. A client one of whose connections has been seen
// answered and left open pools, and its next close, busy or idle, is a departure (for a client
// that already closed one and sent again, it is not: TestUndrainedClientThatComesBackIsNoPool).
func TestUndrainedOneRequestConnectionsAreNotDepartures(t *testing.T) {
	// As the drain begins, one connection has just been answered and another carries its
	// first request: both close right after, as a client without a pool does.
	tr := Begin(at(0), []Socket{
		withTimes(sock("10.1.0.2", 40990, Established, 19), 200, 40*time.Millisecond, 10*time.Millisecond),
		unanswered(withTimes(sock("10.1.0.2", 40991, Established, 20), 200, 5*time.Millisecond, 6*time.Millisecond)),
	})
	tr.Undrained(testPoolIdle)
	tr.Observe(at(1), []Socket{withTimes(sock("10.1.0.2", 41000, Established, 21), 200, 0, 0)})
	wantState(t, clientOf(t, tr, "10.1.0.2"), Holding)
	tr.Observe(at(2), nil) // closed after one sighting
	wantState(t, clientOf(t, tr, "10.1.0.2"), Sending)

	inFlight := unanswered(withTimes(sock("10.1.0.2", 41001, Established, 22), 200, 100*time.Millisecond, 900*time.Millisecond))
	tr.Observe(at(3), []Socket{inFlight})
	tr.Observe(at(4), []Socket{inFlight}) // a request longer than the read interval
	tr.Observe(at(5), nil)
	wantState(t, clientOf(t, tr, "10.1.0.2"), Sending)

	// Another client's connection, new in the drain, carries a second request: it pools.
	tr.Observe(at(6), []Socket{withTimes(sock("10.1.0.9", 41002, Established, 23), 100, time.Second, 500*time.Millisecond)})
	tr.Observe(at(7), []Socket{withTimes(sock("10.1.0.9", 41002, Established, 23), 400, 10*time.Millisecond, 900*time.Millisecond)})
	tr.Observe(at(8), nil)
	wantState(t, clientOf(t, tr, "10.1.0.9"), Left)
}

// Nothing drains the pod, so a pool closes a connection to a host it still routes to only at
// its own idle timeout. A client that closed a connection and then sent on a new one is no
// pool that let go, whatever its connections showed before or show after: here one that
// opens a connection per request but, loaded, closed one late, after the pool idle time.
func TestUndrainedClientThatComesBackIsNoPool(t *testing.T) {
	late := withTimes(sock("10.1.0.5", 43000, Established, 51), 200, time.Second, 500*time.Millisecond)
	tr := Begin(at(0), []Socket{late}) // answered and still open: a pool's use, it seems
	tr.Undrained(testPoolIdle)
	tr.Observe(at(1), nil)
	wantState(t, clientOf(t, tr, "10.1.0.5"), Left)

	// Its next request comes on a new connection, which then carries a second request, as a
	// pool's would; its close is still no departure.
	next := unanswered(withTimes(sock("10.1.0.5", 43001, Established, 52), 100, 300*time.Millisecond, 300*time.Millisecond))
	tr.Observe(at(2), []Socket{next})
	wantState(t, clientOf(t, tr, "10.1.0.5"), Sending)
	tr.Observe(at(3), []Socket{withTimes(sock("10.1.0.5", 43001, Established, 52), 300, 10*time.Millisecond, 500*time.Millisecond)})
	tr.Observe(at(4), nil)
	wantState(t, clientOf(t, tr, "10.1.0.5"), Sending)

	// The same from the kernel's records alone: connections opened and closed between two
	// reads, the first kept open after its answer, the second sent after the first closed.
	tr = Begin(at(0), nil)
	tr.Undrained(testPoolIdle)
	first := briefRecord("10.1.0.6", 44000, 61, 200, at(1).Add(-100*time.Millisecond), 500*time.Millisecond, 400*time.Millisecond)
	tr.Closed([]Socket{first}, true)
	tr.Observe(at(1), nil)
	wantState(t, clientOf(t, tr, "10.1.0.6"), Left)
	second := briefRecord("10.1.0.6", 44001, 62, 200, at(1).Add(300*time.Millisecond), 10*time.Millisecond, 5*time.Millisecond)
	tr.Closed([]Socket{second}, true)
	tr.Observe(at(2), nil)
	wantState(t, clientOf(t, tr, "10.1.0.6"), Sending)

	// A pool drops the endpoint: it closes its idle connection, and a request it had sent
	// just before, on a connection it was opening, comes a moment later. That is no coming
	// back.
	pooled := withCookie(withTimes(sock("10.1.0.7", 45000, Established, 71), 300, 2*time.Second, time.Second), 71)
	tr = Begin(at(0), []Socket{pooled})
	tr.Undrained(testPoolIdle)
	closedAt := at(1).Add(-200 * time.Millisecond)
	idleClose := record(pooled, 301)
	idleClose.Freed = closedAt
	straggler := briefRecord("10.1.0.7", 45001, 72, 200, closedAt.Add(30*time.Millisecond), 10*time.Millisecond, 5*time.Millisecond)
	tr.Closed([]Socket{idleClose, straggler}, true)
	tr.Observe(at(1), nil)
	wantState(t, clientOf(t, tr, "10.1.0.7"), Left)
}

// briefRecord is the kernel's record of a connection no read showed, come at freed: its last
// data sinceRecv before that, and its answer sinceSent before.
func briefRecord(client string, port uint16, cookie, bytes uint64, freed time.Time, sinceRecv, sinceSent time.Duration) Socket {
	f := record(withCookie(withTimes(sock(client, port, Established, 0), bytes, sinceRecv, sinceSent), cookie), bytes)
	f.Freed = freed
	return f
}

// While the pod drains, an idle drain-start connection can carry a request, be told
// Connection: close and be closed by its client between two reads. If requests reached the
// pod meanwhile, its vanishing is no departure; if none did, it is.
func TestVanishedWhileRequestsArrivedIsNoDeparture(t *testing.T) {
	for _, arrived := range []bool{true, false} {
		tr := Begin(at(0), []Socket{withInfo(sock("10.1.0.3", 42000, Established, 31), 100, 0)})
		if arrived {
			tr.RequestsArrived()
		}
		tr.Observe(at(1), nil)
		want := map[bool]ClientState{true: Sending, false: Left}[arrived]
		wantState(t, clientOf(t, tr, "10.1.0.3"), want)
	}
}

// testPoolIdle is the tests' Undrained pool idle time.
const testPoolIdle = 100 * time.Millisecond

// withTimes adds tcp_info's bytes received and how long ago data was last received and sent.
func withTimes(s Socket, bytesReceived uint64, sinceRecv, sinceSent time.Duration) Socket {
	s = withInfo(s, bytesReceived, sinceRecv)
	s.SinceLastDataSent = sinceSent
	return s
}

// unanswered marks s as having sent nothing yet: its first request is in flight.
func unanswered(s Socket) Socket {
	s.NothingSent = true
	return s
}

// A connection seen once, answered and idle for the pool idle time, or carrying a second request, is a
// pool's: a client that opens a connection per request closes it within a round trip of the
// response. Its close is a departure; the close of one seen just after its response, or
// with its first request in flight, is not.
func TestUndrainedAnsweredIdleConnectionIsPooled(t *testing.T) {
	for _, c := range []struct {
		name                 string
		sinceRecv, sinceSent time.Duration
		nothingSent          bool
		want                 ClientState
	}{
		{"answered, idle 300ms", 310 * time.Millisecond, 300 * time.Millisecond, false, Left},
		{"answered 5ms ago", 15 * time.Millisecond, 5 * time.Millisecond, false, Sending},
		{"first request in flight", 5 * time.Millisecond, 400 * time.Millisecond, true, Sending},
		{"second request in flight", 5 * time.Millisecond, 400 * time.Millisecond, false, Left},
	} {
		t.Run(c.name, func(t *testing.T) {
			tr := Begin(at(0), nil)
			tr.Undrained(testPoolIdle)
			s := withTimes(sock("10.1.0.4", 43000, Established, 41), 200, c.sinceRecv, c.sinceSent)
			s.NothingSent = c.nothingSent
			tr.Observe(at(1), []Socket{s})
			tr.Observe(at(2), nil)
			wantState(t, clientOf(t, tr, "10.1.0.4"), c.want)
		})
	}
}

// A client that applied the removal closes its idle connections at once and its busy ones
// when their requests end. Undrained, the close of the idle one is its departure, even while
// a long request keeps another connection open; once that connection sits answered and
// idle, open, the client holds again. Draining (regime a), the request in flight as the
// drain began is answered with Connection: close, so neither connection shows anything.
func TestUndrainedBusyConnectionDoesNotHold(t *testing.T) {
	for _, undrained := range []bool{false, true} {
		idle := withTimes(sock("10.1.0.5", 44000, Established, 51), 100, 2*time.Second, 1900*time.Millisecond)
		long := withTimes(sock("10.1.0.5", 44001, Established, 52), 100, 500*time.Millisecond, 3*time.Second)
		tr := Begin(at(0), []Socket{idle, long})
		if undrained {
			tr.Undrained(testPoolIdle)
		}
		tr.Observe(at(1), []Socket{long})
		wantState(t, clientOf(t, tr, "10.1.0.5"), map[bool]ClientState{false: NoEvidence, true: Left}[undrained])
		answered := withTimes(sock("10.1.0.5", 44001, Established, 52), 100, 1500*time.Millisecond, 200*time.Millisecond)
		tr.Observe(at(2), []Socket{answered})
		wantState(t, clientOf(t, tr, "10.1.0.5"), map[bool]ClientState{false: NoEvidence, true: Holding}[undrained])
	}
}

// A pooling client that closes a connection and, between the same two reads, opens another
// and sends on it has not let go: the activity was on the new connection.
func TestUndrainedCloseAndNewConnectionInOneReadIsSending(t *testing.T) {
	idle := withTimes(sock("10.1.0.6", 45000, Established, 61), 100, 2*time.Second, 1900*time.Millisecond)
	tr := Begin(at(0), []Socket{idle})
	tr.Undrained(testPoolIdle)
	tr.Observe(at(1), []Socket{unanswered(withTimes(sock("10.1.0.6", 45001, Established, 62), 200, 10*time.Millisecond, 20*time.Millisecond))})
	wantState(t, clientOf(t, tr, "10.1.0.6"), Sending)
}

// Undrained, a connection idle as the drain began shows a pool only if it had been answered
// for the pool idle time: one answered a moment before may belong to a client that opens a
// connection per request and is about to close it.
func TestUndrainedJustAnsweredAtTheStartIsNoPool(t *testing.T) {
	for _, c := range []struct {
		sinceSent time.Duration
		want      ClientState
	}{{10 * time.Millisecond, NoEvidence}, {2 * testPoolIdle, Left}} {
		tr := Begin(at(0), []Socket{withTimes(sock("10.1.0.7", 46000, Established, 71), 200, c.sinceSent+30*time.Millisecond, c.sinceSent)})
		tr.Undrained(testPoolIdle)
		tr.Observe(at(1), nil)
		wantState(t, clientOf(t, tr, "10.1.0.7"), c.want)
	}
}

// A connection seen answered, however briefly, that then carries more is reused: a client
// that opens a connection per request never sends a second one on it. Its client pools, and
// its later close is a departure.
func TestUndrainedSecondRequestShowsAPool(t *testing.T) {
	tr := Begin(at(0), nil)
	tr.Undrained(testPoolIdle)
	tr.Observe(at(1), []Socket{withTimes(sock("10.1.0.8", 47000, Established, 81), 200, 12*time.Millisecond, 10*time.Millisecond)})
	tr.Observe(at(2), []Socket{withTimes(sock("10.1.0.8", 47000, Established, 81), 400, 15*time.Millisecond, 12*time.Millisecond)})
	tr.Observe(at(3), nil)
	wantState(t, clientOf(t, tr, "10.1.0.8"), Left)
}

// Reads are BusyReads intervals apart while requests arrive: a client can send on its pooled
// connection, drop the endpoint and close the connection between two reads. The kernel's
// record of the connection shows what no read did: a request after the answered one the
// drain-start read showed (a second request: a pool), or the last answer long before the
// close (kept open idle: a pool). A connection whose one request was answered moments before
// its client closed it shows neither: a client that opens a connection per request does that.
func TestUndrainedRecordShowsThePool(t *testing.T) {
	answeredAtStart := withCookie(withTimes(sock("10.1.0.4", 43000, Established, 41), 200, 30*time.Millisecond, 20*time.Millisecond), 4)
	inFlightAtStart := withCookie(unanswered(withTimes(sock("10.1.0.4", 43000, Established, 41), 200, 5*time.Millisecond, 6*time.Millisecond)), 4)
	closedAfter := func(s Socket, bytes uint64, sinceRecv, sinceSent time.Duration) Socket {
		r := record(s, bytes)
		r.SinceLastDataRecv, r.SinceLastDataSent, r.NothingSent = sinceRecv, sinceSent, false
		return r
	}
	for _, c := range []struct {
		name  string
		start Socket
		final Socket
		want  ClientState
	}{
		{"a second request, then closed", answeredAtStart, closedAfter(answeredAtStart, 450, 800*time.Millisecond, 790*time.Millisecond), Left},
		{"answered, kept open idle, then closed", inFlightAtStart, closedAfter(inFlightAtStart, 201, 2*time.Second, time.Second), Left},
		{"one request, closed right after its answer", inFlightAtStart, closedAfter(inFlightAtStart, 201, 12*time.Millisecond, 10*time.Millisecond), NoEvidence},
	} {
		t.Run(c.name, func(t *testing.T) {
			tr := Begin(at(0), []Socket{c.start})
			tr.Undrained(testPoolIdle)
			tr.RequestsArrived()
			tr.Closed([]Socket{c.final}, true)
			tr.Observe(at(5), nil)
			wantState(t, clientOf(t, tr, "10.1.0.4"), c.want)
		})
	}
}

// A pooling client opens a second connection, drops the endpoint and closes both, all
// between two reads: the new connection, closed by this read, does not make its client a
// sender; one still open (a request it sent after the close, for all the read can tell)
// does. Opened and closed unseen, a connection its client kept open idle shows a pool in its
// record too.
func TestUndrainedNewConnectionClosedInTheSameRead(t *testing.T) {
	pooled := withCookie(withTimes(sock("10.1.0.5", 44000, Established, 51), 300, 2*time.Second, time.Second), 5)
	second := withCookie(unanswered(withTimes(sock("10.1.0.5", 44001, Established, 52), 100, 5*time.Millisecond, 6*time.Millisecond)), 6)
	for _, stillOpen := range []bool{false, true} {
		tr := Begin(at(0), []Socket{pooled})
		tr.Undrained(testPoolIdle)
		if stillOpen {
			tr.Closed([]Socket{record(pooled, 301)}, true)
			tr.Observe(at(1), []Socket{second})
		} else {
			tr.Closed([]Socket{record(pooled, 301), record(second, 101)}, true)
			tr.Observe(at(1), nil)
		}
		wantState(t, clientOf(t, tr, "10.1.0.5"), map[bool]ClientState{false: Left, true: Sending}[stillOpen])
	}

	brief := withCookie(sock("10.1.0.6", 45000, Established, 61), 7)
	for _, idle := range []bool{false, true} {
		tr := Begin(at(0), nil)
		tr.Undrained(testPoolIdle)
		final := record(brief, 201)
		final.SinceLastDataRecv, final.SinceLastDataSent = 12*time.Millisecond, 10*time.Millisecond
		if idle {
			final.SinceLastDataRecv, final.SinceLastDataSent = 2*time.Second, time.Second
		}
		tr.Closed([]Socket{final}, true)
		tr.Observe(at(1), nil)
		wantState(t, clientOf(t, tr, "10.1.0.6"), map[bool]ClientState{false: Sending, true: Left}[idle])
	}
}

// The kernel's record of a connection its client closed just before the drain-start read (so
// that no read showed it) says when its data came, counted back from when the record arrived,
// even after the read it is taken with: a client whose data all came before the hook started
// sent nothing in the drain, and is no sender. One whose data came after is, as of that data's
// time rather than the read's. Where the record's arrival is unknown, its times count back from
// the read, which is later.
func TestRecordFromBeforeTheDrainIsNoActivity(t *testing.T) {
	brief := withCookie(sock("10.1.0.8", 46000, Established, 81), 8)
	freedAt := func(freed, sinceRecv time.Duration) Socket {
		f := record(brief, 201)
		f.Freed = at(0).Add(freed)
		// Answered 50ms before the close: no pool shown (testPoolIdle is 100ms).
		f.SinceLastDataRecv, f.SinceLastDataSent = sinceRecv, 50*time.Millisecond
		return f
	}
	unknown := freedAt(0, 400*time.Millisecond)
	unknown.Freed = time.Time{}
	for _, c := range []struct {
		name     string
		final    Socket
		want     ClientState
		lastData time.Time
	}{
		{"data before the drain began, record just after", freedAt(20*time.Millisecond, 400*time.Millisecond), NoEvidence, time.Time{}},
		{"data after the hook started, before its first read", freedAt(20*time.Millisecond, 100*time.Millisecond), Sending, at(0).Add(-80 * time.Millisecond)},
		{"record after the read it is taken with", freedAt(1050*time.Millisecond, 100*time.Millisecond), Sending, at(0).Add(950 * time.Millisecond)},
		{"data after the drain began", freedAt(900*time.Millisecond, 100*time.Millisecond), Sending, at(0).Add(800 * time.Millisecond)},
		{"record's arrival unknown: counted back from the read", unknown, Sending, at(1).Add(-400 * time.Millisecond)},
	} {
		t.Run(c.name, func(t *testing.T) {
			tr := Begin(at(0), nil)
			tr.BeganAt(at(0).Add(-200 * time.Millisecond)) // the hook started 200ms before its first read
			tr.Undrained(testPoolIdle)
			tr.Closed([]Socket{c.final}, true)
			tr.Observe(at(1), nil)
			cl := clientOf(t, tr, "10.1.0.8")
			wantState(t, cl, c.want)
			if !cl.LastData.Equal(c.lastData) {
				t.Errorf("last data at %v, want %v", cl.LastData.Sub(at(0)), c.lastData.Sub(at(0)))
			}
		})
	}
}
