package envoy

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/meshdrain/meshdrain/pkg/mesh"
	dto "github.com/prometheus/client_model/go"
)

func f(v float64) *float64 { return &v }

func loadSnapshot(t *testing.T, fixture string, sel mesh.Selector) mesh.Snapshot {
	t.Helper()
	file, err := os.Open(filepath.Join("testdata", fixture))
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	snap, err := Parse(file, sel)
	if err != nil {
		t.Fatalf("parse %s: %v", fixture, err)
	}
	return snap
}

func eqPtr(a, b *float64) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return *a == *b
}

func show(p *float64) string {
	if p == nil {
		return "nil"
	}
	return strconv.FormatFloat(*p, 'g', -1, 64)
}

func TestNormaliseNamingVariants(t *testing.T) {
	tests := []struct {
		name    string
		fixture string
		sel     mesh.Selector
		naming  mesh.Naming
		want    mesh.Reading
		ports   []int
	}{
		{
			name: "plain envoy default tags, named cluster and prefix", fixture: "envoy.prom",
			sel:    mesh.Selector{Clusters: []string{"service_a"}, HTTPPrefixes: []string{"ingress_http"}},
			naming: mesh.NamingEnvoy,
			// admin prefix, outbound cluster, admin and per-worker listeners are all decoys.
			want: mesh.Reading{Signal: mesh.SignalHTTPRequests, Arrivals: f(40), Active: f(1), Connections: f(3)},
		},
		{
			name: "plain envoy cluster only", fixture: "envoy.prom",
			sel:    mesh.Selector{Clusters: []string{"service_a"}},
			naming: mesh.NamingEnvoy,
			want:   mesh.Reading{Signal: mesh.SignalClusterRequests, Arrivals: f(42), Active: f(1)},
		},
		{
			name: "istio >= 1.23, every inbound port", fixture: "istio.prom",
			naming: mesh.NamingIstio, ports: []int{8080, 9090},
			// 15090 and 15021 listeners, outbound and admin series, per-worker copies excluded.
			want: mesh.Reading{Signal: mesh.SignalHTTPRequests, Arrivals: f(1230), Active: f(2), Connections: f(9)},
		},
		{
			name: "istio >= 1.23, one selected port", fixture: "istio.prom",
			sel: mesh.Selector{Ports: []int{9090}}, naming: mesh.NamingIstio, ports: []int{9090},
			want: mesh.Reading{Signal: mesh.SignalHTTPRequests, Arrivals: f(30), Active: f(0), Connections: f(9)},
		},
		{
			name: "istio < 1.23, prefix left in the metric name", fixture: "istio-legacy.prom",
			naming: mesh.NamingIstioLegacy, ports: []int{8080, 9090},
			// Port 80 has only ratelimit stats, which are not read; 8080 prefers its HTTP
			// stats over its cluster stats.
			want: mesh.Reading{Signal: mesh.SignalHTTPRequests, Arrivals: f(47), Active: f(1), Connections: f(4)},
		},
		{
			name: "istio 1.23.0 double underscore bug", fixture: "istio-1.23.0.prom",
			naming: mesh.NamingIstio, ports: []int{8080},
			want: mesh.Reading{Signal: mesh.SignalHTTPRequests, Arrivals: f(12), Active: f(0)},
		},
		{
			name: "istio default inclusion: completions only", fixture: "istio-default.prom",
			naming: mesh.NamingIstio,
			want:   mesh.Reading{Signal: mesh.SignalCompletedRequests, Arrivals: f(1505)},
		},
		{
			name: "connections only, per-worker and outbound listeners ignored", fixture: "connections-only.prom",
			naming: mesh.NamingIstio,
			want:   mesh.Reading{Signal: mesh.SignalConnections, Arrivals: f(55), Active: f(3), Connections: f(3)},
		},
		{
			name: "nothing inbound", fixture: "none.prom", naming: mesh.NamingUnknown,
			want: mesh.Reading{Signal: mesh.SignalNone},
		},
		{
			// The port is listed with unknown values, and the pod-wide virtualInbound
			// listener is the only signal left.
			name: "selected port absent falls back to connections", fixture: "istio.prom",
			sel: mesh.Selector{Ports: []int{7070}}, naming: mesh.NamingIstio, ports: []int{7070},
			want: mesh.Reading{Signal: mesh.SignalConnections, Arrivals: f(310), Active: f(9), Connections: f(9)},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			snap := loadSnapshot(t, tc.fixture, tc.sel)
			if snap.Naming != tc.naming {
				t.Errorf("naming = %q, want %q", snap.Naming, tc.naming)
			}
			got := snap.Read()
			if got.Signal != tc.want.Signal || !eqPtr(got.Arrivals, tc.want.Arrivals) ||
				!eqPtr(got.Active, tc.want.Active) || !eqPtr(got.Connections, tc.want.Connections) {
				t.Errorf("reading = {%s arrivals=%s active=%s conns=%s}, want {%s arrivals=%s active=%s conns=%s}",
					got.Signal, show(got.Arrivals), show(got.Active), show(got.Connections),
					tc.want.Signal, show(tc.want.Arrivals), show(tc.want.Active), show(tc.want.Connections))
			}
			if tc.ports != nil {
				var ports []int
				for _, e := range snap.Endpoints {
					if e.Port == nil {
						t.Fatalf("endpoint %q has no port", e.Name)
					}
					ports = append(ports, *e.Port)
				}
				if !equalInts(ports, tc.ports) {
					t.Errorf("ports = %v, want %v", ports, tc.ports)
				}
			}
		})
	}
}

func TestAbsentStatIsUnknownNotZero(t *testing.T) {
	snap := loadSnapshot(t, "istio-legacy.prom", mesh.Selector{Ports: []int{80}})
	if len(snap.Endpoints) != 1 {
		t.Fatalf("endpoints = %+v", snap.Endpoints)
	}
	e := snap.Endpoints[0]
	for name, v := range map[string]*float64{
		"http total": e.HTTPRequestsTotal, "http active": e.HTTPRequestsActive,
		"cluster total": e.ClusterRequestsTotal, "cluster active": e.ClusterRequestsActive,
	} {
		if v != nil {
			t.Errorf("%s = %v, want unknown (nil)", name, *v)
		}
	}
	if got := snap.Read(); got.Signal != mesh.SignalConnections || got.Arrivals != nil || !eqPtr(got.Active, f(4)) {
		t.Errorf("reading = %+v, want the listener's connections and no arrival counter", got)
	}
}

func TestServerState(t *testing.T) {
	if s := loadSnapshot(t, "istio-default.prom", mesh.Selector{}); s.ServerState == nil || *s.ServerState != 1 {
		t.Errorf("server state = %v, want 1 (DRAINING)", s.ServerState)
	}
	if s := loadSnapshot(t, "istio-legacy.prom", mesh.Selector{}); s.ServerState != nil {
		t.Errorf("server state = %v, want unknown", *s.ServerState)
	}
}

func TestParseRejectsGarbage(t *testing.T) {
	for _, body := range []string{
		"<html>upstream connect error</html>",
		"# TYPE envoy_http_downstream_rq_total counter\nenvoy_http_downstream_rq_total{http_conn_manager_prefix=\"inbound_0.0.0.0_8080\"",
	} {
		if _, err := Parse(strings.NewReader(body), mesh.Selector{}); err == nil {
			t.Errorf("Parse(%q) succeeded, want an error", body)
		}
	}
}

func TestTrailingSpaceAndSemicolonTolerated(t *testing.T) {
	body := "# TYPE envoy_cluster_upstream_rq_total counter\n" +
		"envoy_cluster_upstream_rq_total{cluster_name=\"inbound|8080||;\"} 5 \n" +
		"# TYPE envoy_cluster_upstream_rq_active gauge\n" +
		"envoy_cluster_upstream_rq_active{cluster_name=\"inbound|8080||\"} 0\n"
	snap, err := Parse(strings.NewReader(body), mesh.Selector{})
	if err != nil {
		t.Fatal(err)
	}
	got := snap.Read()
	if got.Signal != mesh.SignalClusterRequests || !eqPtr(got.Arrivals, f(5)) || !eqPtr(got.Active, f(0)) {
		t.Errorf("reading = %+v", got)
	}
}

// The filter is matched by Envoy against text stat names; check it selects exactly what the
// normaliser needs in every naming variant, and drops the decoys.
func TestStatsFilterMatchesEnvoyNames(t *testing.T) {
	re := regexp.MustCompile(StatsFilter(mesh.Selector{Completions: true}))
	want := []string{
		"cluster.inbound|8080||.upstream_rq_total",
		"cluster.inbound|8080||;.upstream_rq_active",
		"http.inbound_0.0.0.0_8080.downstream_rq_total",
		"http.inbound_10.38.36.249_8080;.downstream_rq_active",
		"http.inbound_0.0.0.0_8080.downstream_cx_active",
		"listener.0.0.0.0_15006.downstream_cx_active",
		"listener.[__]_15006.downstream_cx_total",
		"listener.10.1.2.3_15006.downstream_cx_active",
		"server.state",
		"http.admin.downstream_rq_total", // every poll moves it: frozen answers show
		"istiocustom.istio_requests_total.reporter.destination.source_workload.frontend",
		"istiocustom.istio_requests_total.reporter.=.destination;.;source_workload.=.frontend;.;",
		"wasmcustom.reporter=.=destination;.;source_workload=.=frontend;.;response_code=.=200;.;istio_requests_total",
		"tcp.inbound|5432||.downstream_cx_total",
		"server.uptime",
		// Counted so that a frozen admin answer can be told from a live one.
		"http.admin.downstream_rq_total",
	}
	for _, name := range want {
		if !re.MatchString(name) {
			t.Errorf("filter does not match %q", name)
		}
	}
	unwanted := []string{
		"listener.0.0.0.0_15006.worker_0.downstream_cx_active",
		"listener.0.0.0.0_15090.downstream_cx_active",
		"listener.admin.downstream_cx_active",
		"http.admin.downstream_rq_active",
		"http.admin.downstream_rq_total_extra",
		"tcp.inbound|5432||.downstream_cx_rx_bytes_total",
		"tcp.outbound|6379||redis.default.svc.cluster.local.downstream_cx_total",
		"wasmcustom.reporter=.=source;.;source_workload=.=web;.;istio_requests_total",
		"http.outbound_0.0.0.0_80.downstream_rq_total",
		"cluster.outbound|80||reviews.default.svc.cluster.local.upstream_rq_total",
		// Istio < 1.10 inbound cluster names: left to their HTTP stats, so that the filter
		// stays one-pass (StatsFilter).
		"cluster.inbound|9080|http|reviews.default.svc.cluster.local.upstream_cx_active",
		"cluster.inbound|8080||.upstream_rq_time",
		"istiocustom.istio_requests_total.reporter.source.source_workload.web",
		"server.state_duration",
	}
	for _, name := range unwanted {
		if re.MatchString(name) {
			t.Errorf("filter matches %q", name)
		}
	}

	if regexp.MustCompile(StatsFilter(mesh.Selector{})).MatchString("istiocustom.istio_requests_total.reporter.destination.source_workload.frontend") {
		t.Error("completions asked for without Completions")
	}
	ported := regexp.MustCompile(StatsFilter(mesh.Selector{Ports: []int{9090}}))
	if ported.MatchString("http.inbound_0.0.0.0_8080.downstream_rq_total") || !ported.MatchString("http.inbound_0.0.0.0_9090.downstream_rq_total") {
		t.Error("port selection not applied to the filter")
	}
	generic := regexp.MustCompile(StatsFilter(mesh.Selector{Clusters: []string{"local_app"}, HTTPPrefixes: []string{"public_listener"}}))
	for _, name := range []string{"cluster.local_app.upstream_rq_total", "http.public_listener.downstream_rq_active", "server.state"} {
		if !generic.MatchString(name) {
			t.Errorf("generic filter does not match %q", name)
		}
	}
	if generic.MatchString("cluster.local_appx.upstream_rq_total") || generic.MatchString("http.inbound_0.0.0.0_8080.downstream_rq_total") {
		t.Error("generic filter matches stats it should not")
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// Envoy's admin request counter is read in each naming variant, and never mistaken for an
// inbound endpoint.
func TestAdminRequestsCounter(t *testing.T) {
	for name, body := range map[string]string{
		"envoy": "# TYPE envoy_http_downstream_rq_total counter\n" +
			"envoy_http_downstream_rq_total{envoy_http_conn_manager_prefix=\"admin\"} 41\n" +
			"envoy_http_downstream_rq_total{envoy_http_conn_manager_prefix=\"ingress_http\"} 7\n",
		// Istio's tag regexes leave the admin prefix in the name (both bootstrap variants).
		"istio": "# TYPE envoy_http_admin_downstream_rq_total counter\nenvoy_http_admin_downstream_rq_total{} 41\n" +
			"# TYPE envoy_http_downstream_rq_total counter\n" +
			"envoy_http_downstream_rq_total{http_conn_manager_prefix=\"inbound_0.0.0.0_8080\"} 7\n",
	} {
		snap, err := Parse(strings.NewReader(body), mesh.Selector{})
		if err != nil {
			t.Fatal(err)
		}
		if !eqPtr(snap.AdminRequestsTotal, f(41)) {
			t.Errorf("%s: admin requests = %v, want 41", name, snap.AdminRequestsTotal)
		}
		for _, e := range snap.Endpoints {
			if e.Name == "admin" {
				t.Errorf("%s: admin read as an inbound endpoint", name)
			}
		}
	}
	if snap, _ := Parse(strings.NewReader("# TYPE envoy_server_state gauge\nenvoy_server_state{} 0\n"), mesh.Selector{}); snap.AdminRequestsTotal != nil {
		t.Error("an absent admin counter must stay nil")
	}
}

type dtoFamily = dto.MetricFamily

func loadFamilies(t *testing.T, fixture string) map[string]*dto.MetricFamily {
	t.Helper()
	file, err := os.Open(filepath.Join("testdata", fixture))
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	families, err := ParseFamilies(file)
	if err != nil {
		t.Fatal(err)
	}
	return families
}

// downstream_cx_drain_close counts the connections the sidecar told to close because it
// drains: read in every naming, per inbound port, so that a drain meshdrain did not start can
// be seen (evidence.Table with --drain-at end).
func TestDrainClosesInEveryNaming(t *testing.T) {
	for _, c := range []struct{ name, text string }{
		{"istio >= 1.23", "# TYPE envoy_http_downstream_cx_drain_close counter\nenvoy_http_downstream_cx_drain_close{http_conn_manager_prefix=\"inbound_0.0.0.0_8080\"} 4\n"},
		{"istio < 1.23", "# TYPE envoy_http_inbound_0_0_0_0_8080_downstream_cx_drain_close counter\nenvoy_http_inbound_0_0_0_0_8080_downstream_cx_drain_close{} 4\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			text := "# TYPE envoy_http_downstream_rq_total counter\nenvoy_http_downstream_rq_total{http_conn_manager_prefix=\"inbound_0.0.0.0_8080\"} 10\n" +
				"# TYPE envoy_http_downstream_rq_active gauge\nenvoy_http_downstream_rq_active{http_conn_manager_prefix=\"inbound_0.0.0.0_8080\"} 0\n" + c.text
			snap, err := Parse(strings.NewReader(text), mesh.Selector{})
			if err != nil {
				t.Fatal(err)
			}
			if got := snap.DrainCloses(); !eqPtr(got, f(4)) {
				t.Errorf("drain closes %s, want 4 (%+v)", show(got), snap.Endpoints)
			}
		})
	}
}
