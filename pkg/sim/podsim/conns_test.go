package podsim

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// tcpSocket is one socket of the kernel's table, as meshdrain reads it in a pod.
type tcpSocket struct {
	local, remote netip.AddrPort
	state         string
}

// tcpStates names the kernel's TCP states (include/net/tcp_states.h).
var tcpStates = map[uint8]string{
	1: "ESTABLISHED", 2: "SYN_SENT", 3: "SYN_RECV", 4: "FIN_WAIT1", 5: "FIN_WAIT2",
	6: "TIME_WAIT", 7: "CLOSE", 8: "CLOSE_WAIT", 9: "LAST_ACK", 10: "LISTEN", 11: "CLOSING",
}

// Netlink sock_diag constants (include/uapi/linux/sock_diag.h, inet_diag.h).
const (
	sockDiagByFamily    = 20
	inetDiagReqBytecode = 1
	inetDiagBCJmp       = 1
	inetDiagBCSEq       = 11
	inetDiagBCDEq       = 12
	inetDiagReqLen      = 56
	inetDiagMsgLen      = 72
)

// readTCPTable asks the kernel (NETLINK_SOCK_DIAG, unprivileged) for every IPv4 TCP socket
// whose local or remote port is port, TIME_WAIT ones included. The filter runs in the kernel:
// /proc/net/tcp would list every socket of the machine, tens of thousands on a busy CI host,
// and take longer to read than the moments these tests tell apart.
func readTCPTable(t testing.TB, port uint16) []tcpSocket {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_NETLINK, syscall.SOCK_DGRAM|syscall.SOCK_CLOEXEC, syscall.NETLINK_INET_DIAG)
	if err != nil {
		t.Skipf("no sock_diag to read the socket table: %v", err)
	}
	defer syscall.Close(fd)
	// The filter, inet_diag bytecode as ss writes "sport = P or dport = P": ops {code, yes,
	// no} that advance by yes or no bytes, a port in a second op's no (host byte order);
	// ending exactly at the end accepts, past it rejects. [sport == P: on to the jump, else
	// over it] [jump: over the last op, to the end] [dport == P: to the end, else past it].
	bc := make([]byte, 20)
	op := func(at int, code uint8, yes uint8, no uint16) {
		bc[at], bc[at+1] = code, yes
		binary.NativeEndian.PutUint16(bc[at+2:], no)
	}
	op(0, inetDiagBCSEq, 8, 12)
	op(4, 0, 0, port)
	op(8, inetDiagBCJmp, 4, 12)
	op(12, inetDiagBCDEq, 8, 12)
	op(16, 0, 0, port)
	req := make([]byte, syscall.NLMSG_HDRLEN+inetDiagReqLen+4+len(bc))
	binary.NativeEndian.PutUint32(req[0:], uint32(len(req)))
	binary.NativeEndian.PutUint16(req[4:], sockDiagByFamily)
	binary.NativeEndian.PutUint16(req[6:], syscall.NLM_F_REQUEST|syscall.NLM_F_DUMP)
	body := req[syscall.NLMSG_HDRLEN:]
	body[0], body[1] = syscall.AF_INET, syscall.IPPROTO_TCP
	binary.NativeEndian.PutUint32(body[4:], 0xfff) // every state
	attr := body[inetDiagReqLen:]
	binary.NativeEndian.PutUint16(attr[0:], uint16(4+len(bc)))
	binary.NativeEndian.PutUint16(attr[2:], inetDiagReqBytecode)
	copy(attr[4:], bc)
	if err := syscall.Sendto(fd, req, 0, &syscall.SockaddrNetlink{Family: syscall.AF_NETLINK}); err != nil {
		t.Fatalf("sock_diag request: %v", err)
	}
	var out []tcpSocket
	buf := make([]byte, 1<<16)
	for {
		n, _, err := syscall.Recvfrom(fd, buf, 0)
		if err != nil {
			t.Fatalf("sock_diag answer: %v", err)
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			t.Fatalf("sock_diag answer: %v", err)
		}
		for _, m := range msgs {
			switch m.Header.Type {
			case syscall.NLMSG_DONE:
				return out
			case syscall.NLMSG_ERROR:
				t.Fatalf("sock_diag error %d", int32(binary.NativeEndian.Uint32(m.Data)))
			}
			if len(m.Data) < inetDiagMsgLen {
				t.Fatalf("short sock_diag message (%d bytes)", len(m.Data))
			}
			d := m.Data
			sock := tcpSocket{state: tcpStates[d[1]]}
			sock.local = netip.AddrPortFrom(netip.AddrFrom4([4]byte(d[8:12])), binary.BigEndian.Uint16(d[4:]))
			sock.remote = netip.AddrPortFrom(netip.AddrFrom4([4]byte(d[24:28])), binary.BigEndian.Uint16(d[6:]))
			out = append(out, sock)
		}
	}
}

// connWorld is a pod (the app behind the emulated Envoy, a native sidecar so that the drain
// at t0 leaves Envoy running) and a fleet of clients with hand-made plans, without a kubelet:
// the test reads the socket table at moments it chooses.
type connWorld struct {
	t     testing.TB
	sc    Scenario
	pod   netip.AddrPort
	begin time.Time
	fleet *fleet
	// stale are the sockets on the pod's port before the run: TIME_WAITs of an earlier
	// listener on the same port (another test's pod, with clients from the same addresses)
	// that the kernel keeps for a minute. They are not this run's.
	stale map[[2]netip.AddrPort]bool
	// late is how late, in real time, the run's own actions ran at worst: its table reads and
	// the sidecar's drain at t0 (the clients' lateness is the fleet's).
	mu   sync.Mutex
	late time.Duration
}

func startConnWorld(t *judged, sc Scenario, plans []clientPlan) *connWorld {
	t.Helper()
	other, err := startOtherReplicas(sc.TimeScale)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { other.Close() })
	a, err := startApp(sc.Threads, sc.TimeScale, sc.AppShutdown)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Kill)
	spec := ModeSidecar(SidecarNative, 5*time.Second, 45*time.Second, 5*time.Second)
	side, err := startEmulatedSidecar(sc, spec, Strategy{Kind: StrategyNone}, a.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = side.Close() })
	pod, err := netip.ParseAddrPort(side.InboundAddr(sc.Port))
	if err != nil {
		t.Fatal(err)
	}
	w := &connWorld{t: t, sc: sc, pod: pod, stale: map[[2]netip.AddrPort]bool{}}
	t.world = w
	for _, s := range readTCPTable(t, pod.Port()) {
		if s.state != "LISTEN" {
			w.stale[[2]netip.AddrPort{s.local, s.remote}] = true
		}
	}
	w.fleet = newFleet(sc, plans, pod.String(), other.Addr())
	ctx, cancel := context.WithCancel(context.Background())
	// Cleanups run last first: the clients stop before the pod goes.
	t.Cleanup(func() { cancel(); w.fleet.wait() })
	w.begin = time.Now()
	w.fleet.start(ctx, w.begin)
	// t0: the pod is deleted; the native sidecar's preStop drains the inbound listeners.
	t0 := w.at(sc.Warmup)
	time.AfterFunc(time.Until(t0), func() {
		w.noteLate(time.Since(t0))
		side.Terminate()
	})
	return w
}

// at is the real instant of a pod time from the start of the run.
func (w *connWorld) at(d time.Duration) time.Time { return w.begin.Add(w.sc.scale(d)) }

func (w *connWorld) noteLate(by time.Duration) {
	w.mu.Lock()
	w.late = max(w.late, by)
	w.mu.Unlock()
}

// lateness is how late the run's actors ran at worst, in real time: its reads, the drain at
// t0, and its clients' sends and EDS updates.
func (w *connWorld) lateness() time.Duration {
	w.mu.Lock()
	late := w.late
	w.mu.Unlock()
	w.fleet.mu.Lock()
	defer w.fleet.mu.Unlock()
	return max(late, w.fleet.lateSend.by, w.fleet.lateRemoval.by)
}

// table waits until pod time d and reads the socket table. A read that ends late is noted:
// what it saw may be what came after d.
func (w *connWorld) table(d time.Duration) connTable {
	w.t.Helper()
	time.Sleep(time.Until(w.at(d)))
	tab := w.read()
	w.noteLate(time.Since(w.at(d)))
	return tab
}

// eventually reads the socket table from pod time d until it shows what is wanted, for at
// most 10 s of real time: for a state the pod reaches at a moment nothing else follows, so
// that a busy machine's late timer is waited out rather than judged.
func (w *connWorld) eventually(d time.Duration, wanted func(connTable) bool) connTable {
	w.t.Helper()
	time.Sleep(time.Until(w.at(d)))
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		tab := w.read()
		if wanted(tab) || time.Now().After(end) {
			return tab
		}
	}
}

func (w *connWorld) read() connTable {
	tab := connTable{pod: w.pod}
	for _, s := range readTCPTable(w.t, w.pod.Port()) {
		if !w.stale[[2]netip.AddrPort{s.local, s.remote}] {
			tab.sockets = append(tab.sockets, s)
		}
	}
	return tab
}

// judged is one run of a socket-table test at one time scale: it keeps the failures, so that a
// run whose actors did not keep pod time can be replayed at a larger scale rather than judged.
type judged struct {
	*testing.T
	world    *connWorld
	failures []string
	cleanups []func()
}

func (j *judged) Errorf(format string, args ...any) {
	j.failures = append(j.failures, fmt.Sprintf(format, args...))
}

func (j *judged) Cleanup(f func()) { j.cleanups = append(j.cleanups, f) }

func (j *judged) end() {
	for i := len(j.cleanups) - 1; i >= 0; i-- {
		j.cleanups[i]()
	}
}

// judgeAtATimelyScale runs a socket-table test at sc's time scale, and again at 3 and 9 times
// it while a run fails having not kept pod time (an action more than 0.15 s of pod time late: the
// moments the tests tell apart are 0.3 s apart). A run that kept pod time is judged as it is,
// and so is the last one, with its lateness said: a failure is never retried away.
func judgeAtATimelyScale(t *testing.T, sc Scenario, run func(j *judged, sc Scenario)) {
	t.Helper()
	base := sc.TimeScale
	for i, factor := range []float64{1, 3, 9} {
		sc.TimeScale = base * factor
		j := &judged{T: t}
		var w *connWorld
		func() {
			defer j.end()
			run(j, sc)
		}()
		w = j.world
		if len(j.failures) == 0 {
			return
		}
		late := w.lateness()
		timely := late <= sc.scale(150*time.Millisecond)
		if timely || i == 2 {
			for _, f := range j.failures {
				t.Errorf("at time scale %g (actions late by %v at worst): %s", sc.TimeScale, late, f)
			}
			return
		}
		t.Logf("time scale %g: actions ran up to %v late, past 0.15s of pod time; replaying at %g: %s",
			sc.TimeScale, late, base*factor*3, strings.Join(j.failures, " | "))
	}
}

// connTable is one reading of the socket table, seen from the pod's inbound port.
type connTable struct {
	pod     netip.AddrPort
	sockets []tcpSocket
}

// podSide counts the pod's sockets of connections from client address from in state.
func (c connTable) podSide(from netip.Addr, state string) int {
	n := 0
	for _, s := range c.sockets {
		if s.local == c.pod && s.remote.Addr() == from && s.state == state {
			n++
		}
	}
	return n
}

// clientSide counts the client's sockets (from its address to the pod) in state.
func (c connTable) clientSide(from netip.Addr, state string) int {
	n := 0
	for _, s := range c.sockets {
		if s.remote == c.pod && s.local.Addr() == from && s.state == state {
			n++
		}
	}
	return n
}

// established are the client addresses with an established connection to the pod.
func (c connTable) established() map[netip.Addr]int {
	out := map[netip.Addr]int{}
	for _, s := range c.sockets {
		if s.local == c.pod && s.state == "ESTABLISHED" {
			out[s.remote.Addr()]++
		}
	}
	return out
}

// connScenario is a small pod whose clients' plans the tests write by hand, at a time scale
// where one second of pod time is 300ms (900ms under the race detector, which slows the
// world threefold and more): the moments the tests tell apart are 0.3s of pod time (90ms) or
// more from the events around them.
func connScenario() Scenario {
	sc := UserScenario()
	sc.Clients, sc.QPS = 3, 3
	sc.Warmup = time.Second
	sc.TimeScale = 0.3
	if raceEnabled {
		sc.TimeScale = 0.9
	}
	return sc
}

// handPlan is a client that sends requests of 10ms at the given pod times (from the start of the
// run) and learns that the pod is gone lag after t0.
func handPlan(lag time.Duration, arrivals ...time.Duration) clientPlan {
	p := clientPlan{lag: lag, arrivals: arrivals}
	for range arrivals {
		p.work = append(p.work, 10*time.Millisecond)
	}
	return p
}

func clientAddr(i int) netip.Addr {
	a, _ := netip.AddrFromSlice(clientSourceIP(i).To4())
	return a
}

const ms = time.Millisecond

// With client sidecars' pools, the pod's socket table tells which client has applied the
// removal: each client's idle connections stay established, from its own address, until its
// EDS update, and are then closed by the client (the TIME_WAIT is on the client's side). A
// request during the drain gets Connection: close and its client closes that connection at
// once, before its EDS update: Envoy does not close it first (it would wait for its
// drain_timeout), so there is no TIME_WAIT on the pod's side either. A pool holds one
// connection, or two where a loaded machine made a client's requests overlap: the counts are
// taken against what each held during the drain.
func TestClientsLetGoAtTheirEDSUpdate(t *testing.T) {
	judgeAtATimelyScale(t, connScenario(), clientsLetGo)
}

func clientsLetGo(t *judged, sc Scenario) {
	// t0 is at 1s; the EDS updates at 2.5s, 3.5s and 4.5s; client 2 sends once more at 1.6s.
	w := startConnWorld(t, sc, []clientPlan{
		handPlan(1500*ms, 100*ms, 500*ms),
		handPlan(2500*ms, 200*ms, 600*ms),
		handPlan(3500*ms, 300*ms, 700*ms, 1600*ms),
	})
	c0, c1, c2 := clientAddr(0), clientAddr(1), clientAddr(2)

	during := w.table(1300 * ms)
	est := during.established()
	for _, c := range []netip.Addr{c0, c1, c2} {
		if est[c] < 1 || est[c] > 2 {
			t.Errorf("during the drain: %d established connections from %s, want its pool's; all: %v", est[c], c, est)
		}
	}
	if est[netip.MustParseAddr("127.0.0.1")] != 0 {
		t.Errorf("a client dialled from 127.0.0.1: %v", est)
	}

	afterClose := w.table(2000 * ms)
	if n := afterClose.podSide(c2, "ESTABLISHED"); n != est[c2]-1 {
		t.Errorf("client 2 still has %d of its %d connections after its response with Connection: close, want one fewer", n, est[c2])
	}
	if n := afterClose.clientSide(c2, "TIME_WAIT"); n != 1 {
		t.Errorf("client 2: %d TIME_WAIT on its side, want 1: it closes on Connection: close", n)
	}
	if n := afterClose.podSide(c2, "TIME_WAIT"); n != 0 {
		t.Errorf("client 2: %d TIME_WAIT on the pod's side: the pod closed first", n)
	}
	if n := afterClose.podSide(c0, "ESTABLISHED"); n != est[c0] {
		t.Errorf("client 0 before its EDS update: %d established, want its %d", n, est[c0])
	}

	afterEDS0 := w.table(3000 * ms)
	if n := afterEDS0.podSide(c0, "ESTABLISHED"); n != 0 {
		t.Errorf("client 0 after its EDS update: %d established, want 0", n)
	}
	if n := afterEDS0.clientSide(c0, "TIME_WAIT"); n != est[c0] {
		t.Errorf("client 0 after its EDS update: %d TIME_WAIT on its side, want %d (closed by the client)", n, est[c0])
	}
	if n := afterEDS0.podSide(c0, "TIME_WAIT"); n != 0 {
		t.Errorf("client 0: %d TIME_WAIT on the pod's side, want 0", n)
	}
	if n := afterEDS0.podSide(c1, "ESTABLISHED"); n != est[c1] {
		t.Errorf("client 1 before its EDS update: %d established, want its %d", n, est[c1])
	}

	afterEDS1 := w.table(4000 * ms)
	if n, tw := afterEDS1.podSide(c1, "ESTABLISHED"), afterEDS1.clientSide(c1, "TIME_WAIT"); n != 0 || tw != est[c1] {
		t.Errorf("client 1 after its EDS update: %d established, %d TIME_WAIT on its side; want 0 and %d", n, tw, est[c1])
	}
}

// The shapes where a close tells nothing, or nothing closes: the pod must fall back on
// silence for them.
func TestClientsThatDoNotLetGo(t *testing.T) {
	for _, tc := range []struct {
		name string
		// pooled: the client holds a connection between its requests.
		pooled bool
		setup  func(*Scenario)
		check  func(t *judged, w *connWorld, c netip.Addr)
	}{
		{"persistent-session: the endpoint is kept DRAINING, idle connections stay", true, func(sc *Scenario) {
			sc.ClientConns = ConnsPersistentSession
		}, func(t *judged, w *connWorld, c netip.Addr) {
			if n := w.table(2200*ms).podSide(c, "ESTABLISHED"); n != 1 {
				t.Errorf("after the client's EDS update: %d established, want its idle connection kept", n)
			}
		}},
		{"tcp: the client's own pool through a TCP proxy, nothing closes", true, func(sc *Scenario) {
			sc.Protocol, sc.ClientConns = ProtocolTCP, ConnsPool
		}, func(t *judged, w *connWorld, c netip.Addr) {
			if n := w.table(2200*ms).podSide(c, "ESTABLISHED"); n != 1 {
				t.Errorf("after the client's EDS update: %d established, want its connection kept", n)
			}
		}},
		{"no-sidecar: closed at its own idle timeout, not at its EDS update", true, func(sc *Scenario) {
			sc.ClientConns, sc.ClientIdleTimeout = ConnsNoSidecar, 2*time.Second
		}, func(t *judged, w *connWorld, c netip.Addr) {
			// The last request ends at about 0.51s: idle until about 2.51s.
			if n := w.table(2000*ms).podSide(c, "ESTABLISHED"); n != 1 {
				t.Errorf("after the client's EDS update: %d established, want its idle connection kept", n)
			}
			late := w.table(3000 * ms)
			if n, tw := late.podSide(c, "ESTABLISHED"), late.clientSide(c, "TIME_WAIT"); n != 0 || tw != 1 {
				t.Errorf("after its idle timeout: %d established, %d TIME_WAIT on its side; want 0 and 1", n, tw)
			}
		}},
		{"per-request: the client holds no connection", false, func(sc *Scenario) {
			sc.ClientConns = ConnsPerRequest
		}, func(t *judged, w *connWorld, c netip.Addr) {
			during := w.table(1300 * ms)
			if n := during.podSide(c, "ESTABLISHED"); n != 0 {
				t.Errorf("during the drain: %d established, want none", n)
			}
			if n := during.clientSide(c, "TIME_WAIT"); n != 2 {
				t.Errorf("%d TIME_WAIT on the client's side, want one per request (2)", n)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sc := connScenario()
			tc.setup(&sc)
			if err := sc.Validate(); err != nil {
				t.Fatal(err)
			}
			judgeAtATimelyScale(t, sc, func(t *judged, sc Scenario) {
				// t0 at 1s, the EDS update at 1.5s.
				w := startConnWorld(t, sc, []clientPlan{handPlan(500*ms, 100*ms, 500*ms)})
				if n := w.table(900*ms).podSide(clientAddr(0), "ESTABLISHED"); tc.pooled && n != 1 {
					t.Errorf("before t0: %d established, want the pooled connection", n)
					return
				}
				tc.check(t, w, clientAddr(0))
			})
		})
	}
}

// A client that ignores Connection: close leaves the close to Envoy's drain timeout: then the
// pod's side closes first and keeps the TIME_WAIT.
func TestPodClosesAtTheDrainTimeout(t *testing.T) {
	sc := connScenario()
	sc.TimeScale = 0.1 // the drain timeout, 5s, is 500ms
	judgeAtATimelyScale(t, sc, podClosesAtTheDrainTimeout)
}

func podClosesAtTheDrainTimeout(t *judged, sc Scenario) {
	w := startConnWorld(t, sc, nil)
	sent := sc.Warmup + time.Second
	time.Sleep(time.Until(w.at(sent)))
	pool := newClientPool(w.pod.String(), clientSourceIP(7), sc.clientPolicy(), time.Second)
	defer pool.closeAll()
	conn, err := pool.get(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodGet, "http://pod/", nil)
	req.Header.Set(workHeader, "1ms")
	if err := req.Write(conn); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(conn.br, req)
	if err != nil || resp.StatusCode != http.StatusOK || !resp.Close {
		t.Fatalf("response during the drain: %v, %v; want 200 with Connection: close", resp, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	// The client neither closes nor sends: the drain timeout closes it from the pod's side.
	// Nothing else happens in the pod after it, so the states after it are waited for.
	if n := w.table(sent+hcmDrainTimeout/2).podSide(clientAddr(7), "ESTABLISHED"); n != 1 {
		t.Errorf("before the drain timeout: %d established, want 1", n)
	}
	finWait := func(c connTable) bool { return c.podSide(clientAddr(7), "FIN_WAIT2") == 1 }
	if !finWait(w.eventually(sent+hcmDrainTimeout, finWait)) {
		t.Errorf("after the drain timeout: no pod-side socket in FIN_WAIT2, want 1 (the pod closed first)")
	}
	pool.discard(conn)
	timeWait := func(c connTable) bool { return c.podSide(clientAddr(7), "TIME_WAIT") == 1 }
	if !timeWait(w.eventually(0, timeWait)) {
		t.Errorf("once the client has closed too: no pod-side socket in TIME_WAIT, want 1")
	}
}

// What each kind of client does with its connections, and its defaults.
func TestClientPolicy(t *testing.T) {
	sc := UserScenario()
	sc.TimeScale = 1
	for _, tc := range []struct {
		conns    ClientConns
		protocol string
		idle     time.Duration
		want     poolPolicy
	}{
		{"", ProtocolHTTP, 0, poolPolicy{reuse: true, drainOnRemoval: true, idleTimeout: time.Hour}},
		{"", ProtocolTCP, 0, poolPolicy{reuse: false, idleTimeout: time.Hour}},
		{ConnsPool, ProtocolTCP, 0, poolPolicy{reuse: true, idleTimeout: time.Hour}},
		{ConnsPool, ProtocolHTTP, 90 * time.Second, poolPolicy{reuse: true, drainOnRemoval: true, idleTimeout: 90 * time.Second}},
		{ConnsPersistentSession, ProtocolHTTP, 0, poolPolicy{reuse: true, idleTimeout: time.Hour}},
		{ConnsNoSidecar, ProtocolHTTP, 0, poolPolicy{reuse: true, idleTimeout: time.Minute}},
		{ConnsPerRequest, ProtocolHTTP, 0, poolPolicy{idleTimeout: time.Hour}},
	} {
		sc.ClientConns, sc.Protocol, sc.ClientIdleTimeout = tc.conns, tc.protocol, tc.idle
		if got := sc.clientPolicy(); got != tc.want {
			t.Errorf("%q on %s, idle %v: %+v, want %+v", tc.conns, tc.protocol, tc.idle, got, tc.want)
		}
	}
	sc.ClientConns = "keep"
	sc.ClientIdleTimeout = -time.Second
	err := sc.Validate()
	if err == nil || !strings.Contains(err.Error(), `client conns "keep"`) || !strings.Contains(err.Error(), "client idle timeout") {
		t.Errorf("Validate = %v, want both client settings refused", err)
	}
}

// Every client has its own loopback address, never 127.0.0.1 nor a .0 or .255 host part.
func TestClientSourceIPs(t *testing.T) {
	seen := map[netip.Addr]int{}
	for i := range 5000 {
		a := clientAddr(i)
		b := a.As4()
		if b[0] != 127 || b[3] < 2 || b[3] == 255 {
			t.Fatalf("client %d: %s", i, a)
		}
		if j, ok := seen[a]; ok {
			t.Fatalf("clients %d and %d share %s", j, i, a)
		}
		seen[a] = i
	}
}
