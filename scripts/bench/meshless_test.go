package main

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	"github.com/meshdrain/meshdrain/pkg/sim/podsim"
)

func meshlessTraffic(t *testing.T, name string) podsim.Traffic {
	t.Helper()
	tr, _, err := podsim.TrafficFor(podsim.MeshNone, name)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// TestBestCleanSleep: the best clean sleep is on the 5 s grid, past the last request of every
// seed, and never 0 (that is no preStop).
func TestBestCleanSleep(t *testing.T) {
	for _, tc := range []struct {
		last []float64
		want float64
	}{{[]float64{0}, 5}, {[]float64{2.3, 4.99}, 5}, {[]float64{3, 5}, 10}, {[]float64{5.01}, 10}, {[]float64{11.2, 7}, 15}} {
		var rs []podsim.Result
		for _, l := range tc.last {
			rs = append(rs, podsim.Result{LastRequestS: l})
		}
		if got := bestCleanSleep(rs); got != tc.want {
			t.Errorf("last requests %v: best sleep %gs, want %gs", tc.last, got, tc.want)
		}
	}
}

// TestMeshlessVerdict: the targets of the meshless table, each shape by its own: dense shapes
// by the floor, keep-alive shapes by the lag bound, every shape by the best sleep and losses.
func TestMeshlessVerdict(t *testing.T) {
	ok := &podsim.MeshdrainEvent{Reason: "quiet", Raw: map[string]any{}}
	run := func(floor, last, stop float64, lost int) podsim.Result {
		return podsim.Result{LastClientLagS: floor, LastRequestS: last, AppStopS: stop, ClientFailures: lost, Meshdrain: ok}
	}
	for _, tc := range []struct {
		shape string
		runs  []podsim.Result
		want  string
	}{
		{"per-request", []podsim.Result{run(3, 2.9, 4.1, 0)}, "met"},
		{"per-request", []podsim.Result{run(3, 2.9, 4.5, 0)}, "NOT MET: 1.5s after the floor > 1.2"},
		{"keep-alive", []podsim.Result{run(3, 2.9, 6.1, 0)}, "met"},
		{"keep-alive", []podsim.Result{run(3, 2.9, 8.7, 0)}, "NOT MET: 8.7s > sleep 5s + 1.2; 8.7s > lag bound 7.4s + 1.2"},
		{"ingress", []podsim.Result{run(4, 3.9, 5, 2)}, "NOT MET: seed 1 lost 2"},
		{"ingress", []podsim.Result{withMinWait(run(2.7, 2.6, 5.3, 0))}, "NOT MET: 2.6s after the floor > 1.2 (--min-wait 5s)"},
	} {
		seeds := make([]uint64, len(tc.runs))
		for i := range seeds {
			seeds[i] = uint64(i + 1)
		}
		r := meshlessRow{traffic: meshlessTraffic(t, tc.shape), seeds: seeds, graceful: tc.runs, lagBound: 7.4}
		if got := meshlessVerdict(r, bestCleanSleep(tc.runs)); got != tc.want {
			t.Errorf("%s %+v: %q, want %q", tc.shape, tc.runs, got, tc.want)
		}
	}
}

func TestMeshlessTable(t *testing.T) {
	graceful := podsim.Result{LastClientLagS: 3.04, LastRequestS: 2.9, AppStopS: 4.1, Meshdrain: &podsim.MeshdrainEvent{Reason: "quiet", Raw: map[string]any{}}}
	abrupt := podsim.Result{ClientFailures: 9, FailuresByKind: map[string]int{"connection reset": 7, "ingress 502": 2}}
	withApp := graceful
	withApp.AppStopS = 4.3
	ml := &meshlessReport{seeds: []uint64{1}, abruptSeeds: []uint64{1}, timeScale: 0.25,
		rows: []meshlessRow{{traffic: meshlessTraffic(t, "mixed"), seeds: []uint64{1}, graceful: []podsim.Result{graceful}, abrupt: []podsim.Result{abrupt},
			withApp: []podsim.Result{withApp}, lagBound: 7.4}}}
	var out bytes.Buffer
	printMeshless(&out, ml)
	want := "| mixed | 3.0s | 7.4s | 5s | 4.1s | 1.1s | 0 | 0.82 | quiet | 9 (connection reset 7, ingress 502 2) | 4.3s · 0 · 1.05 | met |"
	if !strings.Contains(out.String(), want) {
		t.Errorf("table:\n%s\nwant the row %s", out.String(), want)
	}
	// A loss with the app's counter is a loss.
	withApp.ClientFailures = 2
	ml.rows[0].withApp = []podsim.Result{withApp}
	if got := meshlessVerdict(ml.rows[0], bestCleanSleep(ml.rows[0].graceful)); got != "NOT MET: seed 1 with --app-metrics lost 2" {
		t.Errorf("verdict %q", got)
	}
}

// withMinWait gives r the final event of a meshdrain run with --min-wait 5s at time scale 0.25.
func withMinWait(r podsim.Result) podsim.Result {
	r.Meshdrain = &podsim.MeshdrainEvent{Reason: "quiet", Raw: map[string]any{}, ElapsedMS: 1250, ElapsedPodS: 5, Args: []string{"--min-wait", "1.25s"}}
	return r
}

// TestEvidenceSleepTarget: the evidence table sets each stop against the best clean sleep on
// the grid plus sleepSlack, not against the hindsight whole-second sleep (withdrawn).
func TestEvidenceSleepTarget(t *testing.T) {
	for _, tc := range []struct {
		stop float64
		want []string
	}{{6.2, nil}, {6.3, []string{"(b) 6.3s > sleep 5s + 1.2"}}} {
		m := podsim.Result{AppStopS: tc.stop, LastClientLagS: 5.5, LastRequestS: 4.1}
		if got := runMisses("steady", "(b)", m, bestCleanSleep([]podsim.Result{m}), true); !slices.Equal(got, tc.want) {
			t.Errorf("stop %.1fs: misses %q, want %q", tc.stop, got, tc.want)
		}
	}
}
