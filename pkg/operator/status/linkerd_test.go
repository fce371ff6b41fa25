package status

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/meshdrain/meshdrain/pkg/localhttp/localhttptest"
	"github.com/meshdrain/meshdrain/pkg/mesh"
	"github.com/meshdrain/meshdrain/pkg/mesh/linkerd"
	"github.com/meshdrain/meshdrain/pkg/sim/envoysim"
	"github.com/meshdrain/meshdrain/pkg/sim/linkerdsim"
)

// emulatedLinkerd is a running emulated Linkerd proxy on 127.0.0.1 with an app behind port
// 8080 whose /slow requests wait for release (or for the client to go away).
type emulatedLinkerd struct {
	sim     *linkerdsim.Sidecar
	client  *linkerd.Client
	release chan struct{}
	entered chan struct{}
}

func startLinkerd(t *testing.T) emulatedLinkerd {
	t.Helper()
	e := emulatedLinkerd{release: make(chan struct{}), entered: make(chan struct{}, 8)}
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			e.entered <- struct{}{}
			select {
			case <-e.release:
			case <-r.Context().Done():
				return
			}
		}
		_, _ = io.WriteString(w, "ok")
	}))
	t.Cleanup(app.Close)
	sim, err := linkerdsim.Start(linkerdsim.Config{
		Inbound:    []linkerdsim.InboundPort{{Port: 8080, AppAddr: strings.TrimPrefix(app.URL, "http://")}},
		ProbePaths: []string{"/healthz"},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sim.Close() })
	client, err := linkerd.New(sim.AdminURL(), linkerd.Options{})
	if err != nil {
		t.Fatal(err)
	}
	e.sim, e.client = sim, client
	return e
}

func (e emulatedLinkerd) get(t *testing.T, path string, n int) {
	t.Helper()
	hc := &http.Client{Transport: &http.Transport{Proxy: nil}, Timeout: 5 * time.Second}
	for i := 0; i < n; i++ {
		resp, err := hc.Get("http://" + e.sim.InboundAddr(8080) + path)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}

// gather samples the proxy until cond holds: a response is counted as its body ends, a hair
// after the client has read it.
func (e emulatedLinkerd) gather(t *testing.T, sel mesh.Selector, cond func(Report) bool) Report {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		r, err := GatherLinkerd(context.Background(), e.client, e.sim.AdminURL(), sel, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if cond(r) {
			return r
		}
		if time.Now().After(deadline) {
			t.Fatalf("the sample never met the condition: %+v", r)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func port8080(r Report) *Port {
	for i, p := range r.Inbound {
		if p.Port != nil && *p.Port == 8080 {
			return &r.Inbound[i]
		}
	}
	return nil
}

// TestLinkerdStatusAgainstEmulator: status shows what prestop would read from a Linkerd
// proxy: requests per target port, the in-flight estimate, the client connections and the
// probes apart; never the admin port, whose traffic (status's own) the proxy counts inbound.
func TestLinkerdStatusAgainstEmulator(t *testing.T) {
	e := startLinkerd(t)
	e.get(t, "/", 5)
	e.get(t, "/healthz", 2)
	r := e.gather(t, mesh.Selector{}, func(r Report) bool {
		p := port8080(r)
		return p != nil && p.ResponsesTotal != nil && *p.ResponsesTotal == 5
	})
	if r.Mesh != mesh.Linkerd || r.ServerState != StateReady || r.Signal != mesh.SignalHTTPRequests || r.Naming != linkerd.NamingLinkerd ||
		r.ProxyVersion == "" || r.LabelScheme != string(linkerd.SchemeTargetPort) {
		t.Errorf("report header: mesh %s state %q signal %s naming %s version %q scheme %q", r.Mesh, r.ServerState, r.Signal, r.Naming, r.ProxyVersion, r.LabelScheme)
	}
	if len(r.Inbound) != 1 {
		t.Fatalf("inbound %+v: want port 8080 only (the admin port is the proxy's own)", r.Inbound)
	}
	p := r.Inbound[0]
	if num(p.RequestsTotal) != "5" || num(p.RequestsActive) != "0" || num(p.ProbeRequestsTotal) != "2" || p.ConnectionsActive == nil || p.Signal != mesh.SignalHTTPRequests {
		t.Errorf("port 8080: requests %s in flight %s probes %s connections %s signal %s; want 5, 0, 2, a number, http-requests",
			num(p.RequestsTotal), num(p.RequestsActive), num(p.ProbeRequestsTotal), num(p.ConnectionsActive), p.Signal)
	}
	if len(r.Hints) != 0 {
		t.Errorf("hints for a healthy proxy: %q", r.Hints)
	}

	var text bytes.Buffer
	if err := WriteText(&text, r); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"(linkerd-proxy v2.340.0-linkerdsim)", "server:  ready", "IN FLIGHT*", "PROBES", "request_total - response_total"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("text lacks %q:\n%s", want, text.String())
		}
	}

	// The same through Run, as JSON: the new keys are there, Envoy's are not invented.
	var out bytes.Buffer
	if err := Run(context.Background(), Linkerd(e.client), &out, Options{AdminURL: e.sim.AdminURL(), Output: OutputJSON}); err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(out.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	if doc["mesh"] != "linkerd" || doc["envoy_version"] != nil || doc["listener_manager"] != nil || firstInbound(t, doc)["probe_requests_total"] != 2.0 {
		t.Errorf("json: %v", doc)
	}
}

// TestLinkerdInFlightEstimate: a request the app holds shows as one in flight; one a client
// abandoned before its response stays counted, the drift the estimate is known for.
func TestLinkerdInFlightEstimate(t *testing.T) {
	e := startLinkerd(t)
	e.get(t, "/", 1)
	inFlight := func(want string) func(Report) bool {
		return func(r Report) bool { p := port8080(r); return p != nil && num(p.RequestsActive) == want }
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.get(t, "/slow", 1)
	}()
	<-e.entered
	e.gather(t, mesh.Selector{Ports: []int{8080}}, inFlight("1"))
	e.release <- struct{}{}
	<-done
	e.gather(t, mesh.Selector{Ports: []int{8080}}, inFlight("0"))

	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+e.sim.InboundAddr(8080)+"/slow", nil)
	go func() {
		<-e.entered
		cancel()
	}()
	if _, err := (&http.Client{Transport: &http.Transport{Proxy: nil}}).Do(req); err == nil {
		t.Fatal("the abandoned request succeeded")
	}
	// Give the proxy time to see the client go; the estimate must stay at 1 for good.
	time.Sleep(50 * time.Millisecond)
	r := e.gather(t, mesh.Selector{Ports: []int{8080}}, inFlight("1"))
	if r.Signal != mesh.SignalHTTPRequests {
		t.Errorf("signal %s", r.Signal)
	}
}

func checkOf(t *testing.T, sc Sampler, o CheckOptions) (CheckResult, string) {
	t.Helper()
	var out bytes.Buffer
	res, err := Check(context.Background(), sc, &out, o)
	if err != nil {
		t.Fatal(err)
	}
	return res, out.String()
}

// TestLinkerdCheck: no annotation is ever the fix; a port with no series fails with both of
// its causes, a port only probes reached warns, and the timing of a classic proxy's sleep is
// judged like Istio's terminationDrainDuration.
func TestLinkerdCheck(t *testing.T) {
	fresh := startLinkerd(t)
	res, out := checkOf(t, Linkerd(fresh.client), CheckOptions{AdminURL: fresh.sim.AdminURL()})
	if res.OK || !strings.Contains(out, "no app port has series") || !strings.Contains(out, "LINKERD2_PROXY_METRICS_RETAIN_IDLE") {
		t.Errorf("a proxy no request reached yet:\n%s", out)
	}
	if strings.Contains(out, "annotation") || strings.Contains(out, "istio") {
		t.Errorf("a Linkerd check suggests an annotation or Istio:\n%s", out)
	}

	probed := startLinkerd(t)
	probed.get(t, "/healthz", 3)
	res, out = checkOf(t, Linkerd(probed.client), CheckOptions{AdminURL: probed.sim.AdminURL(), Selector: mesh.Selector{Ports: []int{8080}}})
	if !res.OK || !strings.Contains(out, "WARN  port 8080: only the kubelet's probes") {
		t.Errorf("a port only probes reached: ok %v\n%s", res.OK, out)
	}

	busy := startLinkerd(t)
	busy.get(t, "/", 3)
	res, out = checkOf(t, Linkerd(busy.client), CheckOptions{AdminURL: busy.sim.AdminURL(), Selector: mesh.Selector{Ports: []int{8080}}})
	if !res.OK || !strings.Contains(out, "OK    port 8080: request-level signal http-requests") || !strings.Contains(out, "OK    proxy ready (/ready)") {
		t.Errorf("a busy port:\n%s", out)
	}
	res, out = checkOf(t, Linkerd(busy.client), CheckOptions{AdminURL: busy.sim.AdminURL(), Selector: mesh.Selector{Ports: []int{8080, 9090}}})
	if res.OK || !strings.Contains(out, "FAIL  port 9090: the proxy has no series for this port") || !strings.Contains(out, "ports with series: 8080") {
		t.Errorf("a port with no series:\n%s", out)
	}
	if res.Status == nil || len(res.Status.SilentPorts) != 1 || res.Status.SilentPorts[0] != 9090 {
		t.Errorf("silent ports: %+v", res.Status)
	}

	for _, c := range []struct {
		name string
		o    CheckOptions
		ok   bool
		want string
	}{
		{"native", CheckOptions{GracePeriod: 52 * time.Second, AppDrain: 5 * time.Second}, true, "OK    prestop deadline 46s"},
		{"classic sleep covers the app", CheckOptions{GracePeriod: 52 * time.Second, AppDrain: 5 * time.Second, ProxyWaitBeforeExit: 51 * time.Second}, true,
			"OK    proxy-wait-before-exit 51s outlives the app's latest exit at t0+51s"},
		{"classic sleep too short", CheckOptions{GracePeriod: 52 * time.Second, AppDrain: 5 * time.Second, ProxyWaitBeforeExit: 20 * time.Second}, false,
			`proxy-wait-before-exit-seconds: "51"`},
		{"no time after the sleep", CheckOptions{GracePeriod: 52 * time.Second, AppDrain: 5 * time.Second, ProxyWaitBeforeExit: 52 * time.Second}, false,
			"less than 1s to shut down"},
		{"Istio's setting", CheckOptions{GracePeriod: 52 * time.Second, AppDrain: 5 * time.Second, TerminationDrainDuration: 52 * time.Second}, true,
			"WARN  terminationDrainDuration is Istio's"},
	} {
		c.o.AdminURL, c.o.Selector = busy.sim.AdminURL(), mesh.Selector{Ports: []int{8080}}
		res, out := checkOf(t, Linkerd(busy.client), c.o)
		if res.OK != c.ok || !strings.Contains(out, c.want) {
			t.Errorf("%s: ok %v, want %v and %q:\n%s", c.name, res.OK, c.ok, c.want, out)
		}
		if strings.Contains(out, "drain_time") || strings.Contains(out, "Istio's default") {
			t.Errorf("%s: an Envoy timing rule for a Linkerd proxy:\n%s", c.name, out)
		}
	}
}

// notReadyLinkerd is a proxy that answers /ready with 503.
type notReadyLinkerd struct{}

func (notReadyLinkerd) Ready(context.Context) (bool, error) { return false, nil }
func (notReadyLinkerd) Snapshot(context.Context, linkerd.Selector) (linkerd.Snapshot, error) {
	return linkerd.Snapshot{IsLinkerd: true, Scheme: linkerd.SchemeUnknown}, nil
}
func (notReadyLinkerd) SilentPorts(context.Context, linkerd.Snapshot) (silent, withSeries []int) {
	return nil, nil
}

func TestLinkerdCheckNotReady(t *testing.T) {
	res, out := checkOf(t, Linkerd(notReadyLinkerd{}), CheckOptions{AdminURL: "http://127.0.0.1:4191"})
	if res.OK || !strings.Contains(out, "FAIL  proxy not ready (/ready)") {
		t.Errorf("not ready:\n%s", out)
	}
}

// TestDetectPicksTheSidecar runs detection as the CLI does (linkerd.DetectWith) against the
// two emulators and against nothing.
func TestDetectPicksTheSidecar(t *testing.T) {
	closed := "http://" + localhttptest.RefusingAddr(t)
	l5d := startLinkerd(t)
	l5d.get(t, "/", 2)
	envoy := startEmulated(t, envoysim.Config{})
	envoy.send(t, 8080, 2)
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "<html>") }))
	t.Cleanup(other.Close)

	detect := func(ctx context.Context, u string) (mesh.Mesh, error) {
		return linkerd.DetectWith(ctx, u, linkerd.Options{})
	}
	var built []string
	build := func(sidecarMesh mesh.Mesh, u string) (Sampler, error) {
		built = append(built, u)
		if sidecarMesh == mesh.Linkerd {
			c, err := linkerd.New(u, linkerd.Options{})
			return Linkerd(c), err
		}
		return Envoy(envoy.client), nil
	}
	for _, c := range []struct {
		name       string
		candidates []string
		mesh       mesh.Mesh
		admin      string
	}{
		{"linkerd after nothing", []string{closed, l5d.sim.AdminURL()}, mesh.Linkerd, l5d.sim.AdminURL()},
		{"istio after nothing", []string{closed, envoy.sim.AdminURL()}, mesh.Istio, envoy.sim.AdminURL()},
	} {
		sc := Detect(c.candidates, detect, build)
		for i := 0; i < 2; i++ {
			r, err := sc.Sample(context.Background(), "", mesh.Selector{}, time.Now())
			if err != nil || r.Mesh != c.mesh || r.Admin != c.admin || r.Signal != mesh.SignalHTTPRequests {
				t.Errorf("%s, sample %d: mesh %s admin %s signal %s err %v", c.name, i, r.Mesh, r.Admin, r.Signal, err)
			}
		}
	}
	if len(built) != 2 {
		t.Errorf("built %v: detection must happen once per sidecar, not per sample", built)
	}

	res, out := checkOf(t, Detect([]string{closed}, detect, build), CheckOptions{})
	if res.OK || !strings.Contains(out, "no sidecar admin port reachable at "+closed) {
		t.Errorf("nothing there:\n%s", out)
	}
	_, err := Detect([]string{closed, other.URL}, detect, build).Sample(context.Background(), "", mesh.Selector{}, time.Now())
	var notSidecar *NotASidecarError
	if !errors.As(err, &notSidecar) || !strings.Contains(err.Error(), other.URL) {
		t.Errorf("something else answering: %v", err)
	}
}
