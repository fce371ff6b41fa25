package main

import (
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// `meshdrain hold` and `meshdrain prestop` as a pod runs them, on a short time scale: the two
// hooks start together, prestop reports over a channel of its own (never the default one,
// which other tests' prestops on this machine try), the app is a real listener on 127.0.0.1,
// and pilot-agent is a server that records its POST /drain.

var holdChannels atomic.Int64

func holdChannel() string {
	return fmt.Sprintf("@meshdrain-hold-test-%d-%d", os.Getpid(), holdChannels.Add(1))
}

// pilotAgent records when /drain was asked.
type pilotAgent struct {
	mu     sync.Mutex
	drains []time.Time
}

func (p *pilotAgent) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/drain" || r.Method != http.MethodPost {
		http.Error(w, "Method Not Allowed", http.StatusMethodNotAllowed)
		return
	}
	p.mu.Lock()
	p.drains = append(p.drains, time.Now())
	p.mu.Unlock()
	fmt.Fprint(w, "OK")
}

func (p *pilotAgent) calls() []time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]time.Time(nil), p.drains...)
}

func startPilotAgent(t *testing.T) (*pilotAgent, string) {
	agent := &pilotAgent{}
	srv := httptest.NewServer(agent)
	t.Cleanup(srv.Close)
	return agent, srv.URL + "/drain"
}

// appListener is the app: a listener on the loopback, owned by this test's user, which hold
// is told is not the proxy's (--proxy-uid).
// appListener listens on a port below the kernel's ephemeral range, as an app's declared
// containerPort is. A port from that range (127.0.0.1:0) can, once closed, come back as the
// local port of another test's client connection, which hold would take for the app's own.
func appListener(t *testing.T) (net.Listener, string) {
	t.Helper()
	low := 32768
	if raw, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if fields := strings.Fields(string(raw)); len(fields) == 2 {
			if n, err := strconv.Atoi(fields[0]); err == nil {
				low = n
			}
		}
	}
	for try := 0; try < 200; try++ {
		port := 20000 + rand.IntN(max(low-20000, 1000))
		if port >= low {
			continue
		}
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue
		}
		t.Cleanup(func() { ln.Close() })
		return ln, strconv.Itoa(port)
	}
	t.Fatalf("no free port below the ephemeral range (%d)", low)
	return nil, ""
}

// notOurs is a user that owns none of this test's sockets: the proxy's, for hold.
func notOurs() string { return strconv.Itoa(os.Getuid() + 1) }

const (
	holdGrace    = 6 * time.Second
	holdAppDrain = time.Second
	holdBound    = holdGrace - time.Second
)

func holdArgs(channel, port, drainURL string) []string {
	return []string{"hold", "--channel", channel, "--grace-period", holdGrace.String(), "--app-drain", holdAppDrain.String(),
		"--prestop-wait", "1s", "--port", port, "--outbound-port", "0", "--proxy-uid", notOurs(), "--drain-url", drainURL, "--poll", "50ms"}
}

type holdRun struct {
	res     runResult
	started time.Time
}

func startHold(args []string) <-chan holdRun {
	out := make(chan holdRun, 1)
	started := time.Now()
	go func() { out <- holdRun{res: runBinaryNoFatal(args, nil), started: started} }()
	return out
}

func holdFinal(t *testing.T, r runResult) map[string]any {
	t.Helper()
	if r.startErr != nil {
		t.Fatal(r.startErr)
	}
	if len(r.events) == 0 || r.events[len(r.events)-1]["msg"] != "hold finished" {
		t.Fatalf("the last event is not hold's final event; stderr:\n%s", r.stderr)
	}
	return r.events[len(r.events)-1]
}

// The whole path: prestop decides with the proxy's drain deferred (--drain-at end), the app
// then stops; hold asks pilot-agent to drain only after prestop has returned, and returns
// only after the app has let go, well before its bound.
func TestHoldWithPrestop(t *testing.T) {
	channel := holdChannel()
	agent, drainURL := startPilotAgent(t)
	app, port := appListener(t)
	admin, srv := quietAdmin(t, 500*time.Millisecond)
	holding := startHold(holdArgs(channel, port, drainURL))

	prestop := runBinary(t, nil, append(fastFlags(srv.URL), "--hold-channel", channel, "--drain-at", "end",
		"--grace-period", holdGrace.String(), "--app-drain", holdAppDrain.String())...)
	// The kubelet's SIGTERM to the app: it finishes its work and closes its listener. The
	// time is taken as the listener closes, not as planned: a busy machine may wake this
	// test late, and hold cannot see the app go before it does.
	time.Sleep(300 * time.Millisecond)
	appStopped := time.Now()
	app.Close()
	h := <-holding

	if prestop.code != 0 || prestop.final(t)["reason"] != "quiet" {
		t.Fatalf("prestop exit %d\n%s", prestop.code, prestop.stderr)
	}
	final := holdFinal(t, h.res)
	if h.res.code != 0 || final["reason"] != "released" || final["prestop"] != "done" || final["prestop_reason"] != "quiet" || final["drain_called"] != true {
		t.Errorf("hold exit %d, final %v", h.res.code, final)
	}
	// After prestop's end: prestop tells hold "done" only once it has written its final
	// event, so the event's own time is the bound, exact whatever the machine's load (when
	// this test saw the process exit is later by however long either waited for a CPU).
	drains := agent.calls()
	finalAt := eventTime(t, prestop.final(t))
	if len(drains) != 1 || drains[0].Before(finalAt) {
		t.Errorf("pilot-agent /drain at %v, prestop's final event at %v: want one call, after prestop's end", drains, finalAt)
	}
	if len(admin.drains) != 1 {
		t.Errorf("prestop's own drain calls %v, want one at its end", admin.drains)
	}
	// The upper bounds allow the time a busy machine kept hold off the CPU.
	if h.res.exited.Before(appStopped) || h.res.exited.After(appStopped.Add(2*time.Second+h.res.allowance())) {
		t.Errorf("hold returned %v after the app stopped (%v waiting for a CPU), want after it and promptly", h.res.exited.Sub(appStopped), h.res.runDelay)
	}
	if took := h.res.exited.Sub(h.started); took > holdBound+time.Second+h.res.allowance() {
		t.Errorf("hold took %v (%v waiting for a CPU), its bound is %v", took, h.res.runDelay, holdBound)
	}
}

// eventTime is when a log event was written: its "ts", epoch seconds on the machine's clock.
func eventTime(t *testing.T, event map[string]any) time.Time {
	t.Helper()
	ts, ok := event["ts"].(float64)
	if !ok || ts <= 0 {
		t.Fatalf("event %v has no epoch-seconds ts", event)
	}
	sec, frac := math.Modf(ts)
	return time.Unix(int64(sec), int64(frac*1e9))
}

// Fault: no prestop, and the app container is gone (nothing listens on its port): hold
// returns promptly after --prestop-wait, and drains.
func TestHoldWithoutPrestop(t *testing.T) {
	agent, drainURL := startPilotAgent(t)
	app, port := appListener(t)
	app.Close()
	// --app-drain 3s: the reads that show the port never had a listener must fit after
	// --prestop-wait (1 s) on a busy machine, before the app's drain (counted from hold's
	// start when no prestop reports) would end the hold anyway.
	h := <-startHold(append(holdArgs(holdChannel(), port, drainURL), "--app-drain", "3s"))
	final := holdFinal(t, h.res)
	if h.res.code != 0 || final["reason"] != "app-gone" || final["prestop"] != "absent" || len(agent.calls()) != 1 {
		t.Errorf("hold exit %d, drain calls %d, final %v", h.res.code, len(agent.calls()), final)
	}
	// Well before hold's bound (5 s), allowing the time a busy machine kept hold off the CPU.
	if took := h.res.exited.Sub(h.started); took < time.Second || took > 3*time.Second+h.res.allowance() {
		t.Errorf("hold took %v (%v waiting for a CPU), want --prestop-wait (1s) and a few reads", took, h.res.runDelay)
	}
}

// Fault: the app container dies mid-hook: prestop is killed with it (SIGKILL, no "done"),
// the app's listener is gone. hold sees the connection close and returns at once.
func TestHoldPrestopKilled(t *testing.T) {
	channel := holdChannel()
	agent, drainURL := startPilotAgent(t)
	app, port := appListener(t)
	srv := busyAdmin(t)
	logFile := filepath.Join(t.TempDir(), "hold.log")
	holding := startHold(append(holdArgs(channel, port, drainURL), "--log-file", logFile))

	cmd := exec.Command(binary, append(fastFlags(srv.URL), "--hold-channel", channel, "--grace-period", holdGrace.String(),
		"--app-drain", holdAppDrain.String())...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitForLog(t, logFile, "prestop reported")
	killed := time.Now()
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	app.Close()
	h := <-holding
	final := holdFinal(t, h.res)
	if h.res.code != 0 || final["reason"] != "released" || final["prestop"] != "gone" || len(agent.calls()) != 1 {
		t.Errorf("hold exit %d, drain calls %d, final %v", h.res.code, len(agent.calls()), final)
	}
	// Well before hold's bound (5 s from its start), allowing the time a busy machine kept
	// hold off the CPU.
	if late := h.res.exited.Sub(killed); late > 2*time.Second+h.res.allowance() {
		t.Errorf("hold returned %v after prestop was killed (%v waiting for a CPU), want promptly", late, h.res.runDelay)
	}
}

// waitForLog waits until hold has logged msg to its log file (a loaded machine may take a
// while to start both binaries).
func waitForLog(t *testing.T, path, msg string) {
	t.Helper()
	for limit := time.Now().Add(10 * time.Second); time.Now().Before(limit); time.Sleep(20 * time.Millisecond) {
		if raw, _ := os.ReadFile(path); strings.Contains(string(raw), `"msg":"`+msg+`"`) {
			return
		}
	}
	t.Fatalf("hold never logged %q", msg)
}

// Fault: the channel is taken (here by another hold): the second hold says so (exit 2) and
// still ends, on what the socket table shows.
func TestHoldChannelTaken(t *testing.T) {
	channel := holdChannel()
	ln, err := net.Listen("unix", channel)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, drainURL := startPilotAgent(t)
	app, port := appListener(t)
	app.Close()
	h := <-startHold(holdArgs(channel, port, drainURL))
	final := holdFinal(t, h.res)
	if h.res.code != 2 || final["reason"] != "app-gone" || final["channel_error"] == nil {
		t.Errorf("hold exit %d, final %v", h.res.code, final)
	}
}
