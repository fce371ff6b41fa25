package sockets

import (
	"fmt"
	"net/netip"
	"testing"
	"time"
)

var drainStart = time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)

func at(seconds int) time.Time { return drainStart.Add(time.Duration(seconds) * time.Second) }

// sock is a socket of the pod's listener 10.0.0.9:15006 from client:port.
func sock(client string, port uint16, state State, inode uint64) Socket {
	return Socket{
		Local:  ap("10.0.0.9:15006"),
		Remote: netip.AddrPortFrom(netip.MustParseAddr(client), port),
		State:  state,
		Inode:  inode,
	}
}

// withInfo adds what inet_diag's tcp_info says.
func withInfo(s Socket, bytesReceived uint64, sinceLastData time.Duration) Socket {
	s.HasTCPInfo, s.BytesReceived, s.SinceLastDataRecv = true, bytesReceived, sinceLastData
	return s
}

func clientOf(t *testing.T, tr *Tracker, addr string) Client {
	t.Helper()
	for _, c := range tr.Clients() {
		if c.Addr == netip.MustParseAddr(addr) {
			return c
		}
	}
	t.Fatalf("client %s not reported; have %v", addr, tr.Clients())
	return Client{}
}

func wantState(t *testing.T, c Client, want ClientState) {
	t.Helper()
	if c.State != want {
		t.Errorf("client %s is %v, want %v (%+v)", c.Addr, c.State, want, c)
	}
}

func TestIdleConnectionKeptOpenIsHolding(t *testing.T) {
	tr := Begin(at(0), []Socket{sock("10.1.0.1", 40000, Established, 11)})
	wantState(t, clientOf(t, tr, "10.1.0.1"), Holding)
	tr.Observe(at(1), []Socket{sock("10.1.0.1", 40000, Established, 11)})
	c := clientOf(t, tr, "10.1.0.1")
	wantState(t, c, Holding)
	if c.HeldAtStart != 1 || c.Held != 1 || !c.FirstSeen.Equal(at(0)) || !c.LastData.IsZero() {
		t.Errorf("got %+v", c)
	}
}

func TestClientCloseIsLeft(t *testing.T) {
	for name, closing := range map[string][]Socket{
		"seen in CLOSE_WAIT":       {sock("10.1.0.1", 40000, CloseWait, 11)},
		"seen in LAST_ACK":         {sock("10.1.0.1", 40000, LastAck, 0)},
		"gone without a TIME_WAIT": nil,
	} {
		t.Run(name, func(t *testing.T) {
			tr := Begin(at(0), []Socket{sock("10.1.0.1", 40000, Established, 11)})
			tr.Observe(at(1), []Socket{sock("10.1.0.1", 40000, Established, 11)})
			tr.Observe(at(2), closing)
			tr.Observe(at(3), nil)
			c := clientOf(t, tr, "10.1.0.1")
			wantState(t, c, Left)
			if !c.LeftAt.Equal(at(2)) || c.ClosedByClient != 1 || c.Held != 0 {
				t.Errorf("got %+v, want left at %v with one close by the client", c, at(2))
			}
		})
	}
}

func TestPodCloseIsSendingNotLeft(t *testing.T) {
	for _, state := range []State{FinWait1, FinWait2, TimeWait, Closing} {
		t.Run(state.String(), func(t *testing.T) {
			tr := Begin(at(0), []Socket{sock("10.1.0.1", 40000, Established, 11)})
			tr.Observe(at(2), []Socket{sock("10.1.0.1", 40000, state, 0)})
			tr.Observe(at(3), nil) // the TIME_WAIT ended (in a real pod, 60 s later)
			c := clientOf(t, tr, "10.1.0.1")
			wantState(t, c, Sending)
			if c.ClosedByPod != 1 || !c.LastData.Equal(at(2)) {
				t.Errorf("got %+v, want one close by the pod, last data at %v", c, at(2))
			}
		})
	}
}

func TestDataOnDrainStartConnectionIsSending(t *testing.T) {
	tr := Begin(at(0), []Socket{withInfo(sock("10.1.0.1", 40000, Established, 11), 1000, 30*time.Second)})
	tr.Observe(at(5), []Socket{withInfo(sock("10.1.0.1", 40000, Established, 11), 1000, 35*time.Second)})
	wantState(t, clientOf(t, tr, "10.1.0.1"), Holding)

	tr.Observe(at(10), []Socket{withInfo(sock("10.1.0.1", 40000, Established, 11), 1500, 1500*time.Millisecond)})
	c := clientOf(t, tr, "10.1.0.1")
	wantState(t, c, Sending)
	if want := at(10).Add(-1500 * time.Millisecond); !c.LastData.Equal(want) || c.Used != 1 || c.Held != 0 {
		t.Errorf("got %+v, want one used connection, last data at %v", c, want)
	}

	// Closed by the client after carrying data: a close, but not evidence of letting go.
	tr.Observe(at(11), nil)
	c = clientOf(t, tr, "10.1.0.1")
	wantState(t, c, Sending)
	if c.ClosedByClient != 0 || c.Used != 1 {
		t.Errorf("got %+v", c)
	}
}

// A drain-start read from /proc has no bytes received; the first read with them is the
// baseline, so it is not taken for data.
func TestBaselineFromFirstReadWithTCPInfo(t *testing.T) {
	tr := Begin(at(0), []Socket{sock("10.1.0.1", 40000, Established, 11)})
	tr.Observe(at(1), []Socket{withInfo(sock("10.1.0.1", 40000, Established, 11), 1000, time.Minute)})
	wantState(t, clientOf(t, tr, "10.1.0.1"), Holding)
	tr.Observe(at(2), []Socket{withInfo(sock("10.1.0.1", 40000, Established, 11), 1001, 0)})
	wantState(t, clientOf(t, tr, "10.1.0.1"), Sending)
}

func TestNewConnectionIsSending(t *testing.T) {
	tr := Begin(at(0), nil)
	tr.Observe(at(3), []Socket{sock("10.1.0.2", 40001, TimeWait, 0)}) // opened and closed by the pod between reads
	c := clientOf(t, tr, "10.1.0.2")
	wantState(t, c, Sending)
	if c.NewConns != 1 || !c.FirstSeen.Equal(at(3)) || !c.LastData.Equal(at(3)) || c.HeldAtStart != 0 {
		t.Errorf("got %+v", c)
	}
	// Seen again: the same connection, not another new one.
	tr.Observe(at(4), []Socket{sock("10.1.0.2", 40001, TimeWait, 0)})
	if c := clientOf(t, tr, "10.1.0.2"); c.NewConns != 1 || !c.LastData.Equal(at(3)) {
		t.Errorf("got %+v, want the connection counted once", c)
	}
	// Data on a new connection moves LastData to when tcp_info says it arrived.
	tr.Observe(at(5), []Socket{withInfo(sock("10.1.0.2", 40002, Established, 21), 100, time.Second)})
	tr.Observe(at(9), []Socket{withInfo(sock("10.1.0.2", 40002, Established, 21), 300, 2*time.Second)})
	if c := clientOf(t, tr, "10.1.0.2"); c.NewConns != 2 || !c.LastData.Equal(at(7)) {
		t.Errorf("got %+v, want 2 new connections, last data at %v", c, at(7))
	}
}

// A socket already closing when the drain began is no client's: its client holds nothing
// the table can watch, as one without any connection. A connection still being accepted
// then is a client's, and counts once it is established (in the undrained mode too, where
// an established connection is checked for whether it holds).
func TestClosingAtDrainStartIsNoClient(t *testing.T) {
	for _, undrained := range []bool{false, true} {
		tr := Begin(at(0), []Socket{sock("10.1.0.3", 40000, TimeWait, 0), sock("10.1.0.4", 40000, SynRecv, 41)})
		if undrained {
			tr.Undrained(testPoolIdle)
		}
		tr.Observe(at(1), []Socket{sock("10.1.0.3", 40000, TimeWait, 0), withInfo(sock("10.1.0.4", 40000, Established, 41), 200, 0)})
		tr.Observe(at(2), []Socket{withInfo(sock("10.1.0.4", 40000, Established, 41), 300, 0)})
		if cs := tr.Clients(); len(cs) != 1 || cs[0].Addr != netip.MustParseAddr("10.1.0.4") {
			t.Fatalf("undrained %v: clients %+v, want 10.1.0.4 only", undrained, cs)
		}
		c := clientOf(t, tr, "10.1.0.4")
		wantState(t, c, map[bool]ClientState{false: Sending, true: Holding}[undrained])
		if c.HeldAtStart != 0 || c.NewConns != 0 || c.LastData.IsZero() {
			t.Errorf("undrained %v: got %+v", undrained, c)
		}
	}
}

func TestHoldingOutranksSending(t *testing.T) {
	tr := Begin(at(0), []Socket{sock("10.1.0.1", 40000, Established, 11)})
	tr.Observe(at(1), []Socket{sock("10.1.0.1", 40000, Established, 11), sock("10.1.0.1", 40005, Established, 12)})
	c := clientOf(t, tr, "10.1.0.1")
	wantState(t, c, Holding)
	if c.NewConns != 1 || !c.LastData.Equal(at(1)) {
		t.Errorf("got %+v", c)
	}
}

func TestLeftNeedsEveryDrainStartConnectionClosed(t *testing.T) {
	start := []Socket{sock("10.1.0.1", 40000, Established, 11), sock("10.1.0.1", 40001, Established, 12)}
	tr := Begin(at(0), start)
	tr.Observe(at(1), start[1:])
	c := clientOf(t, tr, "10.1.0.1")
	wantState(t, c, Holding)
	if c.Held != 1 || c.ClosedByClient != 1 {
		t.Errorf("got %+v", c)
	}
	tr.Observe(at(2), nil)
	wantState(t, clientOf(t, tr, "10.1.0.1"), Left)
}

// The second connection is closed by the pod after the client closed the first: the pod's
// Envoy may have answered a request on it after the first close, so it is not Left.
func TestPodCloseAfterClientCloseIsSending(t *testing.T) {
	start := []Socket{sock("10.1.0.1", 40000, Established, 11), sock("10.1.0.1", 40001, Established, 12)}
	tr := Begin(at(0), start)
	tr.Observe(at(1), start[1:])
	tr.Observe(at(2), []Socket{sock("10.1.0.1", 40001, TimeWait, 0)})
	c := clientOf(t, tr, "10.1.0.1")
	wantState(t, c, Sending)
	if c.ClosedByClient != 1 || c.ClosedByPod != 1 {
		t.Errorf("got %+v", c)
	}
}

// Activity and a close seen in the same read cannot be ordered: not Left.
func TestActivityInTheReadOfTheCloseIsSending(t *testing.T) {
	tr := Begin(at(0), []Socket{sock("10.1.0.1", 40000, Established, 11)})
	tr.Observe(at(1), []Socket{sock("10.1.0.1", 40009, TimeWait, 0)})
	wantState(t, clientOf(t, tr, "10.1.0.1"), Sending)
	tr.Observe(at(2), nil)
	wantState(t, clientOf(t, tr, "10.1.0.1"), Sending)
}

func TestLeftThenActivityIsSending(t *testing.T) {
	held := sock("10.1.0.1", 40000, Established, 11)
	tr := Begin(at(0), []Socket{held})
	tr.Observe(at(1), []Socket{held, sock("10.1.0.1", 40009, TimeWait, 0)}) // sent once more, then
	tr.Observe(at(2), []Socket{held, sock("10.1.0.1", 40009, TimeWait, 0)})
	tr.Observe(at(3), []Socket{sock("10.1.0.1", 40009, TimeWait, 0), sock("10.1.0.1", 40000, CloseWait, 11)})
	tr.Observe(at(4), []Socket{sock("10.1.0.1", 40009, TimeWait, 0)})
	c := clientOf(t, tr, "10.1.0.1")
	wantState(t, c, Left)
	if !c.LeftAt.Equal(at(3)) || !c.LastData.Equal(at(1)) {
		t.Errorf("got %+v, want left at %v after last data at %v", c, at(3), at(1))
	}
	tr.Observe(at(5), []Socket{sock("10.1.0.1", 40011, Established, 31)})
	c = clientOf(t, tr, "10.1.0.1")
	wantState(t, c, Sending)
	if !c.LeftAt.IsZero() {
		t.Errorf("LeftAt %v on a client that is not Left", c.LeftAt)
	}
}

// A later connection may reuse a closed one's addresses and ports; the inode (or cookie)
// tells them apart.
func TestReusedFourTupleIsANewConnection(t *testing.T) {
	tr := Begin(at(0), []Socket{sock("10.1.0.1", 40000, Established, 11)})
	tr.Observe(at(1), []Socket{sock("10.1.0.1", 40000, Established, 99)})
	c := clientOf(t, tr, "10.1.0.1")
	wantState(t, c, Sending)
	if c.NewConns != 1 || c.ClosedByClient != 1 || c.Held != 0 {
		t.Errorf("got %+v", c)
	}

	cookie := func(s Socket, c uint64) Socket { s.Cookie = c; return s }
	tr = Begin(at(0), []Socket{cookie(sock("10.1.0.1", 40000, Established, 11), 7)})
	tr.Observe(at(1), []Socket{cookie(sock("10.1.0.1", 40000, TimeWait, 0), 7)}) // same cookie: same connection
	c = clientOf(t, tr, "10.1.0.1")
	if c.NewConns != 0 || c.ClosedByPod != 1 {
		t.Errorf("got %+v, want the TIME_WAIT taken for the drain-start connection", c)
	}
}

func TestManyClients(t *testing.T) {
	var start []Socket
	for i := range 4 {
		start = append(start, sock(fmt.Sprintf("10.1.0.%d", i+1), 40000, Established, uint64(i+1)))
	}
	tr := Begin(at(0), start)
	tr.Observe(at(1), []Socket{
		start[0],                              // holding
		sock("10.1.0.2", 40000, CloseWait, 2), // left
		sock("10.1.0.3", 40000, TimeWait, 0),  // closed by the pod
		sock("10.1.0.5", 40000, Established, 5),
	})
	got := map[string]ClientState{}
	for _, c := range tr.Clients() {
		got[c.Addr.String()] = c.State
	}
	want := map[string]ClientState{
		"10.1.0.1": Holding, "10.1.0.2": Left, "10.1.0.3": Sending, "10.1.0.4": Left, "10.1.0.5": Sending,
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("got %v, want %v", got, want)
	}
	cs := tr.Clients()
	for i := 1; i < len(cs); i++ {
		if cs[i-1].Addr.Compare(cs[i].Addr) >= 0 {
			t.Errorf("clients not ordered by address: %v", cs)
		}
	}
}

// Under TPROXY the watched ports are the app's, and the app's own connections from its
// sidecar (source 127.0.0.6, to the pod's IP) are on them too: they are no client's, and an
// idle one holds nothing. A pod whose listener is on loopback (the simulator's) keeps its
// loopback clients.
func TestSidecarsOwnConnectionsAreNoClient(t *testing.T) {
	toApp := func(from string, state State, inode uint64) Socket {
		return Socket{Local: ap("10.0.0.9:8080"), Remote: ap(from), State: state, Inode: inode}
	}
	tr := Begin(at(0), []Socket{
		toApp("127.0.0.6:41000", Established, 1),
		toApp("[::6]:41001", Established, 2),
		toApp("10.1.0.1:40000", Established, 3),
	})
	tr.Observe(at(1), []Socket{
		toApp("127.0.0.6:41000", Established, 1),
		toApp("127.0.0.6:41002", Established, 4),
		toApp("10.1.0.1:40000", Established, 3),
	})
	clients := tr.Clients()
	if len(clients) != 1 || clients[0].Addr != netip.MustParseAddr("10.1.0.1") {
		t.Fatalf("clients %+v, want 10.1.0.1 alone", clients)
	}

	onLoopback := Socket{Local: ap("127.0.0.1:15006"), Remote: ap("127.0.3.7:40000"), State: Established, Inode: 5}
	tr = Begin(at(0), []Socket{onLoopback})
	wantState(t, clientOf(t, tr, "127.0.3.7"), Holding)
}
