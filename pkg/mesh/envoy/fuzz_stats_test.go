package envoy

import (
	"bytes"
	"math"
	"regexp"
	"testing"

	"github.com/meshdrain/meshdrain/pkg/mesh"
)

// FuzzParse runs arbitrary bytes through the Prometheus parser and the normaliser for each
// kind of selection. Whatever Envoy (or something pretending to be it) sends, parsing must
// return, never panic, and never yield a value that is not a number or a negative count of
// endpoints. Seeds: testdata/fuzz/FuzzParse, real and emulated Envoy answers.
func FuzzParse(f *testing.F) {
	f.Add([]byte("# TYPE envoy_http_downstream_rq_total counter\nenvoy_http_downstream_rq_total{http_conn_manager_prefix=\"inbound_0.0.0.0_8080\"} 12 \n"))
	f.Add([]byte("# TYPE envoy_http_inbound_0_0_0_0_8080_downstream_rq_active gauge\nenvoy_http_inbound_0_0_0_0_8080_downstream_rq_active{} 1\n"))
	selectors := []mesh.Selector{
		{},
		{Ports: []int{8080, 9090}},
		{Completions: true},
		{Clusters: []string{"local_app"}, HTTPPrefixes: []string{"public_listener"}},
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, sel := range selectors {
			snap, err := Parse(bytes.NewReader(data), sel)
			if err != nil {
				return
			}
			r := snap.Read()
			for _, v := range []*float64{r.Arrivals, r.Active, r.Connections, snap.AdminRequestsTotal, snap.CompletedRequestsTotal} {
				if v != nil && math.IsNaN(*v) {
					t.Fatalf("NaN in %+v", r)
				}
			}
			if r.Signal == mesh.SignalNone && (r.Arrivals != nil || r.Active != nil) {
				t.Fatalf("no signal, but values: %+v", r)
			}
		}
	})
}

// FuzzStatsFilter checks that whatever names a user gives (--cluster, --http-prefix) and
// whatever ports, a selection that Validate accepts yields a filter that is a valid RE2
// regex and still matches the selected names literally.
func FuzzStatsFilter(f *testing.F) {
	f.Add("local_app", "public_listener", 8080)
	f.Add("a.b|c(d)*", "[x]", 1)
	f.Fuzz(func(t *testing.T, cluster, prefix string, port int) {
		for _, sel := range []mesh.Selector{{Ports: []int{port}}, {Clusters: []string{cluster}, HTTPPrefixes: []string{prefix}}} {
			if sel.Validate() != nil {
				continue
			}
			re, err := regexp.Compile(StatsFilter(sel))
			if err != nil {
				t.Fatalf("filter for %+v does not compile: %v", sel, err)
			}
			if len(sel.Clusters) > 0 && !re.MatchString("cluster."+cluster+".upstream_rq_total") {
				t.Fatalf("filter for cluster %q does not match its stat", cluster)
			}
		}
	})
}
