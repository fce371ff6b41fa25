package status

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshdrain/meshdrain/pkg/clock"
	"github.com/meshdrain/meshdrain/pkg/mesh"
	"github.com/meshdrain/meshdrain/pkg/mesh/envoy"
	dto "github.com/prometheus/client_model/go"
)

// scriptedAdmin answers each Inbound call with the next snapshot (or error) of its script,
// repeating the last one, so the watch loop and the rules can be tested without sockets.
type scriptedAdmin struct {
	mu       sync.Mutex
	state    string
	script   []scripted
	calls    int
	istio    bool
	infoErr  error
	selector []mesh.Selector
}

type scripted struct {
	snap mesh.Snapshot
	err  error
}

func (a *scriptedAdmin) ServerInfo(context.Context) (envoy.ServerInfo, error) {
	if a.infoErr != nil {
		return envoy.ServerInfo{}, a.infoErr
	}
	info := envoy.ServerInfo{State: a.state, Version: "test/1.31.0"}
	info.CommandLineOptions.DrainTime = "45s"
	return info, nil
}

func (a *scriptedAdmin) Inbound(_ context.Context, sel mesh.Selector) (mesh.Snapshot, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.selector = append(a.selector, sel)
	step := a.script[min(a.calls, len(a.script)-1)]
	a.calls++
	return step.snap, step.err
}

func (a *scriptedAdmin) Stats(context.Context, string) (map[string]*dto.MetricFamily, error) {
	if !a.istio {
		return map[string]*dto.MetricFamily{}, nil
	}
	v := 1.0
	return map[string]*dto.MetricFamily{"envoy_cluster_upstream_cx_active": {Metric: []*dto.Metric{{Gauge: &dto.Gauge{Value: &v}}}}}, nil
}

func f(v float64) *float64 { return &v }
func port(p int) *int      { return &p }

func httpSnapshot(total, active float64) mesh.Snapshot {
	return mesh.Snapshot{Naming: mesh.NamingIstio, Endpoints: []mesh.Endpoint{{
		Port: port(8080), Name: "inbound|8080||",
		HTTPRequestsTotal: f(total), HTTPRequestsActive: f(active), HTTPConnectionsActive: f(2),
	}}}
}

// jsonLines decodes every line of out as one JSON report.
func jsonLines(t *testing.T, out string) []map[string]any {
	t.Helper()
	var docs []map[string]any
	scanner := bufio.NewScanner(strings.NewReader(out))
	for scanner.Scan() {
		var doc map[string]any
		if err := json.Unmarshal(scanner.Bytes(), &doc); err != nil {
			t.Fatalf("line %q is not JSON: %v", scanner.Text(), err)
		}
		docs = append(docs, doc)
	}
	return docs
}

func firstInbound(t *testing.T, doc map[string]any) map[string]any {
	t.Helper()
	list, ok := doc["inbound"].([]any)
	if !ok || len(list) == 0 {
		t.Fatalf("no inbound endpoint in %v", doc)
	}
	return list[0].(map[string]any)
}

func TestWatchRateIsDeltaOverElapsed(t *testing.T) {
	admin := &scriptedAdmin{state: StateLive, script: []scripted{
		{snap: httpSnapshot(10, 1)}, {snap: httpSnapshot(15, 0)}, {snap: httpSnapshot(25, 0)},
	}}
	var out bytes.Buffer
	err := Run(context.Background(), Envoy(admin), &out, Options{
		AdminURL: "http://admin", Output: OutputJSON, Watch: true, Interval: 2 * time.Second,
		Samples: 3, Clock: clock.NewAutoFake(time.Unix(0, 0)),
	})
	if err != nil {
		t.Fatal(err)
	}
	docs := jsonLines(t, out.String())
	if len(docs) != 3 {
		t.Fatalf("want 3 samples, got %d:\n%s", len(docs), out.String())
	}
	want := []any{nil, 2.5, 5.0}
	for i, doc := range docs {
		if got := firstInbound(t, doc)["requests_rate"]; got != want[i] {
			t.Errorf("sample %d: requests_rate %v, want %v", i, got, want[i])
		}
	}
}

func TestWatchOnTerminalRedrawsInPlace(t *testing.T) {
	admin := &scriptedAdmin{state: StateLive, script: []scripted{{snap: httpSnapshot(10, 1)}, {snap: httpSnapshot(11, 0)}}}
	var out bytes.Buffer
	err := Run(context.Background(), Envoy(admin), &out, Options{
		AdminURL: "http://admin", Watch: true, Terminal: true, Interval: time.Second,
		Samples: 2, Clock: clock.NewAutoFake(time.Unix(0, 0)),
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(out.String(), clearScreen); n != 2 {
		t.Errorf("want 2 redraws, got %d:\n%s", n, out.String())
	}
	if !strings.Contains(out.String(), "1.0") || !strings.Contains(out.String(), "Ctrl-C") {
		t.Errorf("second frame lacks the rate 1.0/s or the Ctrl-C line:\n%s", out.String())
	}
}

func TestWatchWithoutTerminalPrintsOneLinePerSample(t *testing.T) {
	admin := &scriptedAdmin{state: StateLive, script: []scripted{
		{snap: httpSnapshot(10, 1)},
		{err: fmt.Errorf("GET /stats/prometheus: %w", envoy.ErrRefused)},
		{snap: httpSnapshot(12, 0)},
	}}
	var out bytes.Buffer
	err := Run(context.Background(), Envoy(admin), &out, Options{
		AdminURL: "http://admin", Watch: true, Interval: time.Second, Samples: 3,
		Clock: clock.NewAutoFake(time.Unix(0, 0)),
	})
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("want 3 lines, got:\n%s", out.String())
	}
	if !strings.Contains(lines[0], "port=8080") || !strings.Contains(lines[0], "requests=10 rate=-") {
		t.Errorf("first line: %s", lines[0])
	}
	if !strings.Contains(lines[1], "error: admin API at http://admin not reachable") {
		t.Errorf("second line should report the unreachable admin: %s", lines[1])
	}
	// After a gap the rate starts over: a rate across it would mix two sidecar lives.
	if !strings.Contains(lines[2], "requests=12 rate=-") {
		t.Errorf("third line: %s", lines[2])
	}
	if strings.Contains(out.String(), "\x1b") {
		t.Errorf("escape sequences in non-terminal output:\n%q", out.String())
	}
}

// cancelAfter cancels a context once n writes have happened: Ctrl-C in the middle of a watch.
type cancelAfter struct {
	w      io.Writer
	n      int
	cancel context.CancelFunc
}

func (c *cancelAfter) Write(p []byte) (int, error) {
	c.n--
	if c.n == 0 {
		c.cancel()
	}
	return c.w.Write(p)
}

func TestWatchEndsCleanlyOnInterrupt(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	admin := &scriptedAdmin{state: StateLive, script: []scripted{{snap: httpSnapshot(1, 0)}}}
	var out bytes.Buffer
	err := Run(ctx, Envoy(admin), &cancelAfter{w: &out, n: 4, cancel: cancel}, Options{
		AdminURL: "http://admin", Output: OutputJSON, Watch: true, Interval: time.Second,
		Clock: clock.NewAutoFake(time.Unix(0, 0)),
	})
	if err != nil {
		t.Fatalf("an interrupted watch is a normal end, got %v", err)
	}
	if n := len(jsonLines(t, out.String())); n != 4 {
		t.Errorf("want 4 samples before the interrupt, got %d", n)
	}
}

func TestRunUnreachableIsAnError(t *testing.T) {
	admin := &scriptedAdmin{infoErr: fmt.Errorf("GET /server_info: %w", envoy.ErrRefused), script: []scripted{{}}}
	err := Run(context.Background(), Envoy(admin), io.Discard, Options{AdminURL: "http://127.0.0.1:15000"})
	if !IsUnreachable(err) {
		t.Fatalf("want an UnreachableError, got %v", err)
	}
	for _, want := range []string{"admin API at http://127.0.0.1:15000 not reachable", "Envoy sidecar", "15000"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("message %q lacks %q", err, want)
		}
	}
}

func TestGatherAsksForCompletionsOnlyWithoutRequestStats(t *testing.T) {
	withRequests := &scriptedAdmin{state: StateLive, script: []scripted{{snap: httpSnapshot(1, 0)}}}
	if _, err := Gather(context.Background(), withRequests, "u", mesh.Selector{}, time.Time{}); err != nil {
		t.Fatal(err)
	}
	if len(withRequests.selector) != 1 || withRequests.selector[0].Completions {
		t.Errorf("request-level stats exist: want one call without completions, got %+v", withRequests.selector)
	}

	completions := mesh.Snapshot{Naming: mesh.NamingIstio, CompletedRequestsTotal: f(7)}
	without := &scriptedAdmin{state: StateLive, script: []scripted{{snap: mesh.Snapshot{Naming: mesh.NamingUnknown}}, {snap: completions}}}
	r, err := Gather(context.Background(), without, "u", mesh.Selector{}, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if len(without.selector) != 2 || !without.selector[1].Completions {
		t.Errorf("want a second call with completions, got %+v", without.selector)
	}
	if r.Signal != mesh.SignalCompletedRequests || r.Mesh != mesh.Istio {
		t.Errorf("signal %s mesh %s, want completed-requests on istio", r.Signal, r.Mesh)
	}
	if len(r.Hints) != 1 || !strings.Contains(r.Hints[0], envoy.MissingStatsHint) {
		t.Errorf("hints %q lack the annotation", r.Hints)
	}
}

func TestGatherFallsBackToServerStateGauge(t *testing.T) {
	snap := httpSnapshot(1, 0)
	snap.ServerState = f(1)
	admin := &scriptedAdmin{infoErr: &envoy.StatusError{Method: "GET", URL: "/server_info", Code: 404}, script: []scripted{{snap: snap}}}
	r, err := Gather(context.Background(), admin, "u", mesh.Selector{}, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if r.ServerState != StateDraining {
		t.Errorf("state %q, want DRAINING from the gauge", r.ServerState)
	}
	if !containsText(r.Hints, "DRAINING") || !containsText(r.Hints, "/server_info failed") {
		t.Errorf("hints %q", r.Hints)
	}
}

func TestTextShowsUnknownAsDash(t *testing.T) {
	r := Report{Admin: "http://a", ServerState: StateLive, Naming: mesh.NamingIstio, Signal: mesh.SignalClusterRequests,
		Inbound: []Port{{Port: port(8080), Name: "inbound|8080||", Signal: mesh.SignalClusterRequests, RequestsTotal: f(0), RequestsActive: f(0)}}}
	var out bytes.Buffer
	if err := WriteText(&out, r); err != nil {
		t.Fatal(err)
	}
	row := ""
	for _, line := range strings.Split(out.String(), "\n") {
		if strings.HasPrefix(line, "8080") {
			row = line
		}
	}
	if fields := strings.Fields(row); len(fields) != 10 || fields[3] != "0" || fields[4] != "-" || fields[6] != "-" ||
		fields[7] != "-" || fields[8] != "-" || fields[9] != "-" {
		t.Errorf("row %q: want requests 0, rate -, connections -, 5xx -, 5xx rate -, failures -", row)
	}
}

func TestMinSignalAccepts(t *testing.T) {
	cases := []struct {
		min  MinSignal
		sig  mesh.Signal
		want bool
	}{
		{MinRequests, mesh.SignalHTTPRequests, true},
		{MinRequests, mesh.SignalClusterRequests, true},
		{MinRequests, mesh.SignalCompletedRequests, false},
		{MinCompletions, mesh.SignalCompletedRequests, true},
		{MinCompletions, mesh.SignalConnections, false},
		{MinConnections, mesh.SignalConnections, true},
		{MinConnections, mesh.SignalNone, false},
	}
	for _, c := range cases {
		if got := c.min.accepts(c.sig); got != c.want {
			t.Errorf("%s accepts %s = %v, want %v", c.min, c.sig, got, c.want)
		}
	}
	if _, err := ParseMinSignal("bytes"); err == nil {
		t.Error("ParseMinSignal(bytes) should fail")
	}
}

func TestCheckTiming(t *testing.T) {
	live := func() *scriptedAdmin {
		return &scriptedAdmin{state: StateLive, istio: true, script: []scripted{{snap: httpSnapshot(1, 0)}}}
	}
	cases := []struct {
		name        string
		grace, app  time.Duration
		tdd         time.Duration
		ok          bool
		item, state string
		text        string
	}{
		{"short terminationDrainDuration", 30 * time.Second, 5 * time.Second, 5 * time.Second, false, "termination-drain-duration", Fail, `"terminationDrainDuration": "30s"`},
		{"long enough", 30 * time.Second, 5 * time.Second, 30 * time.Second, true, "termination-drain-duration", Pass, "outlives"},
		{"not given", 30 * time.Second, 5 * time.Second, 0, true, "termination-drain-duration", Warn, "cannot be read"},
		{"no time left", 5 * time.Second, 5 * time.Second, 0, false, "deadline", Fail, "leaves no time to wait"},
		{"drain_time too short", 60 * time.Second, 5 * time.Second, 60 * time.Second, true, "drain-time", Warn, `"drainDuration": "59s"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res := Evaluate(context.Background(), Envoy(live()), CheckOptions{AdminURL: "u", GracePeriod: c.grace, AppDrain: c.app, TerminationDrainDuration: c.tdd})
			if res.OK != c.ok {
				t.Errorf("ok = %v, want %v: %+v", res.OK, c.ok, res.Checks)
			}
			it, found := item(res, c.item)
			if !found || it.Status != c.state || !strings.Contains(it.Message+" "+it.Fix, c.text) {
				t.Errorf("item %s = %+v, want %s mentioning %q", c.item, it, c.state, c.text)
			}
		})
	}
}

func item(res CheckResult, name string) (Item, bool) {
	for _, it := range res.Checks {
		if it.Name == name {
			return it, true
		}
	}
	return Item{}, false
}

func containsText(list []string, text string) bool {
	for _, s := range list {
		if strings.Contains(s, text) {
			return true
		}
	}
	return false
}
