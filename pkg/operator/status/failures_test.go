package status

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshdrain/meshdrain/pkg/clock"
	"github.com/meshdrain/meshdrain/pkg/localhttp/localhttptest"
	"github.com/meshdrain/meshdrain/pkg/mesh"
	"github.com/meshdrain/meshdrain/pkg/mesh/envoy"
	"github.com/meshdrain/meshdrain/pkg/mesh/linkerd"
	"github.com/meshdrain/meshdrain/pkg/sim/envoysim"
	"github.com/meshdrain/meshdrain/pkg/sim/linkerdsim"
)

// deadAppAddr is a loopback address nothing listens on: an app that is not up.
func deadAppAddr(t *testing.T) string {
	t.Helper()
	return localhttptest.RefusingAddr(t)
}

// startEmulatedDown starts an emulated sidecar whose app on 8080 is not listening.
func startEmulatedDown(t *testing.T, cfg envoysim.Config) emulated {
	t.Helper()
	cfg.Inbound = []envoysim.InboundPort{{Port: 8080, AppAddr: deadAppAddr(t)}}
	cfg.DrainTime, cfg.TerminationDrainDuration = time.Hour, time.Hour
	sim, err := envoysim.Start(cfg)
	if err != nil {
		t.Fatalf("envoysim.Start: %v", err)
	}
	t.Cleanup(func() { _ = sim.Close() })
	client, err := envoy.New(sim.AdminURL(), envoy.Options{RequestTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return emulated{sim: sim, client: client}
}

// sendFailing makes n requests through port 8080, each of which must get want, and waits
// until the sidecar has finished counting them (its access log is written last).
func (e emulated) sendFailing(t *testing.T, n, want int) {
	t.Helper()
	before := len(e.sim.AccessLog())
	client := &http.Client{Timeout: 5 * time.Second}
	for i := 0; i < n; i++ {
		resp, err := client.Get("http://" + e.sim.InboundAddr(8080) + "/")
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Fatalf("request %d: status %d, want %d", i, resp.StatusCode, want)
		}
	}
	waitFor(t, "the sidecar to count the requests", func() bool { return len(e.sim.AccessLog()) == before+n })
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// hookClock is a fake clock that runs hook whenever a wait starts, then ends the wait at
// once, a second later in fake time: what happens "during" a wait is what hook does.
type hookClock struct {
	*clock.Fake
	mu    sync.Mutex
	hook  func()
	waits int
}

func newHookClock(hook func()) *hookClock {
	return &hookClock{Fake: clock.NewAutoFake(time.Unix(1000, 0)), hook: hook}
}

func (c *hookClock) NewTimer(d time.Duration) clock.Timer {
	c.mu.Lock()
	c.waits++
	c.mu.Unlock()
	if c.hook != nil {
		c.hook()
	}
	return c.Fake.NewTimer(d)
}

func (c *hookClock) waited() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.waits
}

func failuresOf(t *testing.T, in map[string]any) map[string]any {
	t.Helper()
	f, ok := in["failures"].(map[string]any)
	if !ok {
		t.Fatalf("no failures in %v", in)
	}
	return f
}

// The issue: with the app not listening, every request through the sidecar was 503 UF while
// status showed healthy counts. Now status -o json shows the 5xx count rising, with UF, in every
// naming.
func TestStatusShowsTheSidecars5xxRisingWithUF(t *testing.T) {
	cases := []struct {
		profile envoysim.Profile
		sel     mesh.Selector
		// requests is the arrivals the drain reads after three failed requests: the inbound
		// cluster counts a request only once it is on a connection to the app
		// (conn_pool_base.cc attachStreamToClient), so a cluster-only reading sees none.
		requests float64
	}{
		{envoysim.ProfileIstio, mesh.Selector{}, 3},
		{envoysim.ProfileIstioLegacy, mesh.Selector{Ports: []int{8080}}, 3},
		{envoysim.ProfileIstio116, mesh.Selector{}, 3},
		{envoysim.ProfileEnvoy, mesh.Selector{Clusters: []string{"service_a"}, HTTPPrefixes: []string{"ingress_http"}}, 3},
		{envoysim.ProfileEnvoy, mesh.Selector{Clusters: []string{"service_a"}}, 0}, // the cluster's 5xx
	}
	for _, c := range cases {
		t.Run(string(c.profile), func(t *testing.T) {
			e := startEmulatedDown(t, envoysim.Config{Profile: c.profile})
			e.sendFailing(t, 3, http.StatusServiceUnavailable)
			in := firstInbound(t, e.statusJSON(t, c.sel))
			if in["server_errors_total"] != 3.0 {
				t.Errorf("server_errors_total = %v after three 503 UF, want 3 (%v)", in["server_errors_total"], in)
			}
			failures := failuresOf(t, in)
			if failures["UF"] != 3.0 || failures["UC"] != 0.0 || failures["UT"] != 0.0 || failures["UR"] != 0.0 {
				t.Errorf("failures = %v, want UF 3 and the other flags 0", failures)
			}
			// The drain's own reading is untouched.
			if in["requests_total"] != c.requests {
				t.Errorf("requests_total = %v, want %v", in["requests_total"], c.requests)
			}

			e.sendFailing(t, 2, http.StatusServiceUnavailable)
			doc := e.statusJSON(t, c.sel)
			in = firstInbound(t, doc)
			if in["server_errors_total"] != 5.0 || failuresOf(t, in)["UF"] != 5.0 {
				t.Errorf("after two more: server_errors_total %v, failures %v, want 5 and UF 5", in["server_errors_total"], in["failures"])
			}
			if h := hintsOf(doc); !strings.Contains(h, "UF 5") || !strings.Contains(h, "could not connect to the app") {
				t.Errorf("hints do not explain the UF: %q", h)
			}
		})
	}
}

// With Istio's default stats only istio_requests_total is visible: its 5xx series carry the flag.
func TestStatusShowsCompleted5xxUnderIstioDefaultStats(t *testing.T) {
	e := startEmulatedDown(t, envoysim.Config{Profile: envoysim.ProfileIstio, Inclusion: envoysim.InclusionIstioDefault})
	e.sendFailing(t, 4, http.StatusServiceUnavailable)
	doc := e.statusJSON(t, mesh.Selector{})
	flags, ok := doc["completed_server_errors"].(map[string]any)
	if !ok || flags["UF"] != 4.0 || doc["completed_server_errors_total"] != 4.0 {
		t.Errorf("completed_server_errors %v total %v, want UF 4", doc["completed_server_errors"], doc["completed_server_errors_total"])
	}
	var text bytes.Buffer
	if err := Run(context.Background(), Envoy(e.client), &text, Options{AdminURL: e.sim.AdminURL()}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text.String(), "completed with a 5xx") || !strings.Contains(text.String(), "UF 4") {
		t.Errorf("text lacks the completed 5xx:\n%s", text.String())
	}
}

// status --watch shows the 5xx rate: the counter's change over the fake second between samples.
func TestWatchShows5xxRate(t *testing.T) {
	e := startEmulatedDown(t, envoysim.Config{})
	e.sendFailing(t, 1, http.StatusServiceUnavailable)
	clk := newHookClock(func() { e.sendFailing(t, 3, http.StatusServiceUnavailable) })
	var out bytes.Buffer
	err := Run(context.Background(), Envoy(e.client), &out, Options{AdminURL: e.sim.AdminURL(), Output: OutputJSON, Watch: true,
		Interval: time.Second, Samples: 2, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	docs := jsonLines(t, out.String())
	if len(docs) != 2 {
		t.Fatalf("%d samples, want 2:\n%s", len(docs), out.String())
	}
	if first := firstInbound(t, docs[0]); first["server_errors_rate"] != nil {
		t.Errorf("first sample has a 5xx rate %v", first["server_errors_rate"])
	}
	if second := firstInbound(t, docs[1]); second["server_errors_total"] != 4.0 || second["server_errors_rate"] != 3.0 {
		t.Errorf("second sample: 5xx %v rate %v, want 4 and 3/s", second["server_errors_total"], second["server_errors_rate"])
	}

	var line bytes.Buffer
	clk = newHookClock(func() { e.sendFailing(t, 2, http.StatusServiceUnavailable) })
	if err := Run(context.Background(), Envoy(e.client), &line, Options{AdminURL: e.sim.AdminURL(), Watch: true,
		Interval: time.Second, Samples: 2, Clock: clk}); err != nil {
		t.Fatal(err)
	}
	if lines := strings.Split(strings.TrimSpace(line.String()), "\n"); len(lines) != 2 || !strings.Contains(lines[1], "5xx=6 5xx_rate=2.0") ||
		!strings.Contains(lines[1], "failures=UF:6") {
		t.Errorf("watch lines:\n%s", line.String())
	}
}

func serverErrorsCheck(t *testing.T, res CheckResult) Item {
	t.Helper()
	for _, it := range res.Checks {
		if it.Name == "server-errors" {
			return it
		}
	}
	t.Fatalf("no server-errors item in %+v", res.Checks)
	return Item{}
}

// check warns when the sidecar answers 5xx between its two samples, and only then.
func TestCheckWarnsWhileTheSidecarAnswers5xx(t *testing.T) {
	e := startEmulatedDown(t, envoysim.Config{})
	e.sendFailing(t, 3, http.StatusServiceUnavailable)

	clk := newHookClock(func() { e.sendFailing(t, 2, http.StatusServiceUnavailable) })
	res := Evaluate(context.Background(), Envoy(e.client), CheckOptions{AdminURL: e.sim.AdminURL(), Clock: clk, FailureWindow: 2 * time.Second})
	it := serverErrorsCheck(t, res)
	if it.Status != Warn || !strings.Contains(it.Message, "port 8080: 2 5xx in 2s (UF 2)") || !strings.Contains(it.Fix, "could not connect to the app") {
		t.Errorf("item %+v: want a warning naming port 8080, 2 5xx and UF", it)
	}
	if !res.OK {
		t.Errorf("a warning must not fail the check: %+v", res.Problems())
	}

	// The same sidecar, no request during the window: what it answered before is history.
	clk = newHookClock(nil)
	res = Evaluate(context.Background(), Envoy(e.client), CheckOptions{AdminURL: e.sim.AdminURL(), Clock: clk})
	if it := serverErrorsCheck(t, res); it.Status != Pass || !strings.Contains(it.Message, "5 5xx answered to clients since the sidecar started, none in 1s") {
		t.Errorf("item %+v: want ok, 5 earlier and none now", it)
	}
	if clk.waited() != 1 {
		t.Errorf("waited %d times, want the one window", clk.waited())
	}

	var out bytes.Buffer
	clk = newHookClock(func() { e.sendFailing(t, 1, http.StatusServiceUnavailable) })
	if _, err := Check(context.Background(), Envoy(e.client), &out, CheckOptions{AdminURL: e.sim.AdminURL(), Clock: clk}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "WARN  the sidecar is answering 5xx to its clients now") || !strings.Contains(out.String(), "check passed") {
		t.Errorf("check output:\n%s", out.String())
	}
}

// A sidecar that never answered a 5xx passes at once: no second sample, no wait.
func TestCheckTakesNoSecondSampleWithout5xx(t *testing.T) {
	e := startEmulated(t, envoysim.Config{})
	e.send(t, 8080, 2)
	clk := newHookClock(nil)
	res := Evaluate(context.Background(), Envoy(e.client), CheckOptions{AdminURL: e.sim.AdminURL(), Clock: clk})
	if it := serverErrorsCheck(t, res); it.Status != Pass || it.Message != "no 5xx answered to clients since the sidecar started" {
		t.Errorf("item %+v", it)
	}
	if clk.waited() != 0 {
		t.Errorf("waited %d times for a sidecar without 5xx", clk.waited())
	}
}

// A second sample that fails leaves the question open: a warning that says so.
func TestServerErrorsItemSecondSampleFailed(t *testing.T) {
	first := Report{Inbound: []Port{{Port: port(8080), ServerErrorsTotal: f(4), Failures: map[string]float64{FlagUF: 4}}}}
	it, ok := serverErrorsItem(first, nil, &UnreachableError{URL: "u", Err: envoy.ErrRefused}, time.Second)
	if !ok || it.Status != Warn || !strings.Contains(it.Message, "4 5xx answered") || !strings.Contains(it.Message, "second sample") {
		t.Errorf("item %+v", it)
	}
	// A counter that went down between the samples is a restarted sidecar, not 5xx now.
	second := Report{Inbound: []Port{{Port: port(8080), ServerErrorsTotal: f(1), Failures: map[string]float64{FlagUF: 1}}}}
	if it, _ := serverErrorsItem(first, &second, nil, time.Second); it.Status != Pass {
		t.Errorf("after a reset: %+v", it)
	}
	// Without any failure counter the check says nothing.
	if _, ok := serverErrorsItem(Report{Inbound: []Port{{Port: port(8080)}}}, nil, nil, time.Second); ok {
		t.Error("an item without any failure counter")
	}
}

// The app's own 5xx move no flag: the fix points at the app.
func TestServerErrorsItemAppsOwn5xx(t *testing.T) {
	first := Report{Inbound: []Port{{Port: port(8080), ServerErrorsTotal: f(1), Failures: map[string]float64{FlagUF: 0, FlagUC: 0}}}}
	second := Report{Inbound: []Port{{Port: port(8080), ServerErrorsTotal: f(7), Failures: map[string]float64{FlagUF: 0, FlagUC: 0}}}}
	it, _ := serverErrorsItem(first, &second, nil, time.Second)
	if it.Status != Warn || !strings.Contains(it.Message, "port 8080: 6 5xx in 1s") || !strings.Contains(it.Fix, "app's logs") {
		t.Errorf("item %+v", it)
	}
}

// The Linkerd proxy answers 502 for an app that is not listening and counts it in
// response_total with its status: status shows the 5xx rising, check warns.
func TestLinkerdStatusAndCheckShow502s(t *testing.T) {
	sim, err := linkerdsim.Start(linkerdsim.Config{Inbound: []linkerdsim.InboundPort{{Port: 8080, AppAddr: deadAppAddr(t)}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sim.Close() })
	client, err := linkerd.New(sim.AdminURL(), linkerd.Options{})
	if err != nil {
		t.Fatal(err)
	}
	send := func(n int) {
		t.Helper()
		before := len(sim.AccessLog())
		hc := &http.Client{Transport: &http.Transport{Proxy: nil}, Timeout: 5 * time.Second}
		for i := 0; i < n; i++ {
			resp, err := hc.Get("http://" + sim.InboundAddr(8080) + "/")
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusBadGateway {
				t.Fatalf("status %d, want 502", resp.StatusCode)
			}
		}
		waitFor(t, "the proxy to count the responses", func() bool { return len(sim.AccessLog()) == before+n })
	}
	statusOf := func() map[string]any {
		t.Helper()
		var out bytes.Buffer
		if err := Run(context.Background(), Linkerd(client), &out, Options{AdminURL: sim.AdminURL(), Selector: mesh.Selector{Ports: []int{8080}}, Output: OutputJSON}); err != nil {
			t.Fatal(err)
		}
		docs := jsonLines(t, out.String())
		return firstInbound(t, docs[0])
	}

	send(2)
	in := statusOf()
	if codes, _ := in["server_errors_by_code"].(map[string]any); in["server_errors_total"] != 2.0 || codes["502"] != 2.0 {
		t.Errorf("server_errors_total %v by code %v, want 2, 502: 2", in["server_errors_total"], in["server_errors_by_code"])
	}
	send(3)
	if in := statusOf(); in["server_errors_total"] != 5.0 {
		t.Errorf("server_errors_total %v after three more, want 5", in["server_errors_total"])
	}

	clk := newHookClock(func() { send(1) })
	res := Evaluate(context.Background(), Linkerd(client), CheckOptions{AdminURL: sim.AdminURL(), Selector: mesh.Selector{Ports: []int{8080}}, Clock: clk})
	if it := serverErrorsCheck(t, res); it.Status != Warn || !strings.Contains(it.Message, "port 8080: 1 5xx in 1s (502 1)") || !strings.Contains(it.Fix, "502") {
		t.Errorf("item %+v", it)
	}
}

// A Linkerd port whose responses are counted and none is a 5xx shows 0, not unknown.
func TestLinkerdHealthyPortShowsZero5xx(t *testing.T) {
	e := startLinkerd(t)
	e.get(t, "/", 2)
	r := e.gather(t, mesh.Selector{Ports: []int{8080}}, func(r Report) bool {
		return len(r.Inbound) == 1 && r.Inbound[0].ResponsesTotal != nil && *r.Inbound[0].ResponsesTotal == 2
	})
	if p := r.Inbound[0]; p.ServerErrorsTotal == nil || *p.ServerErrorsTotal != 0 || p.ServerErrorsByCode != nil {
		t.Errorf("5xx %v by code %v, want 0 and none", show(p.ServerErrorsTotal), p.ServerErrorsByCode)
	}
}

func show(v *float64) string { return num(v) }
