package main

import (
	"strings"
	"testing"
	"time"
)

// A sleep loses a drain iff a request arrives after it; it dominates meshdrain only when it
// is no later on average and loses no more, one of them strictly.
func TestFrontierSleepsAndDominance(t *testing.T) {
	var f frontier
	early := drainPlan{arrivals: []time.Duration{500 * time.Millisecond, 2500 * time.Millisecond}}
	late := drainPlan{arrivals: []time.Duration{time.Second, 7 * time.Second}}
	// meshdrain stops at 4s and 8s: one loss at the first risk (the 7s request), none after.
	f.add(early, []outcome{{stop: 4 * time.Second}, {stop: 4 * time.Second}, {stop: 9 * time.Second}, {stop: 9 * time.Second}})
	f.add(late, []outcome{{stop: 4 * time.Second, lost: true}, {stop: 8 * time.Second}, {stop: 9 * time.Second}, {stop: 9 * time.Second}})
	if f.drains != 2 || f.sleepLost[2] != 2 || f.sleepLost[3] != 1 || f.sleepLost[6] != 1 || f.sleepLost[7] != 0 {
		t.Fatalf("sleep losses %v", f.sleepLost[:9])
	}
	// Risk 0: mean stop 4s, 1 loss; a 3s sleep also loses 1 and is earlier: dominated.
	if s := f.dominatedBy(0); s != 3 {
		t.Errorf("risk 0 dominated by %d, want the 3s sleep", s)
	}
	// Risk 1: mean stop 6s, no loss; the shortest lossless sleep is 7s, later: not dominated.
	if s := f.dominatedBy(1); s != 0 || f.nearestSleep(1) != 7 {
		t.Errorf("risk 1: dominated by %d, nearest %d; want none and 7", f.dominatedBy(1), f.nearestSleep(1))
	}
	// Risk 2: mean stop 9s, no loss: the 7s sleep is as safe and earlier.
	if s := f.dominatedBy(2); s != 7 {
		t.Errorf("risk 2 dominated by %d, want 7", s)
	}
	if s := f.sleepWithin(0.5); s != 3 {
		t.Errorf("shortest sleep losing at most half the drains: %d, want 3", s)
	}
	if ri, gap := f.closest(); ri != 2 || gap != -2 {
		t.Errorf("closest at %d by %gs, want risk 2, where the 7s sleep is 2s earlier", ri, gap)
	}
}

// The frontier's run: the same few drains at every risk, its tables and drawing.
func TestFrontierFewSeeds(t *testing.T) {
	ss := shapes()
	ss = []shape{ss[0], ss[len(ss)-1]}
	cells, fronts, err := calibrateWithFrontier(ss, families()[:1], 3, 2, 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(cells) != len(ss)*len(risks) || len(fronts) != len(ss) {
		t.Fatalf("%d cells, %d frontiers", len(cells), len(fronts))
	}
	for _, f := range fronts {
		if f.drains != 2 || len(f.meshdrain) != len(frontierRisks) {
			t.Fatalf("%s: %d drains, %d points", f.shape, f.drains, len(f.meshdrain))
		}
		for ri := 1; ri < len(frontierRisks); ri++ {
			if f.mdStop(ri) < f.mdStop(ri-1)-poll.Seconds() {
				t.Errorf("%s: risk %g stops at %.2fs, before %g (%.2fs)", f.shape, frontierRisks[ri], f.mdStop(ri), frontierRisks[ri-1], f.mdStop(ri-1))
			}
		}
	}
	var table strings.Builder
	printFrontier(&table, fronts)
	printFrontierSummary(&table, fronts)
	if !strings.Contains(table.String(), "| sidecars (b) | lognormal | 1.0e-04 | 2 |") {
		t.Errorf("table:\n%s", table.String())
	}
	if svg := drawFrontierSVG(fronts, []string{ss[0].name}); !strings.HasPrefix(svg, "<svg") || !strings.Contains(svg, "<polyline") {
		t.Errorf("svg: %.200s", svg)
	}
}
