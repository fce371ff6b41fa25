package hold

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meshdrain/meshdrain/pkg/clock"
)

// The channel on real unix sockets: what prestop's Reporter writes, hold's Listener reads.
// Every test has its own abstract name, so that tests (and meshdrain binaries other tests
// run on this machine) never meet.

var channels atomic.Int64

func testChannel(t *testing.T) string {
	return fmt.Sprintf("@meshdrain-test-%d-%d", os.Getpid(), channels.Add(1))
}

// collect takes events until n have come, within a generous real-time bound (a loaded
// machine); nothing here waits for time to pass, only for delivery.
func collect(t *testing.T, l *Listener, n int) []Event {
	t.Helper()
	var events []Event
	limit := time.NewTimer(10 * time.Second)
	defer limit.Stop()
	for len(events) < n {
		events = append(events, l.Take()...)
		if len(events) >= n {
			break
		}
		select {
		case <-l.Wake():
		case <-limit.C:
			t.Fatalf("got %d events, want %d: %+v", len(events), n, events)
		}
	}
	return events
}

func listen(t *testing.T, addr string) *Listener {
	t.Helper()
	l, err := Listen(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func TestReporterToListener(t *testing.T) {
	addr := testChannel(t)
	l := listen(t, addr)
	clk := clock.Real{}
	r := StartReporting(addr, clk.Now().Add(46*time.Second), 10*time.Millisecond, clk)
	events := collect(t, l, 1)
	rep := events[0].Report
	if rep == nil || rep.State != StateRunning || rep.PID != os.Getpid() || *rep.DeadlineInMs > 46000 || *rep.DeadlineInMs < 40000 {
		t.Fatalf("first event %+v: want running with about 46 s left", events[0])
	}
	if !r.Done("quiet", 0) {
		t.Fatal("Done was not delivered")
	}
	events = collect(t, l, 2)
	if d := events[0].Report; d == nil || d.State != StateDone || d.Reason != "quiet" || *d.ExitCode != 0 {
		t.Errorf("second event %+v: want done quiet 0", events[0])
	}
	if !events[1].Closed || events[1].Err != nil || events[1].Session != events[0].Session {
		t.Errorf("third event %+v: want a clean close of the same session", events[1])
	}
	if r.Done("again", 1) {
		t.Error("a second Done reported again")
	}
}

// prestop may start before hold: it keeps trying until hold listens.
func TestReporterStartsBeforeTheHold(t *testing.T) {
	addr := testChannel(t)
	clk := clock.Real{}
	r := StartReporting(addr, clk.Now().Add(time.Minute), 5*time.Millisecond, clk)
	time.Sleep(30 * time.Millisecond) // a few refused attempts
	l := listen(t, addr)
	if e := collect(t, l, 1)[0]; e.Report == nil || e.Report.State != StateRunning {
		t.Fatalf("event %+v: want running", e)
	}
	r.Done("quiet", 0)
}

// A hold that starts only as prestop ends still hears "done": Done connects once more when
// the background attempts never reached it (here: a loop that ended without connecting).
func TestReporterDoneReachesAHoldStartedLate(t *testing.T) {
	addr := testChannel(t)
	r := &Reporter{addr: addr, clock: clock.Real{}, pid: 7, stop: make(chan struct{}), loopDone: make(chan struct{})}
	close(r.loopDone)
	l := listen(t, addr)
	if !r.Done("deadline", 3) {
		t.Fatal("Done was not delivered")
	}
	events := collect(t, l, 2)
	if events[0].Report == nil || events[0].Report.State != StateDone || *events[0].Report.ExitCode != 3 || !events[1].Closed {
		t.Errorf("events %+v: want done, then a close", events)
	}
}

// Fault: no hold (the opt-out, or a channel prestop cannot reach): prestop loses nothing.
func TestReporterWithoutAHold(t *testing.T) {
	clk := clock.Real{}
	r := StartReporting(testChannel(t), clk.Now().Add(time.Minute), 5*time.Millisecond, clk)
	start := time.Now()
	if r.Done("quiet", 0) {
		t.Error("delivered to nobody")
	}
	// A guard, not a figure a busy machine could break: Done without a hold dials once and
	// fails at once; only one that waited for the reporter's deadline (a minute) or for its
	// retry loop (which never ends on its own) would take longer.
	if took := time.Since(start); took > 20*time.Second {
		t.Errorf("Done took %v without a hold", took)
	}
	var none *Reporter
	if none.Done("quiet", 0) || StartReporting("", time.Time{}, time.Second, clk) != nil {
		t.Error("an empty channel must report nothing")
	}
}

// Fault: prestop killed with its container: the kernel closes its end, hold sees a close
// without "done".
func TestListenerSeesAKilledPrestop(t *testing.T) {
	addr := testChannel(t)
	l := listen(t, addr)
	conn, err := net.Dial("unix", addr)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(conn, `{"v":1,"state":"running","pid":9,"deadline_in_ms":1000}`)
	conn.Close()
	events := collect(t, l, 2)
	if events[0].Report == nil || !events[1].Closed || events[1].Err != nil {
		t.Errorf("events %+v: want running, then a clean close", events)
	}
}

// Anything but a report ends its session with the reason; the channel goes on.
func TestListenerDropsWhatIsNotAReport(t *testing.T) {
	for _, tc := range []struct {
		send, want string
		reports    int
	}{
		{"GET / HTTP/1.1\n", "not a report", 0},
		{`{"v":2,"state":"running","deadline_in_ms":1}` + "\n", "protocol version 2", 0},
		{`{"v":1,"state":"running"}` + "\n", "without a deadline_in_ms", 0},
		{`{"v":1,"state":"paused"}` + "\n", `state "paused"`, 0},
		{strings.Repeat("x", 2*maxLine), "longer than", 0},
		{strings.Repeat(`{"v":1,"state":"done"}`+"\n", maxReportsPerSession+1), "more than", maxReportsPerSession},
	} {
		addr := testChannel(t)
		l := listen(t, addr)
		conn, err := net.Dial("unix", addr)
		if err != nil {
			t.Fatal(err)
		}
		conn.Write([]byte(tc.send))
		var last Event
		for _, e := range collect(t, l, tc.reports+1) {
			last = e
		}
		if !last.Closed || last.Err == nil || !strings.Contains(last.Err.Error(), tc.want) {
			t.Errorf("%.40q: last event %+v, want a close saying %q", tc.send, last, tc.want)
		}
		conn.Close()
	}
}

// Fault: the channel cannot be opened (another hold has it): Listen says so.
func TestListenTwice(t *testing.T) {
	addr := testChannel(t)
	listen(t, addr)
	if _, err := Listen(addr); err == nil || !strings.Contains(err.Error(), "address already in use") {
		t.Errorf("second Listen: %v", err)
	}
}

// A socket file is connectable by the app's user, and is gone once hold ends.
func TestListenOnASocketFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "hold.sock")
	l, err := Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	info, err := os.Stat(path)
	if err != nil || info.Mode().Perm() != 0o666 {
		t.Fatalf("socket file %v %v: want mode 0666", info.Mode(), err)
	}
	l.Close()
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("socket file left behind: %v", err)
	}
}

// At most maxSessions connections are kept; more are closed at once.
func TestListenerBoundsItsSessions(t *testing.T) {
	addr := testChannel(t)
	l := listen(t, addr)
	var conns []net.Conn
	for range maxSessions + 3 {
		conn, err := net.Dial("unix", addr)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, conn)
	}
	// Connections are accepted in the order they were made: the last three are the extra ones.
	for i, conn := range conns {
		wait := 2 * time.Second
		if i < maxSessions {
			wait = 20 * time.Millisecond
		}
		conn.SetReadDeadline(time.Now().Add(wait))
		_, err := conn.Read(make([]byte, 1))
		if closedByListener := err != nil && !os.IsTimeout(err); closedByListener != (i >= maxSessions) {
			t.Errorf("connection %d: read %v", i, err)
		}
		conn.Close()
	}
	_ = l
}

func TestCheckChannel(t *testing.T) {
	for addr, ok := range map[string]bool{
		DefaultChannel:                           true,
		"/meshdrain-run/hold.sock":               true,
		"":                                       false,
		"@":                                      false,
		"meshdrain-hold":                         false,
		"127.0.0.1:15019":                        false,
		"@" + strings.Repeat("x", maxSocketPath): false,
	} {
		if err := CheckChannel(addr); (err == nil) != ok {
			t.Errorf("CheckChannel(%.20q) = %v, want ok %v", addr, err, ok)
		}
	}
}

func TestPodPorts(t *testing.T) {
	ports, err := PodPorts(`[
{"name":"http","containerPort":8080,"protocol":"TCP"},{"containerPort":9090},{"name":"dns","containerPort":53,"protocol":"UDP"},{"containerPort":8080}]`)
	if err != nil || fmt.Sprint(ports) != "[8080 9090]" {
		t.Errorf("ports %v %v, want [8080 9090]", ports, err)
	}
	if ports, err := PodPorts(""); ports != nil || err != nil {
		t.Errorf("empty: %v %v", ports, err)
	}
	for _, bad := range []string{"[", `[{"containerPort":70000}]`, `{"containerPort":80}`} {
		if _, err := PodPorts(bad); err == nil || !strings.Contains(err.Error(), PodPortsVariable) {
			t.Errorf("%s: %v, want an error naming %s", bad, err, PodPortsVariable)
		}
	}
}
