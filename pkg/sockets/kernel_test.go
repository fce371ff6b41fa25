package sockets

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/meshdrain/meshdrain/pkg/sim/loopback"
)

// These tests read this machine's real socket table: listeners on loopback, clients bound to
// distinct 127.0.0.x addresses that stand for distinct client pods. Other processes may own
// a socket whose local port is, by chance, a test listener's (an ephemeral port of theirs), so
// the tests look only at the sockets of the connections they dialed.

// server is a loopback listener whose accepted connections a test receives one per dial.
type server struct {
	ln       net.Listener
	port     uint16
	accepted chan net.Conn
	clients  map[netip.AddrPort]bool // the client ends of the connections dialed
}

func listen(t testing.TB, network, address string) *server {
	t.Helper()
	ln, err := net.Listen(network, address)
	if err != nil {
		t.Fatal(err)
	}
	s := &server{ln: ln, port: uint16(ln.Addr().(*net.TCPAddr).Port), accepted: make(chan net.Conn, 16), clients: map[netip.AddrPort]bool{}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.accepted <- c
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	return s
}

// dial connects from the client address from (an IP, port chosen by the kernel) to the
// server at to, and returns both ends; the test closes them.
func (s *server) dial(t testing.TB, from, to string) (client, accepted net.Conn) {
	t.Helper()
	d := loopback.Dialer(net.ParseIP(from), 2*time.Second)
	client, err := d.Dial("tcp", net.JoinHostPort(to, fmt.Sprint(s.port)))
	if err != nil {
		t.Fatal(err)
	}
	local := client.LocalAddr().(*net.TCPAddr).AddrPort()
	s.clients[netip.AddrPortFrom(local.Addr().Unmap(), local.Port())] = true
	select {
	case accepted = <-s.accepted:
	case <-time.After(2 * time.Second):
		t.Fatal("connection not accepted")
	}
	return client, accepted
}

func (s *server) dialKeep(t testing.TB, from, to string) (client, accepted net.Conn) {
	t.Helper()
	client, accepted = s.dial(t, from, to)
	t.Cleanup(func() { client.Close(); accepted.Close() })
	return client, accepted
}

// ours keeps the sockets of connections dialed to s.
func (s *server) ours(socks []Socket) []Socket {
	return slices.DeleteFunc(socks, func(sock Socket) bool {
		return sock.Local.Port() != s.port || !s.clients[sock.Remote]
	})
}

// readers returns both implementations, leaving inet_diag out where the kernel or a seccomp
// profile refuses it; any other inet_diag error fails the test.
func readers(t *testing.T) map[string]Reader {
	t.Helper()
	if _, err := (DiagReader{}).Read([]uint16{1}); err != nil {
		for _, refused := range []error{syscall.EPERM, syscall.EACCES, syscall.EPROTONOSUPPORT, syscall.EAFNOSUPPORT} {
			if errors.Is(err, refused) {
				t.Logf("inet_diag refused here, testing /proc only: %v", err)
				return map[string]Reader{"proc": ProcReader{}}
			}
		}
		t.Fatalf("inet_diag: %v", err)
	}
	return map[string]Reader{"diag": DiagReader{}, "proc": ProcReader{}}
}

// settle reads until done accepts the table: loopback FINs travel in softirq context and
// may land just after Close returns. It gives up after two seconds.
func settle(t *testing.T, r Reader, srv *server, ports []uint16, done func([]Socket) bool) []Socket {
	t.Helper()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	deadline := time.NewTimer(2 * time.Second)
	defer deadline.Stop()
	for {
		socks, err := r.Read(ports)
		if err != nil {
			t.Fatal(err)
		}
		socks = srv.ours(socks)
		if done(socks) {
			return socks
		}
		select {
		case <-tick.C:
		case <-deadline.C:
			t.Fatalf("table did not settle; last read:\n%s", table(socks))
		}
	}
}

func table(socks []Socket) string {
	var b strings.Builder
	for _, s := range socks {
		fmt.Fprintf(&b, "  %v %v %v inode=%d cookie=%d rx=%d info=%v bytes=%d last=%v\n", s.Local, s.Remote, s.State,
			s.Inode, s.Cookie, s.RxQueue, s.HasTCPInfo, s.BytesReceived, s.SinceLastDataRecv)
	}
	return b.String()
}

// byClient maps each client address to the states of its sockets, sorted.
func byClient(socks []Socket) map[string][]State {
	m := map[string][]State{}
	for _, s := range socks {
		m[s.Remote.Addr().String()] = append(m[s.Remote.Addr().String()], s.State)
	}
	for _, states := range m {
		slices.Sort(states)
	}
	return m
}

func TestReadersSeeWhoClosed(t *testing.T) {
	for name, r := range readers(t) {
		t.Run(name, func(t *testing.T) {
			srv := listen(t, "tcp4", "127.0.0.1:0")
			other := listen(t, "tcp4", "127.0.0.1:0") // unwatched: none of its sockets may show
			other.dialKeep(t, "127.0.0.9", "127.0.0.1")
			// The watched port between two that nothing listens on, so that the kernel's
			// filter is taken through both its "no" and its "yes" jumps.
			ports := []uint16{1, srv.port, 2}

			srv.dialKeep(t, "127.0.0.2", "127.0.0.1") // idle
			sender, senderAccepted := srv.dialKeep(t, "127.0.0.3", "127.0.0.1")
			if _, err := sender.Write([]byte("hello")); err != nil {
				t.Fatal(err)
			}
			clientClosed, _ := srv.dialKeep(t, "127.0.0.4", "127.0.0.1")
			clientClosed.Close() // our side: CLOSE_WAIT, as the server never closes
			podClient, podClosed := srv.dialKeep(t, "127.0.0.5", "127.0.0.1")
			podClosed.Close() // pod first: FIN_WAIT2, then TIME_WAIT once the client closes
			podClient.Close()
			goneClient, goneAccepted := srv.dialKeep(t, "127.0.0.6", "127.0.0.1")
			goneClient.Close()

			want := map[string][]State{
				"127.0.0.2": {Established},
				"127.0.0.3": {Established},
				"127.0.0.4": {CloseWait},
				"127.0.0.5": {TimeWait},
			}
			socks := settle(t, r, srv, ports, func(socks []Socket) bool {
				got := byClient(socks)
				return fmt.Sprint(got["127.0.0.6"]) == fmt.Sprint([]State{CloseWait}) &&
					fmt.Sprint(got["127.0.0.5"]) == fmt.Sprint([]State{TimeWait})
			})
			// The client closed first, so closing our end sends the last FIN: LAST_ACK, then
			// gone without a TIME_WAIT.
			goneAccepted.Close()
			socks = settle(t, r, srv, ports, func(socks []Socket) bool { return fmt.Sprint(byClient(socks)) == fmt.Sprint(want) })

			all, err := r.Read(ports)
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range all {
				if s.Local.Port() != srv.port || other.clients[s.Remote] {
					t.Errorf("socket of an unwatched port: %v %v", s.Local, s.Remote)
				}
			}
			for _, s := range socks {
				if s.Local.Addr() != netip.MustParseAddr("127.0.0.1") {
					t.Errorf("socket of another address: %v", s.Local)
				}
				if s.Remote.Addr().String() == "127.0.0.3" && s.RxQueue != 5 {
					t.Errorf("sender's rx_queue %d, want the 5 unread bytes", s.RxQueue)
				}
				if s.State == Established && s.Inode == 0 {
					t.Errorf("open socket without inode: %v", s)
				}
				if s.State == TimeWait && s.Inode != 0 {
					t.Errorf("TIME_WAIT socket with inode %d", s.Inode)
				}
				wantInfo := name == "diag" && s.State != TimeWait
				if s.HasTCPInfo != wantInfo {
					t.Errorf("%v %v: HasTCPInfo %v, want %v", s.Remote, s.State, s.HasTCPInfo, wantInfo)
				}
				if name == "diag" && s.Cookie == 0 {
					t.Errorf("inet_diag socket without cookie: %v", s)
				}
				if s.HasTCPInfo {
					wantBytes := uint64(0)
					if s.Remote.Addr().String() == "127.0.0.3" {
						wantBytes = 5
					}
					if s.BytesReceived != wantBytes {
						t.Errorf("%v received %d bytes, want %d", s.Remote, s.BytesReceived, wantBytes)
					}
					if s.SinceLastDataRecv > time.Minute {
						t.Errorf("%v last data %v ago", s.Remote, s.SinceLastDataRecv)
					}
				}
			}
			_ = senderAccepted
		})
	}
}

// IPv6 clients, and IPv4 clients of a dual-stack listener, whose sockets are AF_INET6 with
// IPv4-mapped addresses, both reported with the client's plain address.
func TestReadersIPv6AndDualStack(t *testing.T) {
	probe, err := net.Listen("tcp6", "[::1]:0")
	if err != nil {
		t.Skipf("no IPv6 loopback: %v", err)
	}
	probe.Close()
	for name, r := range readers(t) {
		t.Run(name, func(t *testing.T) {
			srv := listen(t, "tcp", "[::]:0")
			srv.dialKeep(t, "::1", "::1")
			srv.dialKeep(t, "127.0.0.2", "127.0.0.1")
			socks := settle(t, r, srv, []uint16{7, 9, srv.port}, func(socks []Socket) bool { return len(socks) == 2 })
			got := byClient(socks)
			if fmt.Sprint(got) != fmt.Sprint(map[string][]State{"::1": {Established}, "127.0.0.2": {Established}}) {
				t.Errorf("got\n%s", table(socks))
			}
		})
	}
}

// The cookie stays with the connection through the application's close into TIME_WAIT.
func TestDiagCookieFollowsConnectionIntoTimeWait(t *testing.T) {
	if _, ok := readers(t)["diag"]; !ok {
		t.Skip("inet_diag unavailable")
	}
	srv := listen(t, "tcp4", "127.0.0.1:0")
	client, accepted := srv.dialKeep(t, "127.0.0.2", "127.0.0.1")
	ports := []uint16{srv.port}
	open := settle(t, DiagReader{}, srv, ports, func(s []Socket) bool { return len(s) == 1 })
	accepted.Close()
	client.Close()
	closed := settle(t, DiagReader{}, srv, ports, func(s []Socket) bool { return len(s) == 1 && s[0].State == TimeWait })
	if open[0].Cookie == 0 || closed[0].Cookie != open[0].Cookie {
		t.Errorf("cookie %d while open, %d in TIME_WAIT", open[0].Cookie, closed[0].Cookie)
	}
}

// The tracker over real reads: the drain begins with five idle clients; then one sends,
// one closes, the pod closes one, one closes and the pod follows, and a new client connects.
func TestTrackerOnRealSockets(t *testing.T) {
	for name, r := range readers(t) {
		t.Run(name, func(t *testing.T) {
			srv := listen(t, "tcp4", "127.0.0.1:0")
			ports := []uint16{srv.port}
			conns := map[string][2]net.Conn{}
			for _, client := range []string{"127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5", "127.0.0.6"} {
				c, a := srv.dialKeep(t, client, "127.0.0.1")
				conns[client] = [2]net.Conn{c, a}
			}
			start := settle(t, r, srv, ports, func(s []Socket) bool { return len(s) == 5 })
			tr := Begin(drainStart, start)

			if _, err := conns["127.0.0.3"][0].Write([]byte("GET / HTTP/1.1\r\n\r\n")); err != nil {
				t.Fatal(err)
			}
			conns["127.0.0.4"][0].Close() // the client lets go: CLOSE_WAIT on our side
			conns["127.0.0.5"][1].Close() // the pod closes: FIN_WAIT2
			conns["127.0.0.5"][0].Close() // then TIME_WAIT
			conns["127.0.0.6"][0].Close() // the client lets go and the pod follows: gone
			settle(t, r, srv, ports, func(s []Socket) bool {
				return byClient(s)["127.0.0.6"] != nil && byClient(s)["127.0.0.6"][0] == CloseWait
			})
			conns["127.0.0.6"][1].Close()
			srv.dialKeep(t, "127.0.0.7", "127.0.0.1")
			later := settle(t, r, srv, ports, func(s []Socket) bool {
				got := byClient(s)
				return got["127.0.0.6"] == nil && fmt.Sprint(got["127.0.0.5"]) == fmt.Sprint([]State{TimeWait}) && got["127.0.0.7"] != nil &&
					(name != "diag" || slices.ContainsFunc(s, func(s Socket) bool { return s.BytesReceived > 0 }))
			})
			tr.Observe(at(1), later)

			want := map[string]ClientState{
				"127.0.0.2": Holding,
				// With /proc the request is invisible: the connection looks as idle as before.
				"127.0.0.3": map[string]ClientState{"diag": Sending, "proc": Holding}[name],
				"127.0.0.4": Left,
				"127.0.0.5": Sending,
				"127.0.0.6": Left,
				"127.0.0.7": Sending,
			}
			got := map[string]ClientState{}
			for _, c := range tr.Clients() {
				got[c.Addr.String()] = c.State
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("got  %v\nwant %v\ntable:\n%s", got, want, table(later))
			}
		})
	}
}

func TestAutoReaderFallsBackToProc(t *testing.T) {
	refused := failingReader{syscall.EPERM}
	a := &AutoReader{Diag: refused, Proc: ProcReader{}}
	srv := listen(t, "tcp4", "127.0.0.1:0")
	srv.dialKeep(t, "127.0.0.2", "127.0.0.1")
	socks, err := a.Read([]uint16{srv.port})
	// Only this test's client: another process's outgoing connection may use the same
	// local port (it is an ephemeral one here), and is read too.
	socks = slices.DeleteFunc(socks, func(s Socket) bool { return s.Remote.Addr().String() != "127.0.0.2" })
	if err != nil || len(socks) != 1 {
		t.Fatalf("got %v, %v; want the socket from /proc", socks, err)
	}
	if !errors.Is(a.FellBack(), syscall.EPERM) {
		t.Errorf("FellBack() = %v, want the inet_diag error", a.FellBack())
	}

	a = &AutoReader{Diag: refused, Proc: ProcReader{Root: t.TempDir()}}
	_, err = a.Read([]uint16{srv.port})
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "operation not permitted") || !strings.Contains(err.Error(), "net/tcp") {
		t.Fatalf("got %v, want ErrUnavailable naming both causes", err)
	}
	if _, again := a.Read([]uint16{srv.port}); again != err {
		t.Errorf("second read: %v, want the same error", again)
	}

	a = NewReader()
	if _, err := a.Read([]uint16{srv.port}); err != nil {
		t.Fatal(err)
	}
	t.Logf("default reader fell back: %v", a.FellBack())
}

type failingReader struct{ err error }

func (f failingReader) Read([]uint16) ([]Socket, error) { return nil, f.err }

// tcp_info's last-data times tell a request in flight from a connection answered and idle,
// on the machine's own kernel: what the undrained tracker's pool and busy tests read.
func TestDiagTellsInFlightFromAnswered(t *testing.T) {
	if _, ok := readers(t)["diag"]; !ok {
		t.Skip("inet_diag refused here")
	}
	srv := listen(t, "tcp4", "127.0.0.1:0")
	client, accepted := srv.dialKeep(t, "127.0.9.1", "127.0.0.1")
	// The first request follows the handshake at once, often within the same jiffy:
	// only tcpi_data_segs_out tells it is unanswered.
	if _, err := client.Write([]byte("GET / HTTP/1.1\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	if _, err := accepted.Read(buf); err != nil {
		t.Fatal(err)
	}
	ports := []uint16{srv.port}
	inFlight := settle(t, DiagReader{}, srv, ports, func(s []Socket) bool { return len(s) == 1 })[0]
	if !inFlight.InFlight() || inFlight.Answered(0) {
		t.Errorf("a request read but not answered: InFlight %v, Answered %v (%s)", inFlight.InFlight(), inFlight.Answered(0), table([]Socket{inFlight}))
	}
	time.Sleep(20 * time.Millisecond)
	if _, err := accepted.Write([]byte("HTTP/1.1 204 No Content\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	if _, err := client.Read(buf); err != nil {
		t.Fatal(err)
	}
	time.Sleep(kernelPoolIdle + 20*time.Millisecond)
	answered := settle(t, DiagReader{}, srv, ports, func(s []Socket) bool { return len(s) == 1 })[0]
	if answered.InFlight() || !answered.Answered(kernelPoolIdle) {
		t.Errorf("answered and idle %v: InFlight %v, Answered %v (%s; sent %v ago)", kernelPoolIdle, answered.InFlight(), answered.Answered(kernelPoolIdle), table([]Socket{answered}), answered.SinceLastDataSent)
	}
}

// kernelPoolIdle is how long TestDiagTellsInFlightFromAnswered leaves a connection answered.
const kernelPoolIdle = 50 * time.Millisecond

// Both readers report each socket's owner, and list the listener itself only when asked.
func TestReadersReportOwnersAndListeners(t *testing.T) {
	uid := uint32(syscall.Getuid())
	for name, r := range readers(t) {
		t.Run(name, func(t *testing.T) {
			srv := listen(t, "tcp4", "127.0.0.1:0")
			srv.dialKeep(t, "127.0.0.2", "127.0.0.1")
			socks := settle(t, r, srv, []uint16{srv.port}, func(socks []Socket) bool { return len(socks) == 1 })
			if socks[0].State != Established || socks[0].UID != uid {
				t.Errorf("accepted socket %+v, want ESTABLISHED owned by uid %d", socks[0], uid)
			}
			listeners, err := r.(ListenerReader).Listeners([]uint16{srv.port})
			if err != nil {
				t.Fatal(err)
			}
			want := ap(srv.ln.Addr().String())
			var found bool
			for _, l := range listeners {
				if l.State != Listen {
					t.Errorf("Listeners returned a %v socket", l.State)
				}
				if l.Local == want {
					found = true
					if l.UID != uid {
						t.Errorf("listener owned by uid %d, want %d", l.UID, uid)
					}
				}
			}
			if !found {
				t.Errorf("listener %v not among %+v", want, listeners)
			}
		})
	}
}

// With SOCKETS_TEST_LISTEN_AS_NOBODY=1 the test binary is a child owned by uid 65534: it
// listens, says the port, accepts connections, closes them on a line on stdin, and exits when
// stdin closes.
func TestMain(m *testing.M) {
	if os.Getenv("SOCKETS_TEST_LISTEN_AS_NOBODY") == "1" {
		ln, err := net.Listen("tcp4", "127.0.0.1:0")
		if err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		fmt.Println(ln.Addr().(*net.TCPAddr).Port)
		accepted := make(chan net.Conn, 16)
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				accepted <- c
			}
		}()
		lines := bufio.NewScanner(os.Stdin)
		for lines.Scan() {
			for len(accepted) > 0 {
				(<-accepted).Close()
			}
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// The owner the readers report is the owning process's user, not the reader's: a listener
// and its accepted connection opened by a child running as nobody (65534) show 65534. Needs
// root, to start that child.
func TestReadersReportAnotherUsersOwnership(t *testing.T) {
	if syscall.Getuid() != 0 {
		t.Skip("starting a child as another user needs root")
	}
	// The test binary's own directory is private to root: nobody runs a copy.
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	self, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "sockets.test")
	if err := os.WriteFile(bin, self, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-test.run=^$")
	cmd.Env = append(os.Environ(), "SOCKETS_TEST_LISTEN_AS_NOBODY=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Skipf("cannot start a child as nobody here: %v", err)
	}
	defer func() { stdin.Close(); _ = cmd.Wait() }()
	var port uint16
	if _, err := fmt.Fscan(stdout, &port); err != nil {
		t.Fatalf("the child said no port: %v", err)
	}
	c, err := loopback.Dialer(net.IPv4(127, 0, 0, 2), 2*time.Second).Dial("tcp4", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	client := ap(c.LocalAddr().String())
	// Once the owner closes the connection and the client acknowledges, the kernel keeps a
	// FIN_WAIT2 socket that both readers report owned by 0 with no inode: Owned keeps it as
	// the connection it was. Checked after the readers' ownership below.
	defer func() {
		if t.Failed() {
			return
		}
		owned := &Owned{UID: 65534}
		r := DiagReader{}
		socks, err := r.Read([]uint16{port})
		if err != nil {
			t.Skipf("inet_diag: %v", err)
		}
		owned.Keep(socks)
		if _, err := io.WriteString(stdin, "close\n"); err != nil {
			t.Fatal(err)
		}
		s, socks := await(t, r, port, func(s Socket) bool { return s.Remote == client && s.State == FinWait2 })
		if s.OwnerKnown() {
			t.Errorf("closed by its owner: %+v, owner known; want unknown (uid 0, no inode)", s)
		}
		if kept := owned.Keep(socks); !slices.ContainsFunc(kept, func(k Socket) bool { return k.Remote == client }) {
			t.Errorf("Owned dropped the owner's closed connection %+v", s)
		}
	}()
	for name, r := range readers(t) {
		t.Run(name, func(t *testing.T) {
			listeners, err := r.(ListenerReader).Listeners([]uint16{port})
			if err != nil {
				t.Fatal(err)
			}
			if len(listeners) != 1 || listeners[0].UID != 65534 {
				t.Errorf("listeners %+v, want one owned by 65534", listeners)
			}
			if s, _ := await(t, r, port, func(s Socket) bool { return s.Remote == client }); s.UID != 65534 {
				t.Errorf("accepted connection %+v, want owned by 65534", s)
			}
		})
	}
}

// await reads r until a socket on port matches, and returns it with its read; it fails the
// test after two seconds.
func await(t *testing.T, r Reader, port uint16, match func(Socket) bool) (Socket, []Socket) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for {
		socks, err := r.Read([]uint16{port})
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range socks {
			if match(s) {
				return s, socks
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no such socket on port %d in %+v", port, socks)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
