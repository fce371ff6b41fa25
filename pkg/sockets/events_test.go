package sockets

import "testing"

// readConns is one read of c: the sockets shown, the records that came with them, and the
// events each told, in order.
func readConns[T any](c *Conns[T], socks, records []Socket) []ConnEventKind {
	var kinds []ConnEventKind
	c.NextRead()
	for _, s := range socks {
		kinds = append(kinds, c.Show(s).Kind)
	}
	for _, f := range records {
		if ev, ok := c.Record(f); ok {
			kinds = append(kinds, ev.Kind)
		}
	}
	c.EndRead(func(ev ConnEvent[T]) { kinds = append(kinds, ev.Kind) })
	return kinds
}

func wantKinds(t *testing.T, what string, got []ConnEventKind, want ...ConnEventKind) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: events %v, want %v", what, got, want)
		return
	}
	for i := range got {
		if got[i] != want[i] {
			t.Errorf("%s: events %v, want %v", what, got, want)
			return
		}
	}
}

// A connection accepted, shown with data, closed by its client and freed with data since the
// last read; then a record no read explains: opened and closed between two reads.
func TestConnsEvents(t *testing.T) {
	c := NewConns[int](ConnPolicy{})
	s := withCookie(withInfo(sock("10.1.0.1", 40000, Established, 11), 100, 0), 1)
	wantKinds(t, "first read", readConns(c, []Socket{s}, nil), Accepted)
	c.NextRead()
	ev := c.Show(withInfo(s, 150, 0))
	if ev.Kind != Shown || !ev.Data || ev.Before.Bytes != 100 || ev.ClosedBy() != NotClosed {
		t.Errorf("shown with more bytes: %+v", ev)
	}
	closing := s
	closing.State = CloseWait
	if ev := c.Show(closing); ev.ClosedBy() != ClosedByClient || ev.Data {
		t.Errorf("CLOSE_WAIT: closed by %v, data %v; want the client's, no data", ev.ClosedBy(), ev.Data)
	}
	c.EndRead(nil)
	c.NextRead()
	ev, ok := c.Record(record(s, 300))
	if !ok || ev.Kind != Freed || !ev.Data || ev.Conn.Of != 0 {
		t.Errorf("its record: %+v, want it freed with data", ev)
	}
	var gone []*Conn[int]
	c.EndRead(func(ev ConnEvent[int]) {
		if ev.Kind != Gone || ev.ClosedBy() != ClosedByClient {
			t.Errorf("gone: %+v", ev)
		}
		gone = append(gone, ev.Conn)
	})
	if len(gone) != 1 || !gone[0].Freed || c.Len() != 0 {
		t.Errorf("gone %v (followed %d), want the freed connection dropped", gone, c.Len())
	}
	brief := withCookie(record(sock("10.1.0.2", 40001, Close, 0), 80), 2)
	wantKinds(t, "a record no read showed", readConns(c, nil, []Socket{brief}), Brief)
}

// Policy (1): read from /proc (no cookie), two connections on the same ends are told apart by
// inode, or are one by cookie alone.
func TestConnsIdentityOnProcReads(t *testing.T) {
	first, later := sock("10.1.0.1", 40000, Established, 11), sock("10.1.0.1", 40000, Established, 12)
	for cookieOnly, want := range map[bool]ConnEventKind{false: Accepted, true: Shown} {
		c := NewConns[int](ConnPolicy{CookieOnly: cookieOnly})
		readConns(c, []Socket{first}, nil)
		wantKinds(t, "another inode", readConns(c, []Socket{later}, nil), want)
	}
}

// Policy (2): a connection one read missed, shown again by its cookie, is the same or a new
// one; a Kept one is the same whatever the policy.
func TestConnsConnectionAReadMissed(t *testing.T) {
	s := withCookie(sock("10.1.0.1", 40000, Established, 11), 5)
	for restore, want := range map[bool]ConnEventKind{false: Accepted, true: Shown} {
		c := NewConns[int](ConnPolicy{RestoreMissed: restore})
		readConns(c, []Socket{s}, nil)
		wantKinds(t, "the read that missed it", readConns(c, nil, nil), Gone)
		wantKinds(t, "shown again", readConns(c, []Socket{s}, nil), want)
	}
	c := NewConns[int](ConnPolicy{})
	readConns(c, []Socket{s}, nil)
	kept, _ := c.Lookup(KeyOf(s))
	kept.Kept = true
	wantKinds(t, "a kept one missed", readConns(c, nil, nil))
	wantKinds(t, "a kept one shown again", readConns(c, []Socket{s}, nil), Shown)
}

// Policy (3): a record with a cookie no connection has, on the ends of one first seen in
// TIME_WAIT or of one read without a cookie.
func TestConnsRecordByAddress(t *testing.T) {
	timeWait := withCookie(sock("10.1.0.1", 40000, TimeWait, 0), 21)
	uncookied := sock("10.1.0.2", 40000, Established, 12)
	for match, want := range map[AddressMatch][2]ConnEventKind{
		MatchFirstTimeWait: {Freed, Brief},
		MatchUncookied:     {Brief, Freed},
	} {
		c := NewConns[int](ConnPolicy{RecordByAddress: match})
		readConns(c, []Socket{timeWait, uncookied}, nil)
		c.NextRead()
		for i, s := range []Socket{timeWait, uncookied} {
			c.Show(s)
			if ev, _ := c.Record(record(withCookie(s, 99+uint64(i)), 120)); ev.Kind != want[i] {
				t.Errorf("match %d, record on %v's ends: %v, want %v", match, s.State, ev.Kind, want[i])
			}
		}
		if ev, _ := c.Record(record(withCookie(timeWait, 200), 120)); ev.Kind != Brief {
			t.Errorf("match %d: a second record on the TIME_WAIT's ends: %v, want a brief one", match, ev.Kind)
		}
	}
}

// A connection replaced on its ends by a later one is remembered: its late record is its own,
// no brief connection, and says nothing of the later one.
func TestConnsRecordOfAReplacedConnection(t *testing.T) {
	first := withCookie(sock("10.1.0.1", 40000, Established, 11), 1)
	later := withCookie(sock("10.1.0.1", 40000, Established, 12), 2)
	c := NewConns[string](ConnPolicy{})
	readConns(c, []Socket{first}, nil)
	c.NextRead()
	c.Show(first).Conn.Of = "first"
	c.EndRead(nil)
	wantKinds(t, "the later one", readConns(c, []Socket{later}, nil), Accepted)
	c.NextRead()
	c.Show(later)
	ev, ok := c.Record(record(first, 10))
	if !ok || ev.Kind != Freed || ev.Conn.Of != "first" {
		t.Errorf("the replaced one's record: %+v, want it freed", ev)
	}
	if now, _ := c.Lookup(KeyOf(later)); now.Freed {
		t.Error("the later connection taken for freed")
	}
}

// The Tracker's policies as the table's events serve them.

// A drain-start connection a read missed is the same when shown again (Conn.Kept): no new
// connection of its client.
func TestTrackerDrainStartConnectionAReadMissed(t *testing.T) {
	s := sock("10.1.0.1", 40000, Established, 11)
	tr := Begin(at(0), []Socket{s})
	tr.Observe(at(1), nil)
	tr.Observe(at(2), []Socket{s})
	if c := clientOf(t, tr, "10.1.0.1"); c.NewConns != 0 {
		t.Errorf("the drain-start connection shown again counted as new: %+v", c)
	}
}

// Policy (2): another connection a read missed is a new one when shown again.
func TestTrackerCountsAConnectionAReadMissedAnew(t *testing.T) {
	s := withCookie(sock("10.1.0.1", 40000, Established, 11), 5)
	tr := Begin(at(0), nil)
	tr.Observe(at(1), []Socket{s})
	tr.Observe(at(2), nil)
	tr.Observe(at(3), []Socket{s})
	if c := clientOf(t, tr, "10.1.0.1"); c.NewConns != 2 {
		t.Errorf("new connections %d, want 2 (%+v)", c.NewConns, c)
	}
}

// Policy (3): a record on the ends of a drain-start connection read from /proc (no cookie) is
// taken for it, no brief connection, and says nothing of it: its idle close is a departure.
func TestTrackerRecordOnTheEndsOfAProcConnection(t *testing.T) {
	s := sock("10.1.0.1", 40000, Established, 11)
	tr := Begin(at(0), []Socket{s})
	tr.Closed([]Socket{withCookie(record(s, 500), 9)}, true)
	tr.Observe(at(1), nil)
	c := clientOf(t, tr, "10.1.0.1")
	wantState(t, c, Left)
	if c.NewConns != 0 {
		t.Errorf("the record taken for a brief connection: %+v", c)
	}
}

// Policy (4): the record of one of the sidecar's own connections (Istio's ::6) is no client's.
func TestTrackerIgnoresTheSidecarsOwnRecords(t *testing.T) {
	own := Socket{Local: ap("10.0.0.9:8080"), Remote: ap("[::6]:41001"), Cookie: 3}
	tr := Begin(at(0), nil)
	tr.Closed([]Socket{record(own, 100)}, true)
	tr.Observe(at(1), nil)
	if got := tr.Clients(); len(got) != 0 {
		t.Errorf("clients %+v, want none", got)
	}
}

// A record that came while a read still showed another connection says nothing more at the
// read that finds it gone: its data since is not the client's activity then.
func TestTrackerEarlyRecordOfAnotherConnection(t *testing.T) {
	s := withCookie(withInfo(sock("10.1.0.1", 40000, Established, 11), 100, 0), 5)
	tr := Begin(at(0), nil)
	tr.Observe(at(1), []Socket{s})
	tr.Closed([]Socket{record(s, 400)}, true)
	tr.Observe(at(2), []Socket{s})
	tr.Observe(at(3), nil)
	if c := clientOf(t, tr, "10.1.0.1"); !c.LastData.Equal(at(1)) {
		t.Errorf("last data %v, want the read that showed it (%v)", c.LastData, at(1))
	}
}
