package lag

import (
	"math"
	"os"
	"strings"
	"testing"
)

func readHistogramFile(t *testing.T, path, name string) Histogram {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h, err := ReadHistogram(f, name)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return h
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func TestReadHistogramKubeProxyScrape(t *testing.T) {
	h := readHistogramFile(t, "testdata/kube-proxy-1.29.metrics", KubeProxyProgramming)
	// 0, 0.25 … 4, 5 … 60, 65 … 120, 150 … 300, +Inf.
	if len(h.Buckets) != 82 || h.Count() != 2 || len(h.SeriesCounts) != 1 {
		t.Fatalf("%d buckets, count %v, %d series; want 82, 2, 1", len(h.Buckets), h.Count(), len(h.SeriesCounts))
	}
	if b := h.Buckets[2]; b.UpperBound != 0.5 || b.Count != 1 {
		t.Errorf("third bucket %+v, want le=0.5 holding 1", b)
	}
	for _, tc := range []struct{ q, want float64 }{{0.5, 0.5}, {0.25, 0.375}, {1, 5}} {
		got, tail, err := h.Quantile(tc.q)
		if err != nil || tail || !near(got, tc.want) {
			t.Errorf("Quantile(%v) = %v, tail %v, %v; want %v", tc.q, got, tail, err, tc.want)
		}
	}
	sum := h.Summary(0.99)
	for _, want := range []string{"2 observations in 82 buckets over 1 series", "p99 4.98s", "too few samples for p99: 2, want at least 1000"} {
		if !strings.Contains(sum, want) {
			t.Errorf("summary %q\nlacks %q", sum, want)
		}
	}
}

func TestReadHistogramSumsSeries(t *testing.T) {
	// Two nodes in one federated scrape: buckets add as sum by (le) would.
	scrape := `# TYPE kubeproxy_network_programming_duration_seconds histogram
kubeproxy_network_programming_duration_seconds_bucket{instance="node-a",le="1"} 3
kubeproxy_network_programming_duration_seconds_bucket{instance="node-a",le="2"} 4
kubeproxy_network_programming_duration_seconds_bucket{instance="node-a",le="+Inf"} 4
kubeproxy_network_programming_duration_seconds_sum{instance="node-a"} 4
kubeproxy_network_programming_duration_seconds_count{instance="node-a"} 4
kubeproxy_network_programming_duration_seconds_bucket{instance="node-b",le="1"} 1
kubeproxy_network_programming_duration_seconds_bucket{instance="node-b",le="2"} 5
kubeproxy_network_programming_duration_seconds_bucket{instance="node-b",le="+Inf"} 6
kubeproxy_network_programming_duration_seconds_sum{instance="node-b"} 12
kubeproxy_network_programming_duration_seconds_count{instance="node-b"} 6
`
	h, err := ReadHistogram(strings.NewReader(scrape), KubeProxyProgramming)
	if err != nil {
		t.Fatal(err)
	}
	want := []Bucket{{1, 4}, {2, 9}, {math.Inf(1), 10}}
	if len(h.Buckets) != len(want) {
		t.Fatalf("buckets %+v, want %+v", h.Buckets, want)
	}
	for i := range want {
		if h.Buckets[i] != want[i] {
			t.Errorf("bucket %d: %+v, want %+v", i, h.Buckets[i], want[i])
		}
	}
	if h.SeriesCounts[`{instance="node-a"}`] != 4 || h.SeriesCounts[`{instance="node-b"}`] != 6 {
		t.Errorf("series counts %v, want node-a 4, node-b 6", h.SeriesCounts)
	}
	if sum := h.Summary(0.5); !strings.Contains(sum, `over 2 series ({instance="node-a"} 4, {instance="node-b"} 6)`) {
		t.Errorf("summary %q lacks the per-series counts", sum)
	}
}

func TestReadHistogramPrometheusAPI(t *testing.T) {
	for _, path := range []string{"testdata/prometheus-api-bucket-vector.json", "testdata/prometheus-api-bucket-matrix.json"} {
		h := readHistogramFile(t, path, KubeProxyProgramming)
		wantCounts := []float64{0, 4, 12, 16, 19, 22}
		if len(h.Buckets) != len(wantCounts) {
			t.Fatalf("%s: buckets %+v", path, h.Buckets)
		}
		for i, c := range wantCounts {
			if h.Buckets[i].Count != c {
				t.Errorf("%s: bucket %d %+v, want count %v (the last value of each series, summed)", path, i, h.Buckets[i], c)
			}
		}
		if got, tail, err := h.Quantile(0.5); err != nil || tail || !near(got, 0.9375) {
			t.Errorf("%s: Quantile(0.5) = %v, %v, %v; want 0.9375", path, got, tail, err)
		}
		// 19 of 22 observations are at or below 5 s: p90 (rank 19.8) is in the +Inf bucket.
		got, tail, err := h.Quantile(0.9)
		if err != nil || !tail || got != 5 {
			t.Errorf("%s: Quantile(0.9) = %v, tail %v, %v; want 5 in the tail", path, got, tail, err)
		}
		sum := h.Summary(0.9)
		for _, want := range []string{"22 observations in 6 buckets over 2 series", "a top bucket that holds the tail, the quantile is at least 5s", "too few samples for p90: 22, want at least 100"} {
			if !strings.Contains(sum, want) {
				t.Errorf("%s: summary %q\nlacks %q", path, sum, want)
			}
		}
	}
}

func TestReadHistogramRefuses(t *testing.T) {
	doc, err := os.ReadFile("testdata/prometheus-api-doc-vector.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, input, metric, want string }{
		// The documented answer to `up`: the shape reads, but it is not a _bucket series.
		{"documented up answer", string(doc), KubeProxyProgramming, "holds up, not " + KubeProxyProgramming + "_bucket"},
		{"documented shape without le", strings.ReplaceAll(string(doc), `"__name__" : "up",`, ""), "up", "without le"},
		{"error status", `{"status":"error","errorType":"bad_data","error":"parse error"}`, KubeProxyProgramming, `status "error": parse error`},
		{"scalar", `{"status":"success","data":{"resultType":"scalar","result":[1435781451.781,"1"]}}`, KubeProxyProgramming, "is a scalar"},
		{"missing metric", "# TYPE other counter\nother 1\n", KubeProxyProgramming, "has no " + KubeProxyProgramming},
		{"not a histogram", "# TYPE kubeproxy_network_programming_duration_seconds gauge\nkubeproxy_network_programming_duration_seconds 1\n", KubeProxyProgramming, "is a gauge"},
		{"no +Inf in the API answer", `{"status":"success","data":{"resultType":"vector","result":[{"metric":{"le":"1"},"value":[1,"3"]}]}}`, KubeProxyProgramming, "no +Inf bucket"},
	} {
		_, err := ReadHistogram(strings.NewReader(tc.input), tc.metric)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one containing %q", tc.name, err, tc.want)
		}
	}
}

// A real istiod page: the convergence histogram among istiod's other families, read by name.
func TestReadHistogramIstiodScrape(t *testing.T) {
	h := readHistogramFile(t, "testdata/istiod-1.5.metrics", IstiodConvergence)
	// 0.1, 0.5, 1, 3, 5, 10, 20, 30, +Inf: istiod's buckets.
	if len(h.Buckets) != 9 || h.Count() != 6 || len(h.SeriesCounts) != 1 {
		t.Fatalf("%d buckets, count %v, %d series; want 9, 6, 1", len(h.Buckets), h.Count(), len(h.SeriesCounts))
	}
	got, tail, err := h.Quantile(0.5)
	if err != nil || tail || !near(got, 0.05) {
		t.Errorf("Quantile(0.5) = %v, tail %v, %v; want 0.05 (all six pushes under 0.1 s)", got, tail, err)
	}
	page, err := os.ReadFile("testdata/istiod-1.5.metrics")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ReadHistogram(strings.NewReader(string(page)), KubeProxyProgramming); err == nil {
		t.Error("an istiod page read as kube-proxy's histogram")
	}
}
