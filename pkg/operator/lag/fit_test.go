package lag

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

func readSourceFile(t *testing.T, path string) []Source {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	srcs, err := ReadSource(path, f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return srcs
}

func wantWarning(t *testing.T, name string, warnings []string, want string) {
	t.Helper()
	for _, w := range warnings {
		if strings.Contains(w, want) {
			return
		}
	}
	t.Errorf("%s: warnings %q\nlack %q", name, warnings, want)
}

// TestReadSourceSniffs: each fixture is read as what it is, without being told.
func TestReadSourceSniffs(t *testing.T) {
	for _, tc := range []struct{ path, kind string }{
		{kubectlFixture, KindEvents},
		{"testdata/kube-proxy-1.29.metrics", KubeProxyProgramming},
		{"testdata/prometheus-api-bucket-vector.json", KubeProxyProgramming},
		{"testdata/prometheus-api-bucket-matrix.json", KubeProxyProgramming},
	} {
		srcs := readSourceFile(t, tc.path)
		if len(srcs) != 1 || srcs[0].Kind != tc.kind || srcs[0].Name != tc.path {
			t.Errorf("%s: sources %+v, want one of kind %s", tc.path, srcs, tc.kind)
		}
	}
	// A log line that names the metric is not a scrape.
	line := `{"level":"info","msg":"see kubeproxy_network_programming_duration_seconds_bucket","component":"other"}` + "\n"
	if srcs, err := ReadSource("app.log", strings.NewReader(line)); err != nil || srcs[0].Kind != KindEvents || srcs[0].Skipped.NotMeshdrain != 1 {
		t.Errorf("a log line naming the metric: %+v, %v; want a log export with one line skipped", srcs, err)
	}
	// A scrape holding both histograms gives both.
	both := "# TYPE pilot_proxy_convergence_time histogram\npilot_proxy_convergence_time_bucket{le=\"1\"} 3\npilot_proxy_convergence_time_bucket{le=\"+Inf\"} 3\n" +
		"# TYPE kubeproxy_network_programming_duration_seconds histogram\nkubeproxy_network_programming_duration_seconds_bucket{le=\"1\"} 1\nkubeproxy_network_programming_duration_seconds_bucket{le=\"+Inf\"} 1\n"
	if srcs, err := ReadSource("federate", strings.NewReader(both)); err != nil || len(srcs) != 2 || srcs[0].Kind != KubeProxyProgramming || srcs[1].Kind != IstiodConvergence {
		t.Errorf("a scrape of both: %+v, %v; want kube-proxy's and istiod's", srcs, err)
	}
	doc, err := os.ReadFile("testdata/prometheus-api-doc-vector.json")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ReadSource("up.json", strings.NewReader(string(doc))); err == nil || !strings.Contains(err.Error(), "neither "+KubeProxyProgramming) {
		t.Errorf("the documented answer to up: %v, want it refused as neither histogram", err)
	}
}

// TestFitKubectlEvents: two real drains, one cut by its deadline, fit as the two points they
// are, with the censoring and the lack of evidence said.
func TestFitKubectlEvents(t *testing.T) {
	fit, err := NewFit(readSourceFile(t, kubectlFixture), 0.999)
	if err != nil {
		t.Fatal(err)
	}
	if got := fit.Dist.String(); got != "0:2ms,1:1.815s" {
		t.Errorf("fit %s, want 0:2ms,1:1.815s (the least and the greatest lag: two drains support no inner quantile)", got)
	}
	s := fit.Summary
	if s.Drains != 2 || s.Clients != 2 || s.Nodes != 2 || s.Censored != 1 || s.Skipped.Total() != 15 || s.Observations != 2 {
		t.Errorf("summary %+v: want 2 drains, 2 clients, 2 pods as nodes, 1 censored, 15 skipped", s)
	}
	wantWarning(t, "events", fit.Warnings, "too few samples for p99.9: 2, want at least 10000")
	wantWarning(t, "events", fit.Warnings, "1 of 2 drains were cut")
	wantWarning(t, "events", fit.Warnings, "a lower bound on its lag")
}

// TestFitPrometheusAnswer: the API answer's buckets give the median PromQL gives (0.9375 s,
// rounded up to the ms), the top at the last finite bound with the +Inf bucket's warning.
func TestFitPrometheusAnswer(t *testing.T) {
	fit, err := NewFit(readSourceFile(t, "testdata/prometheus-api-bucket-vector.json"), 0.99)
	if err != nil {
		t.Fatal(err)
	}
	if got := fit.Dist.String(); got != "0:250ms,0.5:938ms,1:5s" {
		t.Errorf("fit %s, want 0:250ms,0.5:938ms,1:5s", got)
	}
	if s := fit.Summary; s.Nodes != 2 || s.Tail != 3 || s.Observations != 22 || s.Drains != 0 {
		t.Errorf("summary %+v: want 2 nodes (instances), 3 in the tail, 22 observations", s)
	}
	if from := fit.Points[len(fit.Points)-1].From; !strings.Contains(from, "+Inf bucket holds observations") {
		t.Errorf("top point from %q, want it named a lower bound", from)
	}
	wantWarning(t, "api", fit.Warnings, "3 histogram observations are past the last finite bucket bound 5s")
	wantWarning(t, "api", fit.Warnings, "too few samples for p99: 22, want at least 1000")
}

// TestFitMixedSources: a log export and a histogram pool into one distribution.
func TestFitMixedSources(t *testing.T) {
	srcs := append(readSourceFile(t, kubectlFixture), readSourceFile(t, "testdata/kube-proxy-1.29.metrics")...)
	fit, err := NewFit(srcs, 0.999)
	if err != nil {
		t.Fatal(err)
	}
	// 2 ms, 1.815 s, and the scrape's (0.25, 0.5] and (4, 5]: from 2 ms to 5 s.
	if got := fit.Dist.String(); got != "0:2ms,1:5s" {
		t.Errorf("fit %s, want 0:2ms,1:5s", got)
	}
	if s := fit.Summary; s.Observations != 4 || s.Nodes != 3 || s.Drains != 2 {
		t.Errorf("summary %+v: want 4 observations, 3 nodes (2 pods, 1 unlabelled scrape), 2 drains", s)
	}
}

// TestFitPointsWhereSupported: a point only at a quantile with MinSamples observations.
func TestFitPointsWhereSupported(t *testing.T) {
	var b strings.Builder
	for i := 1; i <= 1000; i++ {
		fmt.Fprintf(&b, `{"component":"prestop","msg":"drain finished","reason":"quiet","last_arrival_ms":%d}`+"\n", i)
	}
	srcs, err := ReadSource("drains.json", strings.NewReader(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	fit, err := NewFit(srcs, 0.999)
	if err != nil {
		t.Fatal(err)
	}
	if got := fit.Dist.String(); got != "0:1ms,0.5:500ms,0.9:900ms,0.99:990ms,1:1s" {
		t.Errorf("fit %s: want p50, p90, p99 (1000 observations) and no p99.9 (10000 needed)", got)
	}
	if fit.Summary.Nodes != 0 {
		t.Errorf("nodes %d: lines without a kubectl prefix name none", fit.Summary.Nodes)
	}
	if got := fit.Dist.Quantile(0.995); got < 990*time.Millisecond || got > time.Second {
		t.Errorf("Quantile(0.995) %v, want between p99 and the greatest", got)
	}
	if _, err := NewFit(nil, 0.999); err == nil {
		t.Error("a fit of nothing: no error")
	}
}

// TestHistogramNodes: the node label names a series' node before its instance; a series with
// neither is one unnamed node.
func TestHistogramNodes(t *testing.T) {
	h := Histogram{SeriesCounts: map[string]float64{`{instance="10.0.0.1:10249",node="a"}`: 1, `{instance="10.0.0.2:10249"}`: 1, `{job="kube-proxy"}`: 1}}
	if got := strings.Join(h.Nodes(), "|"); got != "|10.0.0.2:10249|a" {
		t.Errorf("nodes %q, want \"\", 10.0.0.2:10249, a", got)
	}
}

// Drains that list their clients give a sample per client: the summary counts the drains
// and the clients apart (three final events, 83 clients: 50 of the Istio drain, 32 listed).
func TestFitCountsDrainsAndClientsApart(t *testing.T) {
	fit, err := NewFit(readSourceFile(t, "testdata/meshdrain-final-events.jsonl"), 0.99)
	if err != nil {
		t.Fatal(err)
	}
	if s := fit.Summary; s.Drains != 3 || s.Clients != 83 || s.Censored != 1 {
		t.Errorf("%d drains, %d clients, %d censored; want 3, 83, 1 (the meshless drain, cut by its lag bound)", s.Drains, s.Clients, s.Censored)
	}
}
