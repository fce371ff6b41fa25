package envoy

import (
	"maps"
	"regexp"
	"strings"
	"testing"

	"github.com/meshdrain/meshdrain/pkg/mesh"
)

// The failure stats of every naming, as Envoy names them in text (what filter= matches).
var failureNames = []string{
	"http.inbound_0.0.0.0_8080.downstream_rq_5xx",
	"http.inbound_10.38.36.249_8080;.downstream_rq_5xx",
	"cluster.inbound|8080||.upstream_rq_5xx",
	"cluster.inbound|8080||;.upstream_rq_5xx",
	"cluster.inbound|8080||;.upstream_cx_connect_fail",
	"cluster.inbound|8080||;.upstream_cx_destroy_remote_with_active_rq",
	"cluster.inbound|8080||;.upstream_rq_timeout",
	"cluster.inbound|8080||;.upstream_rq_rx_reset",
	"istiocustom.istio_requests_total.reporter.destination.source_workload.frontend.response_code.503.grpc_response_status.response_flags.UF",
	"istiocustom.istio_requests_total.reporter.=.destination;.;source_workload.=.frontend;.;response_code.=.500;.;response_flags.=.-;.;",
	// Istio <= 1.16's stats plugin, as in the public Istio 1.7.1 dump (testdata/istio-1.7-stats.txt), with a 503.
	"reporter=.=destination;.;source_workload=.=istio-ingressgateway;.;request_protocol=.=http;.;response_code=.=503;.;grpc_response_status=.=;.;response_flags=.=UF;.;connection_security_policy=.=mutual_tls;.;_istio_requests_total",
}

func TestFailuresFilterMatchesEnvoyNames(t *testing.T) {
	re := regexp.MustCompile(FailuresFilter(mesh.Selector{}))
	for _, name := range failureNames {
		if !re.MatchString(name) {
			t.Errorf("failures filter does not match %q", name)
		}
	}
	for _, name := range []string{
		"http.inbound_0.0.0.0_8080.downstream_rq_2xx",
		"http.inbound_0.0.0.0_8080.downstream_rq_total", // the drain's, not a failure
		"http.outbound_0.0.0.0_80.downstream_rq_5xx",
		"http.admin.downstream_rq_5xx",
		"cluster.inbound|8080||.upstream_rq_503", // the class counter is enough
		"cluster.inbound|8080||.upstream_rq_pending_failure_eject",
		"cluster.outbound|80||reviews.default.svc.cluster.local.upstream_cx_connect_fail",
		"cluster.xds-grpc.upstream_cx_connect_fail",
		"istiocustom.istio_requests_total.reporter.destination.source_workload.frontend.response_code.200.response_flags.-",
		"istiocustom.istio_requests_total.reporter.source.source_workload.web.response_code.503.response_flags.UF",
		"reporter=.=destination;.;source_workload=.=web;.;response_code=.=404;.;response_flags=.=NR;.;istio_requests_total",
		"reporter=.=source;.;source_workload=.=web;.;response_code=.=503;.;response_flags=.=UF;.;istio_requests_total",
	} {
		if re.MatchString(name) {
			t.Errorf("failures filter matches %q", name)
		}
	}

	ported := regexp.MustCompile(FailuresFilter(mesh.Selector{Ports: []int{9090}}))
	if ported.MatchString("cluster.inbound|8080||.upstream_cx_connect_fail") || !ported.MatchString("cluster.inbound|9090||.upstream_cx_connect_fail") {
		t.Error("port selection not applied to the failures filter")
	}
	generic := regexp.MustCompile(FailuresFilter(mesh.Selector{Clusters: []string{"local_app"}, HTTPPrefixes: []string{"public_listener"}}))
	for _, name := range []string{"cluster.local_app.upstream_cx_connect_fail", "cluster.local_app.upstream_rq_5xx", "http.public_listener.downstream_rq_5xx"} {
		if !generic.MatchString(name) {
			t.Errorf("generic failures filter does not match %q", name)
		}
	}
	if generic.MatchString("cluster.inbound|8080||.upstream_cx_connect_fail") {
		t.Error("a generic selection asks for Istio's inbound names")
	}
}

// The drain polls every 200ms with StatsFilter: asking status's failure stats must not have
// made that poll any larger.
func TestStatsFilterLeavesFailuresOut(t *testing.T) {
	for _, sel := range []mesh.Selector{{}, {Completions: true}, {Ports: []int{8080}}} {
		re := regexp.MustCompile(StatsFilter(sel))
		for _, name := range failureNames {
			if strings.Contains(name, "istio_requests_total") && sel.Completions {
				continue // every completion series, as before
			}
			if re.MatchString(name) {
				t.Errorf("StatsFilter(%+v) matches the failure stat %q", sel, name)
			}
		}
	}
}

func TestNormaliseFailuresIstio(t *testing.T) {
	snap := loadSnapshot(t, "failures-istio.prom", mesh.Selector{})
	byPort := map[int]mesh.Endpoint{}
	for _, e := range snap.Endpoints {
		byPort[*e.Port] = e
	}
	if len(byPort) != 2 {
		t.Fatalf("endpoints %v, want inbound 8080 and 9090 only", snap.Endpoints)
	}
	e := byPort[8080]
	for name, c := range map[string]struct{ got, want *float64 }{
		"http 5xx":      {e.HTTPServerErrorsTotal, f(10)},
		"cluster 5xx":   {e.ClusterServerErrorsTotal, f(10)}, // the class series only, not response_code="503"
		"UF":            {e.ConnectFailuresTotal, f(7)},
		"UC":            {e.ConnectionTerminationsTotal, f(1)},
		"UT":            {e.RequestTimeoutsTotal, f(0)},
		"UR":            {e.RemoteResetsTotal, f(0)},
		"9090 http 5xx": {byPort[9090].HTTPServerErrorsTotal, f(0)},
	} {
		if !eqPtr(c.got, c.want) {
			t.Errorf("%s = %s, want %s", name, show(c.got), show(c.want))
		}
	}
	if want := map[string]float64{"UF": 7, "UC": 1, "-": 2}; !maps.Equal(snap.CompletedServerErrors, want) {
		t.Errorf("completed 5xx by flag = %v, want %v (reporter=source left out)", snap.CompletedServerErrors, want)
	}
	if snap.Naming != mesh.NamingIstio {
		t.Errorf("naming %q", snap.Naming)
	}
}

func TestNormaliseFailuresNamings(t *testing.T) {
	cases := []struct {
		name, prom string
		sel        mesh.Selector
		http, clus *float64
	}{
		{"plain envoy: class digit, _xx left in the name", `# TYPE envoy_http_downstream_rq_xx counter
envoy_http_downstream_rq_xx{envoy_response_code_class="5",envoy_http_conn_manager_prefix="ingress_http"} 4
envoy_http_downstream_rq_xx{envoy_response_code_class="2",envoy_http_conn_manager_prefix="ingress_http"} 90
envoy_http_downstream_rq_xx{envoy_response_code_class="5",envoy_http_conn_manager_prefix="admin"} 1
# TYPE envoy_cluster_upstream_rq_xx counter
envoy_cluster_upstream_rq_xx{envoy_response_code_class="5",envoy_cluster_name="service_a"} 3
# TYPE envoy_cluster_upstream_rq counter
envoy_cluster_upstream_rq{envoy_response_code="503",envoy_cluster_name="service_a"} 3
`, mesh.Selector{Clusters: []string{"service_a"}, HTTPPrefixes: []string{"ingress_http"}}, f(4), f(3)},
		{"istio < 1.23: the prefix stays in the name, the class is extracted", `# TYPE envoy_http_inbound_0_0_0_0_8080_downstream_rq counter
envoy_http_inbound_0_0_0_0_8080_downstream_rq{response_code_class="5xx"} 6
envoy_http_inbound_0_0_0_0_8080_downstream_rq{response_code_class="2xx"} 60
# TYPE envoy_http_inbound_0_0_0_0_8080_downstream_rq_total counter
envoy_http_inbound_0_0_0_0_8080_downstream_rq_total{} 66
`, mesh.Selector{}, f(6), nil},
		{"istio 1.23.0: the double underscore", `# TYPE envoy_http__downstream_rq counter
envoy_http__downstream_rq{response_code_class="5xx",http_conn_manager_prefix="inbound_0.0.0.0_8080"} 2
`, mesh.Selector{}, f(2), nil},
		{"a bootstrap without the class tag leaves _5xx in the name", `# TYPE envoy_http_downstream_rq_5xx counter
envoy_http_downstream_rq_5xx{http_conn_manager_prefix="inbound_0.0.0.0_8080"} 5
# TYPE envoy_cluster_upstream_rq_5xx counter
envoy_cluster_upstream_rq_5xx{cluster_name="inbound|8080||"} 5
`, mesh.Selector{}, f(5), f(5)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			snap, err := Parse(strings.NewReader(c.prom), c.sel)
			if err != nil {
				t.Fatal(err)
			}
			if len(snap.Endpoints) != 1 {
				t.Fatalf("endpoints %+v, want one", snap.Endpoints)
			}
			e := snap.Endpoints[0]
			if !eqPtr(e.HTTPServerErrorsTotal, c.http) || !eqPtr(e.ClusterServerErrorsTotal, c.clus) {
				t.Errorf("http 5xx %s cluster 5xx %s, want %s %s", show(e.HTTPServerErrorsTotal), show(e.ClusterServerErrorsTotal), show(c.http), show(c.clus))
			}
		})
	}
}

// Envoy's own integration test output: a 4xx class series is no 5xx, and unknown stays nil.
func TestNormaliseFailuresEnvoyIntegrationOutput(t *testing.T) {
	snap := loadSnapshot(t, "envoy-integration-admin-rq-xx.prom", mesh.Selector{HTTPPrefixes: []string{"admin"}})
	if len(snap.Endpoints) != 1 || snap.Endpoints[0].HTTPServerErrorsTotal != nil {
		t.Errorf("endpoints %+v: want admin with its 5xx unknown (only the 4xx class is in the answer)", snap.Endpoints)
	}
	if snap.Naming != mesh.NamingEnvoy {
		t.Errorf("naming %q", snap.Naming)
	}
}

// The public Istio 1.7.1 answer has a DC with response_code 0 and 200s: no 5xx, so nil.
func TestNormaliseFailuresIstio17NoServerErrors(t *testing.T) {
	snap := loadSnapshot(t, "istio-1.16.prom", mesh.Selector{})
	if snap.CompletedServerErrors != nil {
		t.Errorf("completed 5xx %v from a dump with none", snap.CompletedServerErrors)
	}
	if snap = loadSnapshot(t, "istio-default.prom", mesh.Selector{}); !maps.Equal(snap.CompletedServerErrors, map[string]float64{"UF": 5}) {
		t.Errorf("completed 5xx %v, want UF 5", snap.CompletedServerErrors)
	}
}
