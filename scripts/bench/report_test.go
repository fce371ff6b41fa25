package main

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/meshdrain/meshdrain/pkg/sim/podsim"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from this run")

// The report is what docs/benchmarks.md pastes: its layout is pinned here, over rows that
// reach every branch of a cell and a verdict, so that a change of format is a decision.
func TestReportLayout(t *testing.T) {
	var out bytes.Buffer
	printReport(&out, sampleRows(t), []uint64{1, 2}, 0.25, 953*time.Second, sampleCosts())
	jsonPath := filepath.Join(t.TempDir(), "bench.json")
	if err := writeJSON(jsonPath, sampleRows(t), sampleCosts()); err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	compareGolden(t, "report.md.golden", out.Bytes())
	compareGolden(t, "report.json.golden", doc)
}

func compareGolden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s changed; got:\n%s", name, got)
	}
}

func sampleRows(t *testing.T) []row {
	t.Helper()
	traffic := func(name string) podsim.Traffic {
		tr, err := podsim.TrafficByName(name)
		if err != nil {
			t.Fatal(err)
		}
		return tr
	}
	drained := func(reason, term string) *podsim.MeshdrainEvent {
		return &podsim.MeshdrainEvent{Reason: reason, Raw: map[string]any{"window_term": term}}
	}
	result := func(strategy string, stop, floor, gap float64, lost map[string]int, md *podsim.MeshdrainEvent) podsim.Result {
		r := podsim.Result{Strategy: strategy, AppStopS: stop, LastClientLagS: floor, LongestGapS: gap,
			FailuresByKind: lost, Meshdrain: md, Timeline: []podsim.Event{{AtS: 0, Who: "kubelet", What: "pod deleted"}}}
		for _, n := range lost {
			r.ClientFailures += n
		}
		return r
	}
	return []row{
		{traffic: traffic("steady"), results: map[string][]podsim.Result{
			"none":      {result("none", 0, 5.3, 0.1, map[string]int{"503 UF": 1496}, nil), result("none", 0, 8, 0.2, map[string]int{"503 UF": 1603}, nil)},
			"sleep:5s":  {result("sleep:5s", 5, 5.3, 0.1, map[string]int{"503 UF upstream": 3}, nil), result("sleep:5s", 5, 8, 0.2, map[string]int{"503 (not retried)": 95}, nil)},
			"sleep:15s": {result("sleep:15s", 15, 5.3, 0.1, nil, nil), result("sleep:15s", 15, 8, 0.2, nil, nil)},
			"meshdrain": {result("meshdrain", 6.3, 5.3, 0.1, nil, drained("quiet", "quiet")), result("meshdrain", 9.0, 8, 0.2, nil, drained("quiet", "rate"))},
			"oracle":    {result("oracle", 5.3, 5.3, 0.1, nil, nil), result("oracle", 8, 8, 0.2, nil, nil)},
		}},
		{traffic: traffic("sparse"), results: map[string][]podsim.Result{
			"none":      {result("none", 0, 8, 1.1, map[string]int{"503 UC reset": 2, "504 UT": 1, "refused": 4}, nil)},
			"meshdrain": {result("meshdrain", 17.4, 8, 1.1, map[string]int{"stream cut": 1}, drained("sidecar-gone", "quiet"))},
			"sleep:15s": {result("sleep:15s", 15, 8, 1.1, nil, nil)},
		}},
		{traffic: traffic("streams"), results: map[string][]podsim.Result{
			"meshdrain": {result("meshdrain", 30, 5.3, 0.1, nil, drained("deadline", "quiet-streams"))},
		}},
		{traffic: traffic("tcp"), results: map[string][]podsim.Result{
			"none":      {{Strategy: "none", ClientFailures: 3, FailuresByKind: map[string]int{"TCP closed": 3}, SidecarUC: 2}},
			"sleep:5s":  {{Strategy: "sleep:5s", AppStopS: 5, ClientFailures: 1, FailuresByKind: map[string]int{"TCP closed": 1}, SidecarUF: 1}},
			"meshdrain": {{Strategy: "meshdrain", AppStopS: 6.4, LastClientLagS: 5.3}},
		}},
	}
}

func sampleCosts() *costReport {
	return &costReport{Stats: 110442, FilteredBytes: 5174, UnfilteredBytes: 11069150, UsedBytes: 3065,
		EmulatorFilterMS: 7.5, EmulatorUsedMS: 4.4, EmulatorOldMS: 368, EmulatorPilotMS: 2.4, EmulatorUnfiltMS: 132,
		ParseNS: 73000, ParseAllocs: 1287, ParseBytes: 37773, ExpfmtAllocs: 1221,
		WatchNS: 47000, WatchAllocs: 825, WatchBytes: 28417,
		PrestopCPUPerPoll: 0.518, PrestopPolls: 228, PrestopMaxRSSKB: 15258, BinaryBytes: 10846370}
}
