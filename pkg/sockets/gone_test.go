package sockets

import (
	"net"
	"slices"
	"syscall"
	"testing"
	"time"
)

// record is the kernel's record of s freed: State Close, no inode, bytes received as given
// (with the peer's FIN, if one came).
func record(s Socket, bytesReceived uint64) Socket {
	s.State, s.Inode, s.HasTCPInfo, s.BytesReceived = Close, 0, true, bytesReceived
	return s
}

// withCookie gives s the cookie inet_diag reports.
func withCookie(s Socket, cookie uint64) Socket { s.Cookie = cookie; return s }

// Issue 27: requests reach the pod from a busy client while an idle one closes its
// drain-start connection. The kernel's records tell the idle close from a close after a
// request, whatever else arrived: without them both count as sending.
func TestRecordsTellIdleCloseFromUsedWhileOthersSend(t *testing.T) {
	idle := withCookie(withInfo(sock("10.1.0.1", 40000, Established, 11), 100, time.Minute), 1)
	used := withCookie(withInfo(sock("10.1.0.2", 40000, Established, 12), 100, time.Minute), 2)
	for _, recorded := range []bool{true, false} {
		tr := Begin(at(0), []Socket{idle, used})
		tr.RequestsArrived()
		if recorded {
			tr.Closed([]Socket{record(idle, 101), record(used, 350)}, true)
		}
		tr.Observe(at(1), nil)
		want := map[bool]ClientState{true: Left, false: Sending}[recorded]
		wantState(t, clientOf(t, tr, "10.1.0.1"), want)
		wantState(t, clientOf(t, tr, "10.1.0.2"), Sending)
		if c := clientOf(t, tr, "10.1.0.1"); c.Open != 0 {
			t.Errorf("records %v: %d open after its close, want 0", recorded, c.Open)
		}
	}
}

// The kernel drops a socket from the table just before it frees it and broadcasts the record
// from a work queue: a read can find the connection gone before its record. It is then
// judged at the next read, held until then; a record lost falls back on the arrivals.
func TestRecordComingAReadLate(t *testing.T) {
	idle := withCookie(withInfo(sock("10.1.0.1", 40000, Established, 11), 100, time.Minute), 1)
	tr := Begin(at(0), []Socket{idle})
	tr.RequestsArrived()
	tr.Closed(nil, true)
	tr.Observe(at(1), nil)
	c := clientOf(t, tr, "10.1.0.1")
	wantState(t, c, Holding)
	if c.Open != 1 {
		t.Errorf("a connection whose close is not judged yet: %d open, want 1", c.Open)
	}
	if got := tr.Vanished(nil, nil); len(got) != 1 || got[0] != 1 {
		t.Errorf("Vanished %v, want the connection's cookie", got)
	}
	tr.Closed([]Socket{record(idle, 101)}, true)
	tr.Observe(at(2), nil)
	c = clientOf(t, tr, "10.1.0.1")
	wantState(t, c, Left)
	if !c.LeftAt.Equal(at(2)) {
		t.Errorf("left at %v, want %v", c.LeftAt, at(2))
	}

	tr = Begin(at(0), []Socket{idle})
	tr.RequestsArrived()
	tr.Closed(nil, true)
	tr.Observe(at(1), nil)
	tr.Closed(nil, false) // records were lost: requests arrived as it vanished
	tr.Observe(at(2), nil)
	wantState(t, clientOf(t, tr, "10.1.0.1"), Sending)
}

// A record taken with a read that still showed the connection (it was freed right after the
// dump) is kept for the read that finds it gone.
func TestRecordOfAConnectionTheReadStillShowed(t *testing.T) {
	idle := withCookie(withInfo(sock("10.1.0.1", 40000, Established, 11), 100, time.Minute), 1)
	tr := Begin(at(0), []Socket{idle})
	tr.Closed([]Socket{record(idle, 101)}, true)
	tr.Observe(at(1), []Socket{idle})
	wantState(t, clientOf(t, tr, "10.1.0.1"), Holding)
	if got := tr.Vanished(nil, nil); len(got) != 0 {
		t.Errorf("Vanished %v, want none: its record is kept", got)
	}
	tr.RequestsArrived()
	tr.Closed(nil, true)
	tr.Observe(at(2), nil)
	wantState(t, clientOf(t, tr, "10.1.0.1"), Left)
}

// A connection opened and closed between two reads (a client opening one per request while
// the pod drains) shows only in its record: a new connection of its client, counted once,
// however late its record comes after a read that did show it.
func TestBriefConnectionsShowInTheirRecords(t *testing.T) {
	tr := Begin(at(0), nil)
	brief := withCookie(sock("10.1.0.3", 41000, Established, 0), 7)
	tr.Closed([]Socket{record(brief, 300)}, true)
	tr.Observe(at(1), nil)
	c := clientOf(t, tr, "10.1.0.3")
	wantState(t, c, Sending)
	if c.NewConns != 1 || c.Open != 0 || !c.LastData.Equal(at(1)) {
		t.Errorf("got %+v, want one new connection, none open, last data at %v", c, at(1))
	}

	seen := withCookie(withInfo(sock("10.1.0.4", 41001, Established, 21), 200, 0), 8)
	tr.Observe(at(2), []Socket{seen})
	tr.Observe(at(3), nil)                       // gone; its record comes a read late
	tr.Closed([]Socket{record(seen, 201)}, true) //
	tr.Observe(at(4), nil)                       //
	if c := clientOf(t, tr, "10.1.0.4"); c.NewConns != 1 {
		t.Errorf("got %+v, want its one connection counted once", c)
	}
}

// status watches from before the drain, judging as prestop --drain-at end does until the
// sidecar is seen draining; from then on as in a draining pod, with the connections open then
// as the drain-start ones.
func TestDrainBeginsJudgesFromThenOn(t *testing.T) {
	pooled := withCookie(withTimes(sock("10.1.0.1", 40000, Established, 11), 100, time.Second, time.Second), 1)
	leaving := withCookie(withTimes(sock("10.1.0.2", 40000, Established, 12), 100, time.Second, time.Second), 2)
	leavingBusy := withCookie(withTimes(sock("10.1.0.3", 40000, Established, 13), 100, time.Second, time.Second), 3)
	tr := Begin(at(0), []Socket{pooled, leaving, leavingBusy})
	tr.Undrained(testPoolIdle)
	// A request on the pooled connection, answered a while ago; another client lets go, and
	// a third closes its pooled connection after a last request: both departures, undrained.
	usedBefore := withTimes(pooled, 300, 900*time.Millisecond, 900*time.Millisecond)
	tr.Closed([]Socket{record(leaving, 101), record(leavingBusy, 400)}, true)
	tr.Observe(at(1), []Socket{usedBefore})
	wantState(t, clientOf(t, tr, "10.1.0.1"), Holding)
	wantState(t, clientOf(t, tr, "10.1.0.2"), Left)
	wantState(t, clientOf(t, tr, "10.1.0.3"), Left)

	// A connection the client kept open since, idle, and one opened and answered before the
	// drain: both drain-start connections from here, holding. The client that left stays so.
	later := withCookie(withTimes(sock("10.1.0.5", 40100, Established, 31), 100, 2*time.Second, 2*time.Second), 5)
	tr.Observe(at(2), []Socket{withTimes(pooled, 300, 1900*time.Millisecond, 1900*time.Millisecond), later})
	tr.DrainBegins()
	tr.Closed(nil, true)
	tr.Observe(at(3), []Socket{withTimes(pooled, 300, 2900*time.Millisecond, 2900*time.Millisecond), withTimes(later, 100, 3*time.Second, 3*time.Second)})
	wantState(t, clientOf(t, tr, "10.1.0.1"), Holding)
	wantState(t, clientOf(t, tr, "10.1.0.2"), Left)
	wantState(t, clientOf(t, tr, "10.1.0.3"), Left)
	wantState(t, clientOf(t, tr, "10.1.0.5"), Holding)

	// Now draining: a close right after a request says nothing, an idle close is a departure.
	tr.Closed([]Socket{record(pooled, 500), record(later, 101)}, true)
	tr.Observe(at(4), nil)
	wantState(t, clientOf(t, tr, "10.1.0.1"), Sending)
	wantState(t, clientOf(t, tr, "10.1.0.5"), Left)
}

// A connection answered after the drain began (the read before the one that shows the drain,
// or the hook's start) got Connection: close: its client's close right after is no departure.
func TestAnsweredAfterTheDrainBeganIsNotIdle(t *testing.T) {
	answeredJustNow := withCookie(withTimes(sock("10.1.0.1", 40000, Established, 11), 100, 20*time.Millisecond, 20*time.Millisecond), 1)
	answeredLongAgo := withCookie(withTimes(sock("10.1.0.2", 40000, Established, 12), 100, time.Minute, time.Minute), 2)
	tr := Begin(at(0), []Socket{answeredJustNow, answeredLongAgo})
	tr.DrainedSince(at(0).Add(-time.Second))
	tr.Closed([]Socket{record(answeredJustNow, 101), record(answeredLongAgo, 101)}, true)
	tr.Observe(at(1), nil)
	// Its request came before the drain's first read, as one in flight then: silence judges.
	wantState(t, clientOf(t, tr, "10.1.0.1"), NoEvidence)
	wantState(t, clientOf(t, tr, "10.1.0.2"), Left)

	// Seen draining at read 2: the request seen at read 1 was answered at 1.5 s, after it,
	// and may have been told Connection: close; its client closes the connection after.
	tr = Begin(at(0), []Socket{answeredLongAgo})
	tr.Undrained(testPoolIdle)
	tr.Observe(at(1), []Socket{unanswered(withTimes(answeredLongAgo, 400, 10*time.Millisecond, time.Minute))})
	tr.DrainBegins()
	tr.Observe(at(2), []Socket{withTimes(answeredLongAgo, 400, 1010*time.Millisecond, 500*time.Millisecond)})
	wantState(t, clientOf(t, tr, "10.1.0.2"), Sending)
	tr.Closed([]Socket{record(answeredLongAgo, 401)}, true)
	tr.Observe(at(3), nil)
	wantState(t, clientOf(t, tr, "10.1.0.2"), Sending)
}

// The kernel broadcasts every freed connection of the watched port with its final bytes
// received, to a process of any user, and nothing of other ports.
func TestGoneWatchOnTheRealKernel(t *testing.T) {
	if _, ok := readers(t)["diag"]; !ok {
		t.Skip("inet_diag refused here")
	}
	srv := listen(t, "tcp4", "127.0.0.1:0")
	other := listen(t, "tcp4", "127.0.0.1:0")
	w, err := WatchGone([]uint16{srv.port})
	if err != nil {
		t.Skipf("the destroy broadcasts cannot be joined here: %v", err)
	}
	defer w.Close()
	ports := []uint16{srv.port}

	idleClient, idleAccepted := srv.dialKeep(t, "127.0.0.2", "127.0.0.1")
	usedClient, usedAccepted := srv.dialKeep(t, "127.0.0.3", "127.0.0.1")
	otherClient, otherAccepted := other.dialKeep(t, "127.0.0.4", "127.0.0.1")
	open := settle(t, DiagReader{}, srv, ports, func(s []Socket) bool { return len(s) == 2 })
	if _, err := usedClient.Write([]byte("GET / HTTP/1.1\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	if _, err := usedAccepted.Read(buf); err != nil {
		t.Fatal(err)
	}
	for _, pair := range [][2]net.Conn{{idleClient, idleAccepted}, {usedClient, usedAccepted}, {otherClient, otherAccepted}} {
		pair[0].Close() // the client first, as a client's Envoy does
		pair[1].Close()
	}
	var cookies []uint64
	for _, s := range open {
		cookies = append(cookies, s.Cookie)
	}
	w.Await(cookies, 2*time.Second)
	final, complete := w.Take()
	if !complete {
		t.Errorf("records lost")
	}
	got := map[string]uint64{}
	for _, f := range final {
		if f.Local.Port() != srv.port {
			t.Errorf("a record of an unwatched port: %+v", f)
			continue
		}
		if !slices.Contains(cookies, f.Cookie) || f.State != Close || !f.HasTCPInfo {
			t.Errorf("record %+v: want one of the cookies %v, CLOSE, with tcp_info", f, cookies)
		}
		got[f.Remote.Addr().String()] = f.BytesReceived
	}
	// The count may hold the client's FIN: one more than the data.
	if b, ok := got["127.0.0.2"]; !ok || b > 1 {
		t.Errorf("idle connection's record: %d bytes (found %v), want 0 or 1", b, ok)
	}
	if b := got["127.0.0.3"]; b < 18 || b > 19 {
		t.Errorf("used connection's record: %d bytes, want the 18 of its request (and the FIN)", b)
	}
	if final, _ := w.Take(); len(final) != 0 {
		t.Errorf("a second Take returned %d records again", len(final))
	}
}

// TestGoneWatchIdleCostsNoCPU: a watch with nothing to receive waits on the poller. Its
// receiving goroutine once returned to the poller at every empty receive and spun on a CPU,
// which cost a hook with per-client evidence a whole core for its whole drain.
func TestGoneWatchIdleCostsNoCPU(t *testing.T) {
	w, err := WatchGone([]uint16{1})
	if err != nil {
		t.Skipf("the destroy broadcasts cannot be joined here: %v", err)
	}
	defer w.Close()
	before := processCPU(t)
	time.Sleep(300 * time.Millisecond)
	if used := processCPU(t) - before; used > 100*time.Millisecond {
		t.Fatalf("an idle watch used %v of CPU in 300ms", used)
	}
}

func processCPU(t *testing.T) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
