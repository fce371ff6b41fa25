package status

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/meshdrain/meshdrain/pkg/mesh"
	"github.com/meshdrain/meshdrain/pkg/mesh/envoy"
	"github.com/meshdrain/meshdrain/pkg/sim/envoysim"
)

// emulated is a running emulated sidecar with an app behind each inbound port.
type emulated struct {
	sim    *envoysim.Sidecar
	client *envoy.Client
}

func startEmulated(t *testing.T, cfg envoysim.Config, ports ...int) emulated {
	t.Helper()
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }))
	t.Cleanup(app.Close)
	if len(ports) == 0 {
		ports = []int{8080}
	}
	for _, p := range ports {
		cfg.Inbound = append(cfg.Inbound, envoysim.InboundPort{Port: p, AppAddr: strings.TrimPrefix(app.URL, "http://")})
	}
	// Nothing here terminates the sidecar; long drains keep any stray timer harmless, unless a
	// test asks for a short drain time to see the listeners stop.
	if cfg.DrainTime == 0 {
		cfg.DrainTime = time.Hour
	}
	cfg.TerminationDrainDuration = time.Hour
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

// send makes n requests through the sidecar's inbound port.
func (e emulated) send(t *testing.T, port, n int) {
	t.Helper()
	client := &http.Client{Timeout: 5 * time.Second}
	for i := 0; i < n; i++ {
		resp, err := client.Get("http://" + e.sim.InboundAddr(port) + "/")
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("request %d: status %d", i, resp.StatusCode)
		}
	}
}

func (e emulated) statusJSON(t *testing.T, sel mesh.Selector) map[string]any {
	t.Helper()
	var out bytes.Buffer
	if err := Run(context.Background(), Envoy(e.client), &out, Options{AdminURL: e.sim.AdminURL(), Selector: sel, Output: OutputJSON}); err != nil {
		t.Fatalf("status: %v", err)
	}
	var doc map[string]any
	if err := json.Unmarshal(out.Bytes(), &doc); err != nil {
		t.Fatalf("status -o json is not one JSON object: %v\n%s", err, out.String())
	}
	return doc
}

func hintsOf(doc map[string]any) string {
	var all []string
	for _, h := range doc["hints"].([]any) {
		all = append(all, h.(string))
	}
	return strings.Join(all, "\n")
}

func TestStatusAgainstEmulatorProfiles(t *testing.T) {
	generic := mesh.Selector{Clusters: []string{"service_a"}, HTTPPrefixes: []string{"ingress_http"}}
	cases := []struct {
		profile envoysim.Profile
		sel     mesh.Selector
		naming  string
		port    any
		name    string
	}{
		{envoysim.ProfileIstio, mesh.Selector{}, "istio", 8080.0, "inbound|8080||"},
		{envoysim.ProfileIstioLegacy, mesh.Selector{}, "istio-legacy", 8080.0, "inbound|8080||"},
		{envoysim.ProfileEnvoy, generic, "envoy", nil, "ingress_http / service_a"},
	}
	for _, c := range cases {
		t.Run(string(c.profile), func(t *testing.T) {
			e := startEmulated(t, envoysim.Config{Profile: c.profile})
			e.send(t, 8080, 3)
			doc := e.statusJSON(t, c.sel)
			if doc["server_state"] != "LIVE" || doc["naming"] != c.naming || doc["signal"] != "http-requests" {
				t.Errorf("state %v naming %v signal %v, want LIVE %s http-requests", doc["server_state"], doc["naming"], doc["signal"], c.naming)
			}
			in := firstInbound(t, doc)
			if in["port"] != c.port || in["name"] != c.name {
				t.Errorf("endpoint port %v name %v, want %v %q", in["port"], in["name"], c.port, c.name)
			}
			if in["requests_total"] != 3.0 || in["requests_active"] != 0.0 || in["requests_rate"] != nil {
				t.Errorf("endpoint %v: want 3 requests, 0 active, no rate on a first sample", in)
			}
			if _, ok := in["connections_active"]; !ok {
				t.Errorf("endpoint %v lacks connections_active", in)
			}
			if hints := hintsOf(doc); hints != "" {
				t.Errorf("unexpected hints: %s", hints)
			}
		})
	}
}

func TestStatusAgainstEmulatorIstioDefaultInclusion(t *testing.T) {
	e := startEmulated(t, envoysim.Config{Profile: envoysim.ProfileIstio, Inclusion: envoysim.InclusionIstioDefault})
	doc := e.statusJSON(t, mesh.Selector{})
	if doc["signal"] != "none" || doc["mesh"] != "istio" {
		t.Errorf("before any request: signal %v mesh %v, want none on istio", doc["signal"], doc["mesh"])
	}
	if !strings.Contains(hintsOf(doc), envoy.MissingStatsHint) {
		t.Errorf("hints lack the annotation: %s", hintsOf(doc))
	}

	e.send(t, 8080, 2)
	doc = e.statusJSON(t, mesh.Selector{})
	if doc["signal"] != "completed-requests" || doc["completed_requests_total"] != 2.0 {
		t.Errorf("after 2 requests: signal %v completed %v, want completed-requests 2", doc["signal"], doc["completed_requests_total"])
	}
	if !strings.Contains(hintsOf(doc), "lags arrivals") || !strings.Contains(hintsOf(doc), "statsInclusionPrefixes") {
		t.Errorf("hints: %s", hintsOf(doc))
	}
}

func TestStatusAgainstEmulatorPlainEnvoyNeedsNames(t *testing.T) {
	e := startEmulated(t, envoysim.Config{Profile: envoysim.ProfileEnvoy})
	e.send(t, 8080, 1)
	doc := e.statusJSON(t, mesh.Selector{})
	if doc["signal"] != "none" || doc["mesh"] != "envoy" {
		t.Errorf("signal %v mesh %v, want none on envoy", doc["signal"], doc["mesh"])
	}
	if hints := hintsOf(doc); !strings.Contains(hints, "--cluster") || strings.Contains(hints, "statsInclusionPrefixes") {
		t.Errorf("a plain Envoy needs --cluster/--http-prefix, not the Istio annotation: %s", hints)
	}
}

func TestStatusAgainstEmulatorDraining(t *testing.T) {
	e := startEmulated(t, envoysim.Config{})
	resp, err := http.Post(e.sim.AdminURL()+"/healthcheck/fail", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	doc := e.statusJSON(t, mesh.Selector{})
	if doc["server_state"] != "DRAINING" || !strings.Contains(hintsOf(doc), "DRAINING") {
		t.Errorf("state %v hints %s, want DRAINING noted", doc["server_state"], hintsOf(doc))
	}
	res := Evaluate(context.Background(), Envoy(e.client), CheckOptions{AdminURL: e.sim.AdminURL()})
	if it, _ := item(res, "server-state"); res.OK || it.Status != Fail {
		t.Errorf("check of a DRAINING server: ok %v, item %+v", res.OK, it)
	}
}

func TestStatusAgainstEmulatorTextWatch(t *testing.T) {
	e := startEmulated(t, envoysim.Config{})
	e.send(t, 8080, 1)
	var out bytes.Buffer
	err := Run(context.Background(), Envoy(e.client), &out, Options{AdminURL: e.sim.AdminURL(), Watch: true, Interval: 10 * time.Millisecond, Samples: 2})
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[1], "rate=0.0") {
		t.Errorf("want 2 lines, the second with a rate of 0.0:\n%s", out.String())
	}
}

func TestCheckAgainstEmulator(t *testing.T) {
	generic := mesh.Selector{Clusters: []string{"service_a"}, HTTPPrefixes: []string{"ingress_http"}}
	cases := []struct {
		name     string
		cfg      envoysim.Config
		sel      mesh.Selector
		min      MinSignal
		requests int
		ok       bool
		fix      string
	}{
		{"istio", envoysim.Config{Profile: envoysim.ProfileIstio}, mesh.Selector{Ports: []int{8080}}, "", 0, true, ""},
		{"istio-legacy", envoysim.Config{Profile: envoysim.ProfileIstioLegacy}, mesh.Selector{Ports: []int{8080}}, "", 0, true, ""},
		{"envoy with names", envoysim.Config{Profile: envoysim.ProfileEnvoy}, generic, "", 0, true, ""},
		{"envoy without names", envoysim.Config{Profile: envoysim.ProfileEnvoy}, mesh.Selector{}, "", 1, false, "--cluster NAME"},
		{"istio-default", envoysim.Config{Inclusion: envoysim.InclusionIstioDefault}, mesh.Selector{}, "", 1, false, envoy.MissingStatsHint},
		{"istio-default port", envoysim.Config{Inclusion: envoysim.InclusionIstioDefault}, mesh.Selector{Ports: []int{8080}}, "", 1, false, envoy.MissingStatsHint},
		{"istio-default completions", envoysim.Config{Inclusion: envoysim.InclusionIstioDefault}, mesh.Selector{}, MinCompletions, 1, true, ""},
		{"istio-default connections idle", envoysim.Config{Inclusion: envoysim.InclusionIstioDefault}, mesh.Selector{}, MinConnections, 0, false, envoy.MissingStatsHint},
		{"istio-default with annotation", envoysim.Config{Inclusion: envoysim.InclusionIstioDefault,
			InclusionPrefixes: []string{"cluster.inbound|", "http.inbound_", "listener.0.0.0.0_15006"}}, mesh.Selector{}, "", 0, true, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := startEmulated(t, c.cfg)
			e.send(t, 8080, c.requests)
			var out bytes.Buffer
			res, err := Check(context.Background(), Envoy(e.client), &out, CheckOptions{AdminURL: e.sim.AdminURL(), Selector: c.sel, MinSignal: c.min})
			if err != nil {
				t.Fatal(err)
			}
			if res.OK != c.ok {
				t.Errorf("ok = %v, want %v:\n%s", res.OK, c.ok, out.String())
			}
			if c.fix != "" && !strings.Contains(out.String(), "fix: "+c.fix) && !strings.Contains(out.String(), c.fix) {
				t.Errorf("output lacks the fix %q:\n%s", c.fix, out.String())
			}
			verdict := "check passed"
			if !c.ok {
				verdict = "check failed"
			}
			if !strings.Contains(out.String(), verdict) {
				t.Errorf("output lacks %q:\n%s", verdict, out.String())
			}
		})
	}
}

func TestCheckAgainstEmulatorPorts(t *testing.T) {
	e := startEmulated(t, envoysim.Config{}, 8080, 9090)
	res := Evaluate(context.Background(), Envoy(e.client), CheckOptions{AdminURL: e.sim.AdminURL(), Selector: mesh.Selector{Ports: []int{8080, 9090}}})
	if !res.OK || len(res.Checks) != 6 || res.Checks[5].Name != "server-errors" || res.Checks[5].Status != Pass {
		t.Errorf("two good ports: want ok with admin, state, listeners, one signal item per port and no 5xx, got %+v", res.Checks)
	}
	res = Evaluate(context.Background(), Envoy(e.client), CheckOptions{AdminURL: e.sim.AdminURL(), Selector: mesh.Selector{Ports: []int{8080, 7070}}})
	it := res.Problems()
	if res.OK || len(it) != 1 || !strings.Contains(it[0].Message, "port 7070") || !strings.Contains(it[0].Fix, "8080, 9090") {
		t.Errorf("a wrong --port must fail alone, naming the ports that have stats: %+v", res.Checks)
	}
}

func TestCheckAgainstEmulatorUnreachable(t *testing.T) {
	e := startEmulated(t, envoysim.Config{})
	if err := e.sim.Faults().AdminRefuse(); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	res, err := Check(context.Background(), Envoy(e.client), &out, CheckOptions{AdminURL: e.sim.AdminURL(), Output: OutputJSON, Timeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if res.OK || res.Status != nil {
		t.Errorf("refused admin: ok %v status %v", res.OK, res.Status)
	}
	var doc struct {
		OK     bool   `json:"ok"`
		Checks []Item `json:"checks"`
	}
	if err := json.Unmarshal(out.Bytes(), &doc); err != nil {
		t.Fatalf("check -o json: %v\n%s", err, out.String())
	}
	if doc.OK || len(doc.Checks) != 1 || !strings.Contains(doc.Checks[0].Message, "not reachable: is this a pod with an Envoy sidecar? is the admin port 15000?") {
		t.Errorf("json: %s", out.String())
	}
}

// drain POSTs /drain_listeners with the given query, as pilot-agent or meshdrain does.
func (e emulated) drain(t *testing.T, query string) {
	t.Helper()
	resp, err := http.Post(e.sim.AdminURL()+"/drain_listeners?"+query, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("drain_listeners?%s: %d", query, resp.StatusCode)
	}
}

// TestStoppedInboundListeners: once a drain has stopped the inbound listeners, connect is
// refused while /server_info still says LIVE; status must say so and check must fail.
func TestStoppedInboundListeners(t *testing.T) {
	for _, c := range []struct {
		name  string
		cfg   envoysim.Config
		query string
	}{
		{"graceful drain time over", envoysim.Config{DrainTime: 50 * time.Millisecond}, "inboundonly&graceful"},
		{"non-graceful drain", envoysim.Config{}, "inboundonly"},
		{"istio default stats", envoysim.Config{Inclusion: envoysim.InclusionIstioDefault}, "inboundonly"},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := startEmulated(t, c.cfg)
			e.send(t, 8080, 1)
			res := Evaluate(context.Background(), Envoy(e.client), CheckOptions{AdminURL: e.sim.AdminURL(), MinSignal: MinConnections})
			if it, ok := item(res, "inbound-listeners"); !ok || it.Status != Pass {
				t.Fatalf("before the drain: %+v", res.Checks)
			}
			e.drain(t, c.query)
			deadline := time.Now().Add(5 * time.Second)
			for {
				if _, err := net.DialTimeout("tcp", e.sim.InboundAddr(8080), time.Second); err != nil {
					break // refused: the listeners have stopped
				}
				if time.Now().After(deadline) {
					t.Fatal("the inbound listener still accepts")
				}
				time.Sleep(20 * time.Millisecond)
			}
			doc := e.statusJSON(t, mesh.Selector{})
			lm, _ := doc["listener_manager"].(map[string]any)
			if doc["server_state"] != "LIVE" || lm["listeners_stopped"] != 1.0 || !strings.Contains(hintsOf(doc), "refuse new connections") {
				t.Errorf("status: state %v listener_manager %v hints %q; want LIVE, 1 stopped, a hint", doc["server_state"], lm, hintsOf(doc))
			}
			var out bytes.Buffer
			if err := Run(context.Background(), Envoy(e.client), &out, Options{AdminURL: e.sim.AdminURL()}); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(out.String(), "1 STOPPED: new inbound connections are refused") {
				t.Errorf("status text:\n%s", out.String())
			}
			res = Evaluate(context.Background(), Envoy(e.client), CheckOptions{AdminURL: e.sim.AdminURL(), MinSignal: MinConnections})
			if it, _ := item(res, "inbound-listeners"); res.OK || it.Status != Fail || !strings.Contains(it.Fix, "restart") {
				t.Errorf("check of a drained sidecar: ok %v, %+v", res.OK, res.Checks)
			}
		})
	}
}

// TestCheckUnknownPortWithWeakSignal: --min-signal connections accepted the virtualInbound
// listener's count for a port the sidecar does not have.
func TestCheckUnknownPortWithWeakSignal(t *testing.T) {
	e := startEmulated(t, envoysim.Config{})
	e.send(t, 8080, 1)
	var out bytes.Buffer
	res, err := Check(context.Background(), Envoy(e.client), &out, CheckOptions{AdminURL: e.sim.AdminURL(),
		Selector: mesh.Selector{Ports: []int{9090}}, MinSignal: MinConnections})
	if err != nil {
		t.Fatal(err)
	}
	if res.OK || !strings.Contains(out.String(), "port 9090: the sidecar has no inbound endpoint for this port; its inbound ports are 8080") {
		t.Errorf("check --min-signal connections --port 9090 on a sidecar with 8080 only: ok %v\n%s", res.OK, out.String())
	}
	doc := e.statusJSON(t, mesh.Selector{Ports: []int{9090}})
	if fmt.Sprint(doc["unknown_ports"]) != "[9090]" || fmt.Sprint(doc["inbound_ports"]) != "[8080]" ||
		!strings.Contains(hintsOf(doc), "no inbound endpoint for it; its inbound ports are [8080]") {
		t.Errorf("status --port 9090: unknown %v inbound %v hints %q", doc["unknown_ports"], doc["inbound_ports"], hintsOf(doc))
	}
	// Without any per-port stat (Istio's default inclusion) nothing says which ports exist:
	// no port is called unknown.
	d := startEmulated(t, envoysim.Config{Inclusion: envoysim.InclusionIstioDefault})
	doc = d.statusJSON(t, mesh.Selector{Ports: []int{9090}})
	if doc["unknown_ports"] != nil {
		t.Errorf("default inclusion: unknown ports %v", doc["unknown_ports"])
	}
}
