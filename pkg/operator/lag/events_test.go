package lag

import (
	"encoding/json"
	"math"
	"os"
	"strings"
	"testing"
)

const kubectlFixture = "testdata/kubectl-logs-prefix-timestamps.log"

// fixtureLines are the kubectl fixture's lines, and the same lines as the container wrote
// them (no prefix, no timestamp): what the other exports wrap.
func fixtureLines(t *testing.T) (prefixed, bare []string) {
	t.Helper()
	data, err := os.ReadFile(kubectlFixture)
	if err != nil {
		t.Fatal(err)
	}
	prefixed = strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	for _, l := range prefixed {
		l = kubectlPrefix.ReplaceAllString(l, "")
		bare = append(bare, rfc3339Stamp.ReplaceAllString(l, ""))
	}
	return prefixed, bare
}

// wantFixture checks the two drains of the kubectl fixture: a quiet one that stopped 2 ms
// after its last arrival under a 2 s lag bound, and one the deadline cut at 1,815 ms.
func wantFixture(t *testing.T, name string, got Samples, skipped Skipped, withSource bool, wantNotMeshdrain int) {
	t.Helper()
	if len(got) != 2 {
		t.Fatalf("%s: %d samples, want 2: %+v (skipped %+v)", name, len(got), got, skipped)
	}
	quiet, cut := got[0], got[1]
	if quiet.Seconds != 0.002 || quiet.Reason != "quiet" || quiet.Censored || quiet.CutBy != "" || quiet.Evidence != EvidenceLastArrival || quiet.LagBound != 2 {
		t.Errorf("%s: first drain %+v, want 0.002 s of last-arrival, quiet, uncensored, lag bound 2 s", name, quiet)
	}
	if cut.Seconds != 1.815 || cut.Reason != "deadline" || !cut.Censored || cut.CutBy != CutDeadline {
		t.Errorf("%s: second drain %+v, want 1.815 s censored by the deadline", name, cut)
	}
	if quiet.Mesh != "none" || cut.Mesh != "none" {
		t.Errorf("%s: meshes %q, %q, want none from the drain started events", name, quiet.Mesh, cut.Mesh)
	}
	wantSource := ""
	if withSource {
		wantSource = "pod/web-7c9d6b5f4-k2x8p/app"
	}
	if quiet.Source != wantSource {
		t.Errorf("%s: source %q, want %q", name, quiet.Source, wantSource)
	}
	// 6 + 7 other meshdrain events (drain started, phases, inbound discovered, the sparse
	// traffic warning), 2 access log lines.
	if skipped.OtherEvents != 13 || skipped.NotMeshdrain != wantNotMeshdrain || skipped.Malformed != 0 {
		t.Errorf("%s: skipped %+v, want 13 other events, %d not meshdrain's", name, skipped, wantNotMeshdrain)
	}
}

func TestReadEventsKubectlFormats(t *testing.T) {
	prefixed, bare := fixtureLines(t)
	var timestampsOnly, prefixOnly []string
	for _, l := range prefixed {
		m := kubectlPrefix.FindString(l)
		timestampsOnly = append(timestampsOnly, strings.TrimPrefix(l, m))
		prefixOnly = append(prefixOnly, m+rfc3339Stamp.ReplaceAllString(strings.TrimPrefix(l, m), ""))
	}
	for _, tc := range []struct {
		name       string
		lines      []string
		withSource bool
	}{
		{"--prefix --timestamps", prefixed, true},
		{"--timestamps", timestampsOnly, false},
		{"--prefix", prefixOnly, true},
		{"plain", bare, false},
	} {
		got, skipped, err := ReadEvents(strings.NewReader(strings.Join(tc.lines, "\n") + "\n"))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		wantFixture(t, tc.name, got, skipped, tc.withSource, 2)
	}
}

func TestReadEventsWrappedExports(t *testing.T) {
	_, bare := fixtureLines(t)
	mustJSON := func(v any) string {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	var loki, cloudWatchLines, dockerLines, syslog []string
	var cwEvents, esHits []any
	for i, l := range bare {
		// logcli query --output=jsonl
		loki = append(loki, mustJSON(map[string]any{"labels": map[string]string{"app": "web", "container": "app"}, "line": l, "timestamp": "2026-12-07T04:18:12.353609324Z"}))
		cloudWatchLines = append(cloudWatchLines, mustJSON(map[string]any{"timestamp": 1796617092353 + i, "message": l, "ingestionTime": 1796617093000}))
		cwEvents = append(cwEvents, map[string]any{"logStreamName": "kubernetes/web", "timestamp": 1796617092353 + i, "message": l, "ingestionTime": 1796617093000, "eventId": "3763" + string(rune('0'+i%10))})
		esHits = append(esHits, map[string]any{"_index": "logs-2026.12.07", "_id": "a" + string(rune('a'+i)), "_score": 1.0, "_source": map[string]any{"@timestamp": "2026-12-07T04:18:12.353Z", "kubernetes": map[string]any{"pod": map[string]any{"name": "web"}}, "message": l}})
		dockerLines = append(dockerLines, mustJSON(map[string]any{"log": l + "\n", "stream": "stderr", "time": "2026-12-07T04:18:12.353609324Z"}))
		syslog = append(syslog, "Dec  7 04:18:12 node-1 web[4711]: "+l)
	}
	cloudWatchDoc := mustJSON(map[string]any{"events": cwEvents, "searchedLogStreams": []any{map[string]any{"logStreamName": "kubernetes/web", "searchedCompletely": true}}})
	esDoc, _ := json.MarshalIndent(map[string]any{"took": 3, "timed_out": false, "hits": map[string]any{"total": map[string]any{"value": len(esHits), "relation": "eq"}, "hits": esHits}}, "", "  ")
	for _, tc := range []struct{ name, export string }{
		{"Loki JSON lines", strings.Join(loki, "\n")},
		{"CloudWatch JSON lines", strings.Join(cloudWatchLines, "\n")},
		{"CloudWatch filter-log-events", cloudWatchDoc},
		{"Elasticsearch search answer", string(esDoc)},
		{"Docker json-file", strings.Join(dockerLines, "\n")},
		{"syslog prefix", strings.Join(syslog, "\n")},
	} {
		got, skipped, err := ReadEvents(strings.NewReader(tc.export))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		wantFixture(t, tc.name, got, skipped, false, 2)
	}
}

func TestReadEventsElasticsearchLogField(t *testing.T) {
	_, bare := fixtureLines(t)
	var b strings.Builder
	for _, l := range bare {
		hit, _ := json.Marshal(map[string]any{"_source": map[string]any{"log": l + "\n"}})
		b.Write(hit)
		b.WriteByte('\n')
	}
	got, skipped, err := ReadEvents(strings.NewReader(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	wantFixture(t, "_source.log", got, skipped, false, 2)
}

func TestReadEventsCountsWhatIsNotMeshdrains(t *testing.T) {
	export := strings.Join([]string{
		`plain text from the app`,
		`{"level":"info","msg":"GET /","status":200}`,        // the app's own JSON: no component
		`{"level":"info","msg":"phase","component":"other"}`, // another program's component
		`[pod/web-1/app] 2026-12-07T04:18:12Z {"level":"info","msg":"drain finished","component":"prestop","reason":"quiet"}`, // no last_arrival_ms
		`{"level":"info","msg":"drain finished","component":"prestop","reason":"quiet","last_arrival_ms":"soon"}`,
		`{"level":"info","msg":"drain finished","component":"prestop","reason":"quiet","last_arrival_ms":2500,"window_term":"lag-bound","mesh":"istio","lag_bound_ms":3000}`,
		`{"level":"info","msg":"phase","component":"prestop","phase":"watch"}`,
		`{"broken json`,
	}, "\n")
	got, skipped, err := ReadEvents(strings.NewReader(export))
	if err != nil {
		t.Fatal(err)
	}
	want := Skipped{NotMeshdrain: 4, OtherEvents: 1, Malformed: 2}
	if skipped != want || skipped.Total() != 7 {
		t.Errorf("skipped %+v (total %d), want %+v", skipped, skipped.Total(), want)
	}
	if len(got) != 1 {
		t.Fatalf("samples %+v, want the lag-bound one", got)
	}
	if s := got[0]; s.Seconds != 2.5 || !s.Censored || s.CutBy != CutLagBound || s.Mesh != "istio" || s.LagBound != 3 {
		t.Errorf("sample %+v, want 2.5 s censored by the lag bound, mesh istio from the event, bound 3 s", s)
	}
}

func TestSamplesQuantile(t *testing.T) {
	var s Samples
	for i := 10; i >= 1; i-- { // unsorted on purpose
		s = append(s, Sample{Seconds: float64(i)})
	}
	for _, tc := range []struct{ q, want float64 }{{0.1, 1}, {0.5, 5}, {0.9, 9}, {0.95, 10}, {1, 10}} {
		got, err := s.Quantile(tc.q)
		if err != nil || got != tc.want {
			t.Errorf("Quantile(%v) = %v, %v; want %v", tc.q, got, err, tc.want)
		}
	}
	if _, err := (Samples{}).Quantile(0.5); err == nil {
		t.Error("Quantile of no samples: want an error")
	}
	if _, err := s.Quantile(0); err == nil {
		t.Error("Quantile(0): want an error")
	}
}

func TestMinSamples(t *testing.T) {
	for _, tc := range []struct {
		q    float64
		want int
	}{{0.5, 20}, {0.9, 100}, {0.99, 1000}, {0.999, 10000}, {1, math.MaxInt}} {
		if got := MinSamples(tc.q); got != tc.want {
			t.Errorf("MinSamples(%v) = %d, want %d", tc.q, got, tc.want)
		}
	}
}

func TestSamplesSummary(t *testing.T) {
	got, skipped, err := ReadEvents(strings.NewReader(mustRead(t, kubectlFixture)))
	if err != nil {
		t.Fatal(err)
	}
	sum := got.Summary(0.99, skipped)
	for _, want := range []string{
		"2 drains read", "1 censored: 1 by the deadline, 0 by the lag bound",
		"15 records skipped (2 not meshdrain's, 13 other meshdrain events, 0 malformed)",
		"p99 1.81s (a lower bound: censored samples count at their cut)",
		"too few samples for p99: 2, want at least 1000 (10/(1-q))",
	} {
		if !strings.Contains(sum, want) {
			t.Errorf("summary %q\nlacks %q", sum, want)
		}
	}
	var many Samples
	for i := range 20 {
		many = append(many, Sample{Seconds: float64(i)})
	}
	if sum := many.Summary(0.5, Skipped{}); strings.Contains(sum, "too few") || strings.Contains(sum, "lower bound") {
		t.Errorf("20 uncensored samples for p50: %q, want no warning", sum)
	}
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}
