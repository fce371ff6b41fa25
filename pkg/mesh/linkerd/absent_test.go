package linkerd

import (
	"context"
	"strings"
	"testing"

	"github.com/meshdrain/meshdrain/pkg/mesh"
	"github.com/meshdrain/meshdrain/pkg/sim/linkerdsim"
)

// The lead's decision (issue 11, phase 2b): after a successful scrape of a confirmed Linkerd
// proxy, a watched port with no series has had no request and has none in flight; a counter
// the proxy does not export per port stays unknown.
func TestReadAbsentAsZero(t *testing.T) {
	const buildInfo = "# TYPE proxy_build_info gauge\nproxy_build_info{version=\"v2.340.0\"} 1\n"
	const admin = `request_total{direction="inbound",target_port="4191",route_name="default"} 40` + "\n" +
		`response_total{direction="inbound",target_port="4191",route_name="default",status_code="200"} 39` + "\n"
	const probes = `request_total{direction="inbound",target_port="9090",route_name="probe"} 7` + "\n" +
		`tcp_open_connections{direction="inbound",peer="src",target_port="9090"} 1` + "\n"
	const tcpOnly = `tcp_open_connections{direction="inbound",peer="src",target_port="5432"} 3` + "\n"
	const noTarget = `request_total{direction="inbound",tls="disabled"} 40` + "\n" + `response_total{direction="inbound",tls="disabled"} 40` + "\n"
	const routes = `inbound_http_requests_total{parent_port="4191",route_name="default"} 40` + "\n"
	for _, tc := range []struct {
		name               string
		text               string
		sel                Selector
		port               int
		arrivals, inFlight *float64
		signal             mesh.Signal
	}{
		{name: "silent watched port", text: buildInfo + admin, sel: Selector{Ports: []int{8080}}, port: 8080, arrivals: f(0), inFlight: f(0), signal: mesh.SignalHTTPRequests},
		{name: "probes only", text: buildInfo + admin + probes, sel: Selector{}, port: 9090, arrivals: f(0), inFlight: f(0), signal: mesh.SignalHTTPRequests},
		{name: "not a Linkerd proxy: absent stays unknown", text: admin, sel: Selector{Ports: []int{8080}}, port: 8080, signal: mesh.SignalNone},
		{name: "opaque TCP port: requests never counted there", text: buildInfo + admin + tcpOnly, sel: Selector{Ports: []int{5432}}, port: 5432, signal: mesh.SignalConnections},
		{name: "no target labels: no port can be proven silent", text: buildInfo + noTarget, sel: Selector{Ports: []int{8080}}, port: 8080, signal: mesh.SignalNone},
		{name: "route counters only: arrivals zero, in flight unknown", text: buildInfo + routes, sel: Selector{Ports: []int{8080}}, port: 8080, arrivals: f(0), signal: mesh.SignalNone},
	} {
		t.Run(tc.name, func(t *testing.T) {
			snap := parseText(t, tc.text, tc.sel)
			in := snap.Inbound()
			var found *mesh.Endpoint
			for i, e := range in.Endpoints {
				if e.Port != nil && *e.Port == tc.port {
					found = &in.Endpoints[i]
				}
			}
			if found == nil {
				t.Fatalf("no endpoint for port %d: %+v", tc.port, in.Endpoints)
			}
			if !eqPtr(found.HTTPRequestsTotal, tc.arrivals) || !eqPtr(found.HTTPRequestsActive, tc.inFlight) {
				t.Errorf("arrivals %s in flight %s, want %s %s", show(found.HTTPRequestsTotal), show(found.HTTPRequestsActive), show(tc.arrivals), show(tc.inFlight))
			}
			if got := in.Read().Signal; got != tc.signal {
				t.Errorf("signal %s, want %s", got, tc.signal)
			}
			// The raw snapshot, which status shows, still says "no series".
			for _, e := range snap.Endpoints {
				if e.Port != nil && *e.Port == tc.port && e.RequestsTotal != nil && tc.port != 9090 {
					t.Errorf("Normalise invented a counter: %+v", e)
				}
			}
		})
	}
}

// The admin port's request counter is the frozen-answer check: read from every route, never
// watched, at the URL's port or else at 4191 (a port-forwarded URL).
func TestAdminRequestsCounter(t *testing.T) {
	snap := parseText(t, modern, Selector{})
	if !eqPtr(snap.AdminRequestsTotal, f(500)) || !eqPtr(snap.Inbound().AdminRequestsTotal, f(500)) {
		t.Errorf("admin requests %s", show(snap.AdminRequestsTotal))
	}
	if snap := parseText(t, strings.ReplaceAll(modern, `target_port="4191"`, `target_port="14191"`), Selector{AdminPort: 14191}); !eqPtr(snap.AdminRequestsTotal, f(500)) {
		t.Errorf("admin requests at the URL's port %s", show(snap.AdminRequestsTotal))
	}
	if snap := load(t, "linkerd2-issue-2224-tcp.prom", Selector{}); snap.AdminRequestsTotal != nil {
		t.Errorf("a proxy without target labels has no admin counter, got %s", show(snap.AdminRequestsTotal))
	}

	// Against the emulator, every poll moves it, and the admin port is never an endpoint.
	sim := startEmulated(t, linkerdsim.Config{})
	c := newClient(t, sim.AdminURL(), Options{})
	var last float64 = -1
	for i := 0; i < 3; i++ {
		in, err := c.Inbound(context.Background(), mesh.Selector{})
		if err != nil {
			t.Fatal(err)
		}
		if in.AdminRequestsTotal == nil || *in.AdminRequestsTotal <= last {
			t.Fatalf("poll %d: admin requests %s after %g", i, show(in.AdminRequestsTotal), last)
		}
		last = *in.AdminRequestsTotal
		for _, e := range in.Endpoints {
			if e.Port != nil && *e.Port == c.AdminPort() {
				t.Errorf("the admin port is watched: %+v", e)
			}
		}
	}
}

func TestTheAdminPortIsNeverWatched(t *testing.T) {
	for _, ports := range [][]int{{4191}, {8080, 4191}, {14191}} {
		if _, err := SelectorFor(mesh.Selector{Ports: ports}, 14191); err == nil || !strings.Contains(err.Error(), "admin port") {
			t.Errorf("ports %v: %v", ports, err)
		}
	}
	if _, err := SelectorFor(mesh.Selector{Ports: []int{8080}}, 14191); err != nil {
		t.Error(err)
	}
}
