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
	printReport(&out, sampleRows(t), []uint64{1, 2}, 0.25, 953*time.Second, sampleFallback(), sampleCosts())
	jsonPath := filepath.Join(t.TempDir(), "bench.json")
	if err := writeJSON(jsonPath, sampleRows(t), sampleFallback(), sampleCosts()); err != nil {
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
	rows := []row{
		{traffic: traffic("steady"), planSleep: 36, results: map[string][]podsim.Result{
			"none":      {result("none", 0, 5.3, 0.1, map[string]int{"503 UF": 1496}, nil), result("none", 0, 8, 0.2, map[string]int{"503 UF": 1603}, nil)},
			"sleep:5s":  {result("sleep:5s", 5, 5.3, 0.1, map[string]int{"503 UF upstream": 3}, nil), result("sleep:5s", 5, 8, 0.2, map[string]int{"503 (not retried)": 95}, nil)},
			"sleep:15s": {result("sleep:15s", 15, 5.3, 0.1, nil, nil), result("sleep:15s", 15, 8, 0.2, nil, nil)},
			"meshdrain": {result("meshdrain", 6.3, 5.3, 0.1, nil, drained("quiet", "quiet")), result("meshdrain", 9.0, 8, 0.2, nil, drained("quiet", "rate"))},
			"oracle":    {result("oracle", 5.3, 5.3, 0.1, nil, nil), result("oracle", 8, 8, 0.2, nil, nil)},
		}},
		{traffic: traffic("sparse"), planSleep: 6, results: map[string][]podsim.Result{
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
	// A plan's sleep that ends before the last request.
	rows[1].results["meshdrain"][0].LastRequestS = 7.9
	// Plan's native route and regime (a) beside the classic default: pod gone as it goes, one
	// native run after regime (a)'s and one stop later than the floor allows.
	gone := func(r podsim.Result, at float64) podsim.Result { r.PodGoneS = at; return r }
	steady := rows[0].results
	steady["meshdrain"][0], steady["meshdrain"][1] = gone(steady["meshdrain"][0], 6.5), gone(steady["meshdrain"][1], 9.3)
	steady[native] = []podsim.Result{gone(result(native, 6.1, 5.3, 0.1, nil, drained("quiet", "clients-left")), 6.4),
		gone(result(native, 9.6, 8, 0.2, nil, drained("quiet", "rate")), 53.2)}
	steady[regimeA] = []podsim.Result{gone(result(regimeA, 7.4, 5.3, 0.1, nil, drained("quiet", "quiet")), 52.0),
		gone(result(regimeA, 9.1, 8, 0.2, nil, drained("quiet", "quiet")), 52.1)}
	return rows
}

// sampleFallback has a row that is met and rows that miss each of the fallback's checks: a
// window set by the evidence, a loss, a stop earlier than today's, evidence that could not be
// read, and no final event.
func sampleFallback() *fallbackReport {
	event := func(evidence, term string, counts ...float64) *podsim.MeshdrainEvent {
		raw := map[string]any{"client_evidence": evidence, "window_term": term}
		if len(counts) == 3 {
			raw["clients_left"], raw["clients_by_silence"], raw["clients_holding"] = counts[0], counts[1], counts[2]
		}
		return &podsim.MeshdrainEvent{Reason: "quiet", Raw: raw}
	}
	run := func(stop, floor float64, lost int, md *podsim.MeshdrainEvent) podsim.Result {
		return podsim.Result{Strategy: "meshdrain", AppStopS: stop, LastClientLagS: floor, ClientFailures: lost, Meshdrain: md,
			Timeline: []podsim.Event{{AtS: 0, Who: "kubelet", What: "pod deleted"}}}
	}
	return &fallbackReport{seeds: []uint64{1, 2}, allSeeds: []uint64{1, 2, 3}, timeScale: 0.25, wall: 171 * time.Second, rows: []fallbackRow{
		{shape: "steady, per-request", runs: []fallbackRun{
			{seed: 1, today: run(9.1, 8.0, 0, event("off", "rate")), a: run(9.3, 8.0, 0, event("socket-table", "rate", 0, 50, 0)), b: run(8.4, 8.0, 0, event("socket-table", "rate", 0, 50, 0))},
			{seed: 2, today: run(6.2, 5.3, 0, event("off", "quiet")), a: run(6.2, 5.3, 0, event("socket-table", "rate", 0, 49, 1)), b: run(7.0, 5.3, 0, event("socket-table", "lag-bound", 0, 50, 0))},
		}},
		{shape: "steady, no-sidecar", runs: []fallbackRun{
			{seed: 1, today: run(9.1, 8.0, 0, event("off", "rate")), a: run(7.6, 8.0, 3, event("socket-table", "clients-left", 50, 0, 0)), b: run(8.6, 8.0, 0, event("socket-table", "rate", 0, 0, 50))},
			{seed: 2, today: run(6.2, 5.3, 1, event("off", "quiet")), a: run(6.0, 5.3, 0, event("unavailable: permission denied", "quiet")), b: run(30, 5.3, 0, nil)},
		}},
	}}
}

func sampleCosts() *costReport {
	return &costReport{Stats: 110442, FilteredBytes: 5174, UnfilteredBytes: 11069150, UsedBytes: 3065,
		EmulatorFilterMS: 7.5, EmulatorUsedMS: 4.4, EmulatorOldMS: 368, EmulatorPilotMS: 2.4, EmulatorUnfiltMS: 132,
		ParseNS: 73000, ParseAllocs: 1287, ParseBytes: 37773, ExpfmtAllocs: 1221,
		WatchNS: 47000, WatchAllocs: 825, WatchBytes: 28417,
		PrestopCPUPerPoll: 0.518, PrestopPolls: 228, PrestopMaxRSSKB: 15258, BinaryBytes: 10846370}
}
