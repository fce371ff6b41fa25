package envoysim

import (
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/meshdrain/meshdrain/pkg/clock/clocktest"
)

// render renders one store's stats with a query, as the admin API would.
func render(t *testing.T, st *store, query string, format statsFormat) string {
	t.Helper()
	p, bad := parseStatsParams(queryParams(query), format)
	if bad != "" {
		t.Fatalf("params %q: %s", query, bad)
	}
	body, _ := renderStats(st.all(), p)
	return string(body)
}

func hasLine(body, line string) bool {
	for _, l := range strings.Split(body, "\n") {
		if l == line {
			return true
		}
	}
	return false
}

// TestNamingEnvoyDomainExamples pins plain Envoy's names to docs/facts.md §3, byte for byte.
func TestNamingEnvoyDomainExamples(t *testing.T) {
	cfg, _ := Config{Profile: ProfileEnvoy}.withDefaults()
	st := newStore(newTagExtractor(ProfileEnvoy), inclusionFunc(cfg))
	st.counter("cluster.service_a.upstream_rq_total").add(42)
	st.gauge("cluster.service_a.upstream_rq_active").set(1)
	st.gauge("cluster.service_a.upstream_cx_active").set(2)
	st.counter("http.ingress_http.downstream_rq_total").add(40)
	st.gauge("http.ingress_http.downstream_rq_active").set(1)
	st.gauge("listener.0.0.0.0_10000.downstream_cx_active").set(3)
	st.gauge("listener.0.0.0.0_10000.worker_0.downstream_cx_active").set(2)
	st.gauge("listener.0.0.0.0_2015.worker_0.downstream_cx_active").set(0)
	st.counter("cluster.service_a.upstream_rq_5xx").add(1)
	st.counter("cluster.service_a.upstream_rq_503").add(1)

	text := render(t, st, "", formatText)
	for _, line := range []string{
		"cluster.service_a.upstream_rq_total: 42",
		"cluster.service_a.upstream_rq_active: 1",
		"cluster.service_a.upstream_cx_active: 2",
		"http.ingress_http.downstream_rq_total: 40",
		"http.ingress_http.downstream_rq_active: 1",
		"listener.0.0.0.0_10000.downstream_cx_active: 3",
		"listener.0.0.0.0_10000.worker_0.downstream_cx_active: 2",
	} {
		if !hasLine(text, line) {
			t.Errorf("text lacks %q:\n%s", line, text)
		}
	}
	prom := render(t, st, "", formatPrometheus)
	for _, line := range []string{
		`envoy_cluster_upstream_rq_total{envoy_cluster_name="service_a"} 42`,
		`envoy_http_downstream_rq_active{envoy_http_conn_manager_prefix="ingress_http"} 1`,
		`envoy_listener_downstream_cx_active{envoy_listener_address="0.0.0.0_10000"} 3`,
		`envoy_listener_worker_0_downstream_cx_active{envoy_listener_address="0.0.0.0_2015"} 0`,
		`envoy_cluster_upstream_rq_xx{envoy_cluster_name="service_a",envoy_response_code_class="5"} 1`,
		`envoy_cluster_upstream_rq{envoy_cluster_name="service_a",envoy_response_code="503"} 1`,
		"# TYPE envoy_cluster_upstream_rq_total counter",
		"# TYPE envoy_http_downstream_rq_active gauge",
	} {
		if !hasLine(prom, line) {
			t.Errorf("prometheus lacks %q:\n%s", line, prom)
		}
	}
	if strings.Contains(prom, "# HELP") {
		t.Error("Envoy writes no HELP lines")
	}
	// Counters first, then gauges.
	if strings.Index(prom, " gauge\n") < strings.LastIndex(prom, " counter\n") {
		t.Errorf("gauge family before a counter family:\n%s", prom)
	}
}

// TestNamingIstioDomainExamples pins Istio >= 1.23 names to docs/facts.md §3.
func TestNamingIstioDomainExamples(t *testing.T) {
	cfg, _ := Config{}.withDefaults()
	st := newStore(newTagExtractor(ProfileIstio), inclusionFunc(cfg))
	n := namer{profile: ProfileIstio, bind: "0.0.0.0"}
	st.counter(n.cluster("inbound|8080||", "upstream_rq_total")).add(7)
	st.gauge(n.http("inbound_0.0.0.0_8080", "downstream_rq_active")).set(1)
	st.gauge("listener.0.0.0.0_15006.worker_0.downstream_cx_active").set(0)
	st.gauge("listener.0.0.0.0_15006.downstream_cx_active").set(2)
	pod := namer{profile: ProfileIstio, bind: "10.38.36.249"}
	st.counter(pod.http("inbound_10.38.36.249_8080", "downstream_rq_total")).add(5)

	text := render(t, st, "", formatText)
	for _, line := range []string{
		"cluster.inbound|8080||;.upstream_rq_total: 7",
		"http.inbound_0.0.0.0_8080;.downstream_rq_active: 1",
		"http.inbound_10.38.36.249_8080;.downstream_rq_total: 5",
	} {
		if !hasLine(text, line) {
			t.Errorf("text lacks %q:\n%s", line, text)
		}
	}
	prom := render(t, st, "", formatPrometheus)
	for _, line := range []string{
		`envoy_cluster_upstream_rq_total{cluster_name="inbound|8080||"} 7`,
		`envoy_http_downstream_rq_active{http_conn_manager_prefix="inbound_0.0.0.0_8080"} 1`,
		`envoy_http_downstream_rq_total{http_conn_manager_prefix="inbound_10.38.36.249_8080"} 5`,
		`envoy_listener_worker_0_downstream_cx_active{listener_address="0.0.0.0_15006"} 0`,
		`envoy_listener_downstream_cx_active{listener_address="0.0.0.0_15006"} 2`,
	} {
		if !hasLine(prom, line) {
			t.Errorf("prometheus lacks %q:\n%s", line, prom)
		}
	}
}

// TestNamingIstioLegacyDomainExamples pins Istio < 1.23 names to docs/facts.md §3.
func TestNamingIstioLegacyDomainExamples(t *testing.T) {
	cfg, _ := Config{Profile: ProfileIstioLegacy}.withDefaults()
	st := newStore(newTagExtractor(ProfileIstioLegacy), inclusionFunc(cfg))
	n := namer{profile: ProfileIstioLegacy, bind: "0.0.0.0"}
	st.gauge(n.http("inbound_0.0.0.0_8080", "downstream_rq_active")).set(1)
	st.counter(n.cluster("inbound|80||", "ratelimit_ok")).add(904)
	st.counter(n.cluster("outbound|80||reviews.default.svc.cluster.local", "upstream_rq_total")).add(3)

	text := render(t, st, "", formatText)
	if !hasLine(text, "http.inbound_0.0.0.0_8080.downstream_rq_active: 1") || !hasLine(text, "cluster.inbound|80||.ratelimit_ok: 904") {
		t.Errorf("text:\n%s", text)
	}
	prom := render(t, st, "", formatPrometheus)
	for _, line := range []string{
		`envoy_http_inbound_0_0_0_0_8080_downstream_rq_active{} 1`,
		`envoy_cluster_ratelimit_ok{cluster_name="inbound|80||"} 904`,
		`envoy_cluster_upstream_rq_total{cluster_name="outbound|80||reviews.default.svc.cluster.local"} 3`,
	} {
		if !hasLine(prom, line) {
			t.Errorf("prometheus lacks %q:\n%s", line, prom)
		}
	}
}

// TestFilterMatchesEnvoyNameNotPrometheusName pins envoyproxy/envoy#10927: filter is a partial
// RE2 match on the Envoy stat name, in every format.
func TestFilterMatchesEnvoyNameNotPrometheusName(t *testing.T) {
	cfg, _ := Config{}.withDefaults()
	st := newStore(newTagExtractor(ProfileIstio), inclusionFunc(cfg))
	n := namer{profile: ProfileIstio, bind: "0.0.0.0"}
	st.counter(n.cluster("inbound|8080||", "upstream_rq_total")).add(7)
	st.counter(n.http("inbound_0.0.0.0_8080", "downstream_rq_total")).add(9)

	want := `envoy_cluster_upstream_rq_total{cluster_name="inbound|8080||"} 7`
	if got := render(t, st, "filter="+urlQuery(`cluster\.inbound\|8080\|\|;\.upstream_rq_total`), formatPrometheus); !hasLine(got, want) {
		t.Errorf("filter on the Envoy name: %q", got)
	}
	if got := render(t, st, "filter=envoy_cluster_upstream_rq_total", formatPrometheus); got != "" {
		t.Errorf("filter on the Prometheus name matched: %q", got)
	}
	// Partial match: no anchors needed.
	if got := render(t, st, "filter=rq_total", formatText); strings.Count(got, "\n") != 2 {
		t.Errorf("partial match: %q", got)
	}
	// "+" in a filter stays a regex "+", as Envoy decodes only %XX.
	if got := render(t, st, "filter=down+stream_rq_total", formatText); !hasLine(got, "http.inbound_0.0.0.0_8080;.downstream_rq_total: 9") {
		t.Errorf("plus in filter: %q", got)
	}
}

// TestNamingLiveTrafficAllProfiles checks the names the inbound proxy really moves.
func TestNamingLiveTrafficAllProfiles(t *testing.T) {
	app := startApp(t, nil)
	cases := []struct {
		profile Profile
		text    []string
		prom    []string
	}{
		{ProfileEnvoy,
			[]string{"http.ingress_http.downstream_rq_total: 1", "cluster.service_a.upstream_rq_total: 1", "listener.0.0.0.0_8080.downstream_cx_total: 1"},
			[]string{`envoy_http_downstream_rq_total{envoy_http_conn_manager_prefix="ingress_http"} 1`, `envoy_cluster_upstream_rq_total{envoy_cluster_name="service_a"} 1`}},
		{ProfileIstio,
			[]string{"http.inbound_0.0.0.0_8080;.downstream_rq_total: 1", "cluster.inbound|8080||;.upstream_rq_total: 1", "listener.0.0.0.0_15006.downstream_cx_total: 1"},
			[]string{`envoy_http_downstream_rq_total{http_conn_manager_prefix="inbound_0.0.0.0_8080"} 1`, `envoy_cluster_upstream_rq_total{cluster_name="inbound|8080||"} 1`}},
		{ProfileIstioLegacy,
			[]string{"http.inbound_0.0.0.0_8080.downstream_rq_total: 1", "cluster.inbound|8080||.upstream_rq_total: 1"},
			[]string{`envoy_http_inbound_0_0_0_0_8080_downstream_rq_total{} 1`, `envoy_cluster_upstream_rq_total{cluster_name="inbound|8080||"} 1`}},
	}
	for _, tc := range cases {
		t.Run(string(tc.profile), func(t *testing.T) {
			s := startSidecar(t, Config{Profile: tc.profile}, appAddr(app))
			resp, err := http.Get("http://" + s.InboundAddr(8080) + "/hello")
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			_, text := adminDo(t, s, "GET", "/stats")
			for _, line := range tc.text {
				if !hasLine(text, line) {
					t.Errorf("text lacks %q", line)
				}
			}
			_, prom := adminDo(t, s, "GET", "/stats/prometheus")
			for _, line := range tc.prom {
				if !hasLine(prom, line) {
					t.Errorf("prometheus lacks %q", line)
				}
			}
		})
	}
}

// TestInclusionIstioDefault: inbound stats vanish; istio_requests_total is counted when the
// request completes.
func TestInclusionIstioDefault(t *testing.T) {
	release := make(chan struct{})
	app := startApp(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			<-release
		}
		_, _ = io.WriteString(w, "ok")
	})
	s := startSidecar(t, Config{Inclusion: InclusionIstioDefault}, appAddr(app))
	done := make(chan struct{})
	go func() {
		defer close(done)
		resp, err := http.Get("http://" + s.InboundAddr(8080) + "/slow")
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}()
	clocktest.Eventually(t, "request in flight at the app", func() bool { return s.inbound[0].(*inboundListener).upRqActive == nil || len(s.AccessLog()) == 0 })
	_, text := adminDo(t, s, "GET", "/stats")
	for _, absent := range []string{"cluster.inbound|", "http.inbound_", "listener.0.0.0.0_15006", "http.admin."} {
		if strings.Contains(text, absent) {
			t.Errorf("%q present under istio-default inclusion", absent)
		}
	}
	if strings.Contains(text, "istio_requests_total") {
		t.Error("istio_requests_total counted before the request completed")
	}
	close(release)
	<-done
	clocktest.Eventually(t, "istio_requests_total", func() bool {
		_, prom := adminDo(t, s, "GET", "/stats/prometheus")
		return regexp.MustCompile(`(?m)^istio_requests_total\{reporter="destination",.*response_code="200".*\} 1$`).MatchString(prom)
	})
	_, text = adminDo(t, s, "GET", "/stats?filter=istio_requests_total")
	if !strings.HasPrefix(text, "istiocustom.istio_requests_total.reporter.destination.source_workload.unknown.") {
		t.Errorf("text name: %q", text)
	}
	if !strings.Contains(text, "grpc_response_status.response_flags.-.") {
		t.Errorf("an empty tag value must leave only its name: %q", text)
	}
	// Still there: server.*, cluster.xds-grpc.*.
	if !strings.Contains(text+mustStats(t, s), "server.state: 0") {
		t.Error("server.state missing")
	}
}

func mustStats(t *testing.T, s *Sidecar) string {
	_, text := adminDo(t, s, "GET", "/stats")
	return text
}

func TestExtraClustersMakeBigStats(t *testing.T) {
	s := startSidecar(t, Config{ExtraClusters: 5000}, "")
	text := mustStats(t, s)
	if lines := strings.Count(text, "\n"); lines < 100000 {
		t.Errorf("unfiltered /stats has %d lines, want >= 100000", lines)
	}
	if !hasLine(text, "cluster.outbound|8080||svc-00042.ns-042.svc.cluster.local;.membership_healthy: 3") {
		t.Error("extra cluster stat missing")
	}
}
