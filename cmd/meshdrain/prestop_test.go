package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshdrain/meshdrain/pkg/localhttp/localhttptest"
)

// These tests run the compiled binary, as the kubelet would, against an admin server that
// replays a scripted counter trace.

var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "meshdrain-bin")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "meshdrain")
	build := exec.Command("go", "build", "-o", binary, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// traceAdmin serves an Istio sidecar's inbound stats from a script of time since the first
// stats request, and records drain calls and when the served counter last changed.
type traceAdmin struct {
	mu         sync.Mutex
	start      time.Time
	script     func(since time.Duration) (total, active float64, ok bool)
	last       float64
	lastChange time.Time
	drains     []string
}

func (a *traceAdmin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	defer a.mu.Unlock()
	switch r.URL.Path {
	case "/drain_listeners":
		a.drains = append(a.drains, r.Method+" "+r.URL.RawQuery)
		fmt.Fprint(w, "OK\n")
	case "/stats/prometheus":
		now := time.Now()
		if a.start.IsZero() {
			a.start, a.lastChange = now, now
		}
		total, active, ok := a.script(now.Sub(a.start))
		if !ok {
			fmt.Fprint(w, "# TYPE envoy_server_state gauge\nenvoy_server_state{} 0\n")
			return
		}
		if total != a.last {
			a.last, a.lastChange = total, now
		}
		fmt.Fprintf(w, "# TYPE envoy_http_downstream_rq_total counter\n"+
			"envoy_http_downstream_rq_total{http_conn_manager_prefix=\"inbound_0.0.0.0_8080\"} %g\n"+
			"# TYPE envoy_http_downstream_rq_active gauge\n"+
			"envoy_http_downstream_rq_active{http_conn_manager_prefix=\"inbound_0.0.0.0_8080\"} %g\n", total, active)
	default:
		http.NotFound(w, r)
	}
}

func (a *traceAdmin) lastChangeAt() time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.lastChange
}

type runResult struct {
	code   int
	exited time.Time
	// runDelay is how long the hook's threads waited, ready to run, for a CPU: what a busy
	// machine adds to its timing (see the fault matrix).
	runDelay time.Duration
	events   []map[string]any
	stderr   string
	startErr error
}

func runBinary(t *testing.T, env []string, args ...string) runResult {
	t.Helper()
	res := runBinaryNoFatal(args, env)
	if res.startErr != nil {
		t.Fatal(res.startErr)
	}
	return res
}

// runBinaryNoFatal runs the binary and reports a failure to start in the result, so that it
// can be called from other goroutines than the test's.
func runBinaryNoFatal(args, env []string) runResult { return runBinaryWatching(args, env, nil) }

// runBinaryWatching is runBinaryNoFatal with onLog seeing each line the binary writes to
// stderr as it writes it: faults armed by the hook's own progress (see faultSetup.onLog).
func runBinaryWatching(args, env []string, onLog func(line string)) runResult {
	cmd := exec.Command(binary, args...)
	cmd.Env = append(os.Environ(), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if onLog != nil {
		cmd.Stderr = io.MultiWriter(&stderr, &lineWriter{line: onLog})
	}
	if err := cmd.Start(); err != nil {
		return runResult{startErr: err}
	}
	sampled := make(chan processSample, 1)
	go func() { sampled <- sampleProcess(cmd.Process.Pid) }()
	err := cmd.Wait()
	res := runResult{exited: time.Now(), stderr: stderr.String(), runDelay: (<-sampled).runDelay}
	var exitErr *exec.ExitError
	switch {
	case errors.As(err, &exitErr):
		res.code = exitErr.ExitCode()
	case err != nil:
		res.startErr = err
	}
	res.events = parseEvents(res.stderr)
	return res
}

func parseEvents(stderr string) []map[string]any {
	var events []map[string]any
	scanner := bufio.NewScanner(strings.NewReader(stderr))
	scanner.Buffer(make([]byte, 64*1024), 4<<20)
	for scanner.Scan() {
		var event map[string]any
		if json.Unmarshal(scanner.Bytes(), &event) == nil {
			events = append(events, event)
		}
	}
	return events
}

// allowance is what an upper bound on r's wall time allows beyond its figure: the time the
// hook's threads waited for a CPU, which a busy machine adds to any timing (none with
// MESHDRAIN_STRICT_TIMING=1, where the figures themselves are the assertion).
func (r runResult) allowance() time.Duration {
	if strictTiming() {
		return 0
	}
	return r.runDelay
}

func (r runResult) final(t *testing.T) map[string]any {
	t.Helper()
	if len(r.events) == 0 {
		t.Fatalf("no JSON log events; stderr:\n%s", r.stderr)
	}
	last := r.events[len(r.events)-1]
	if last["msg"] != "drain finished" {
		t.Fatalf("last event is %v, want drain finished", last)
	}
	for _, key := range []string{"level", "ts", "reason", "elapsed_ms", "signal", "requests_after_drain", "active_at_end"} {
		if _, ok := last[key]; !ok {
			t.Errorf("final event lacks %q: %v", key, last)
		}
	}
	return last
}

const (
	poll  = 50 * time.Millisecond
	quiet = 400 * time.Millisecond
)

// fastFlags keep every wait short; the 5s default --min-wait would dominate these traces.
func fastFlags(admin string) []string {
	return []string{"prestop", "--admin", admin, "--poll", poll.String(), "--quiet", quiet.String(), "--connect-timeout", "500ms", "--min-wait", "0"}
}

func TestPrestopExitsSoonAfterTrafficStops(t *testing.T) {
	admin := &traceAdmin{script: func(since time.Duration) (float64, float64, bool) {
		if since > 700*time.Millisecond {
			since = 700 * time.Millisecond
		}
		return 100 + float64(since/time.Millisecond), 0, true // ~1 request per ms, then none
	}}
	srv := httptest.NewServer(admin)
	defer srv.Close()

	res := runBinary(t, nil, fastFlags(srv.URL)...)
	if res.code != 0 {
		t.Fatalf("exit %d\n%s", res.code, res.stderr)
	}
	final := res.final(t)
	if final["reason"] != "quiet" || final["signal"] != "http-requests" || final["active_at_end"] != 0.0 {
		t.Errorf("final event %v", final)
	}
	if n, _ := final["requests_after_drain"].(float64); n < 500 || n > 700 {
		t.Errorf("requests_after_drain = %v, want the ~600 that arrived after the drain call", final["requests_after_drain"])
	}
	if len(admin.drains) != 1 || admin.drains[0] != "POST inboundonly&graceful" {
		t.Errorf("drain calls = %v, want one POST ?inboundonly&graceful", admin.drains)
	}
	// The upper bound allows the time a busy machine kept the hook off the CPU.
	late, allow := res.exited.Sub(admin.lastChangeAt()), res.allowance()
	if late < quiet || late > quiet+2*poll+allow {
		t.Errorf("exited %v after the last counter change, want within [quiet, quiet+2 polls + %v waited for a CPU] = [%v, %v]", late, allow, quiet, quiet+2*poll+allow)
	}
}

func TestPrestopDeadline(t *testing.T) {
	admin := &traceAdmin{script: func(since time.Duration) (float64, float64, bool) {
		return float64(since / time.Millisecond), 1, true
	}}
	srv := httptest.NewServer(admin)
	defer srv.Close()
	start := time.Now()
	res := runBinary(t, nil, append(fastFlags(srv.URL), "--deadline", "800ms", "--drain-mode", "immediate")...)
	if res.code != 3 || res.final(t)["reason"] != "deadline" {
		t.Fatalf("exit %d, final %v", res.code, res.final(t))
	}
	// Traffic never stops here: without its deadline the hook would run on. The upper bound
	// allows the time a busy machine kept it off the CPU.
	if d := res.exited.Sub(start); d < 800*time.Millisecond || d > 800*time.Millisecond+time.Second+res.allowance() {
		t.Errorf("took %v for an 800ms deadline (%v of it waiting for a CPU)", d, res.runDelay)
	}
	if len(admin.drains) != 1 || admin.drains[0] != "POST inboundonly" {
		t.Errorf("drain calls = %v", admin.drains)
	}
}

func TestPrestopNoSignalNamesTheAnnotation(t *testing.T) {
	srv := httptest.NewServer(&traceAdmin{script: func(time.Duration) (float64, float64, bool) { return 0, 0, false }})
	defer srv.Close()
	res := runBinary(t, nil, append(fastFlags(srv.URL), "--fallback-wait", "200ms")...)
	if res.code != 4 || res.final(t)["reason"] != "no-signal" {
		t.Fatalf("exit %d\n%s", res.code, res.stderr)
	}
	if !strings.Contains(res.stderr, "sidecar.istio.io/statsInclusionPrefixes") {
		t.Error("no-signal log does not name the annotation")
	}
}

// Envoy killed under live traffic (the user's incident): the app is still signalled at once
// (Envoy is gone), but the outcome is sidecar-gone-busy, exit 5, not a success.
func TestPrestopSidecarGoneSignalsTheApp(t *testing.T) {
	admin := &traceAdmin{script: func(since time.Duration) (float64, float64, bool) {
		return float64(since / time.Millisecond), 0, true
	}}
	// pilot-agent kills Envoy at the hook's 8th read (0.4 s on an idle machine).
	srv := goneAtPoll(t, admin, nth(8))
	app := exec.Command("sleep", "30")
	if err := app.Start(); err != nil {
		t.Fatal(err)
	}
	appDone := make(chan error, 1)
	go func() { appDone <- app.Wait() }()

	res := runBinary(t, []string{"MESHDRAIN_SIGNAL=TERM"}, append(fastFlags(srv.URL), "--pid", fmt.Sprint(app.Process.Pid))...)
	if res.code != 5 || res.final(t)["reason"] != "sidecar-gone-busy" {
		t.Fatalf("exit %d\n%s", res.code, res.stderr)
	}
	// The variable acted, and the log says so.
	if !strings.Contains(res.stderr, `"signal":{"value":"TERM","from":"env MESHDRAIN_SIGNAL"}`) {
		t.Error("the drain started event does not trace MESHDRAIN_SIGNAL")
	}
	select {
	case err := <-appDone:
		if err == nil || !strings.Contains(err.Error(), "terminated") {
			t.Errorf("app ended with %v, want terminated by SIGTERM", err)
		}
	case <-time.After(5 * time.Second):
		app.Process.Kill()
		t.Fatal("the app was not signalled")
	}
}

func TestPrestopNoSidecar(t *testing.T) {
	res := runBinary(t, nil, fastFlags(localhttptest.RefusingURL(t))...)
	if res.code != 0 || res.final(t)["reason"] != "no-sidecar" {
		t.Fatalf("exit %d\n%s", res.code, res.stderr)
	}
}

// Bad flags and variables no longer end the hook at once (the app would get SIGTERM
// immediately): each is logged, the app is held for the fallback wait, and the exit is 2
// with a final line.
func TestPrestopBadFlags(t *testing.T) {
	const hold = 300 * time.Millisecond
	cases := [][]string{
		{"prestop", "--drain-mode", "soft"},
		{"prestop", "--grace-period", "3s", "--app-drain", "1s", "--quiet", "5s"}, // the hold is capped by the deadline (1s), above 300ms
		{"prestop", "--signal", "TERM"},
		{"prestop", "--pid", "1"},
		{"prestop", "--signal", "BOGUS", "--pid", "1"},
		{"prestop", "--port", "70000"},
		{"prestop", "--port", "8080", "--cluster", "local_app"},
		{"prestop", "--log-format", "xml"},
		{"prestop", "--nope"},
		{"prestop", "extra"},
		{"prestop", "--mesh", "consul"},
		{"prestop", "--mesh", "linkerd", "--cluster", "local_app"},
		{"prestop", "--mesh", "linkerd", "--port", "4191"},
		{"prestop", "--mesh", "linkerd", "--admin", "http://10.0.0.1:4191"},
	}
	results := make([]runResult, len(cases))
	took := make([]time.Duration, len(cases))
	var wg sync.WaitGroup
	for i, args := range cases {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			results[i] = runBinaryNoFatal(args, []string{"MESHDRAIN_FALLBACK_WAIT=" + hold.String()})
			took[i] = results[i].exited.Sub(start)
		}()
	}
	wg.Wait()
	for i, args := range cases {
		res := results[i]
		final := res.final(t)
		if res.code != 2 || final["reason"] != "config-error" || final["exit_code"] != 2.0 {
			t.Errorf("%v: exit %d, final %v", args, res.code, final)
		}
		// Fourteen hooks start at once: each may wait for a CPU, and the bound allows it.
		if took[i] < hold || took[i] > hold+time.Second+res.allowance() {
			t.Errorf("%v: took %v, want the %v hold (%v of it waiting for a CPU)", args, took[i], hold, res.runDelay)
		}
		if errs, _ := final["errors"].([]any); len(errs) == 0 {
			t.Errorf("%v: final line names no error", args)
		}
	}
	if res := runBinary(t, []string{"MESHDRAIN_POLL=fast", "MESHDRAIN_FALLBACK_WAIT=0s"}, "prestop"); res.code != 2 || res.final(t)["reason"] != "config-error" {
		t.Errorf("bad env value: exit %d", res.code)
	}
}

func TestPrestopInterrupted(t *testing.T) {
	srv := httptest.NewServer(&traceAdmin{script: func(since time.Duration) (float64, float64, bool) {
		return float64(since / time.Millisecond), 0, true
	}})
	defer srv.Close()
	cmd := exec.Command(binary, fastFlags(srv.URL)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	cmd.Process.Signal(os.Interrupt)
	err := cmd.Wait()
	var exitErr *exec.ExitError
	if !errors.As(err, &exitErr) || exitErr.ExitCode() != 130 || !strings.Contains(stderr.String(), `"reason":"interrupted"`) {
		t.Errorf("err %v\n%s", err, stderr.String())
	}
}

func TestPrestopExecAction(t *testing.T) {
	srv := httptest.NewServer(&traceAdmin{script: func(time.Duration) (float64, float64, bool) { return 5, 0, true }})
	defer srv.Close()
	marker := filepath.Join(t.TempDir(), "stopped")

	// The program runs with the arguments after --, no shell involved.
	res := runBinary(t, nil, append(fastFlags(srv.URL), "--exec", "/bin/sh", "--", "-c", "echo drained > "+marker)...)
	if res.code != 0 {
		t.Fatalf("exit %d\n%s", res.code, res.stderr)
	}
	if got, err := os.ReadFile(marker); err != nil || string(got) != "drained\n" {
		t.Errorf("exec action wrote %q (%v)", got, err)
	}

	// A failing action: exit 1, and the final event says so too.
	res = runBinary(t, nil, append(fastFlags(srv.URL), "--exec", "/bin/false")...)
	final := res.final(t)
	if res.code != 1 || final["exit_code"] != 1.0 || final["action_error"] == nil {
		t.Errorf("exit %d, final event %v", res.code, final)
	}
}

// --validate checks everything and answers at once: 0 with a summary, 2 with every problem
// (an unknown variable included), never a wait.
func TestPrestopValidate(t *testing.T) {
	app := exec.Command("sleep", "30")
	if err := app.Start(); err != nil {
		t.Fatal(err)
	}
	defer app.Process.Kill()
	cmd := exec.Command(binary, "prestop", "--validate", "--signal", "TERM", "--pid", fmt.Sprint(app.Process.Pid))
	cmd.Env = append(withoutMeshdrainEnv(), "MESHDRAIN_QUIET=2s")
	out, err := cmd.Output()
	if err != nil || !strings.Contains(string(out), "prestop configuration ok") || !strings.Contains(string(out), "(env MESHDRAIN_QUIET)") {
		t.Errorf("valid configuration: %v\n%s", err, out)
	}
	start := time.Now()
	res := runBinary(t, []string{"MESHDRAIN_GRACEPERIOD=45s"}, "prestop", "--validate", "--exec", "/nonexistent", "--admin", "http://10.0.0.1:15000",
		"--log-file", "/nonexistent/dir/log")
	for _, want := range []string{"MESHDRAIN_GRACEPERIOD", "--exec", "not a loopback", "--log-file"} {
		if !strings.Contains(res.stderr, want) {
			t.Errorf("--validate output lacks %q:\n%s", want, res.stderr)
		}
	}
	// "At once" is well before the fallback wait (5 s) a hook with these problems would hold
	// the app for, allowing the time a busy machine kept it off the CPU.
	if res.code != 2 || res.exited.Sub(start) > 2*time.Second+res.allowance() {
		t.Errorf("exit %d after %v (%v of it waiting for a CPU): want 2 at once", res.code, res.exited.Sub(start), res.runDelay)
	}
}

// With --log-file, the log goes to the file, and the kubelet's view (stderr, which a failed
// hook's event carries) still gets every error and the final event, nothing else.
func TestPrestopLogFileAlsoWritesTheFinalEventToStderr(t *testing.T) {
	srv := httptest.NewServer(&traceAdmin{script: func(time.Duration) (float64, float64, bool) { return 5, 0, true }})
	defer srv.Close()
	logFile := filepath.Join(t.TempDir(), "meshdrain.log")
	res := runBinary(t, nil, append(fastFlags(srv.URL), "--log-file", logFile, "--exec", "/bin/false")...)
	if res.code != 1 {
		t.Fatalf("exit %d\n%s", res.code, res.stderr)
	}
	final := res.final(t)
	if final["reason"] != "quiet" || final["action_error"] == nil {
		t.Errorf("stderr's final event %v", final)
	}
	for _, e := range res.events {
		if e["level"] != "error" && e["msg"] != "drain finished" {
			t.Errorf("stderr got %v: only errors and the final event belong there", e["msg"])
		}
	}
	raw, err := os.ReadFile(logFile)
	if err != nil {
		t.Fatal(err)
	}
	fileEvents := parseEvents(string(raw))
	if len(fileEvents) <= len(res.events) || fileEvents[len(fileEvents)-1]["msg"] != "drain finished" {
		t.Errorf("the log file has %d events, stderr %d", len(fileEvents), len(res.events))
	}
}
