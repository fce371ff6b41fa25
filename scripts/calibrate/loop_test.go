package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/meshdrain/meshdrain/pkg/hook/drain"
	"github.com/meshdrain/meshdrain/pkg/operator/lag"
	"github.com/meshdrain/meshdrain/pkg/sim/podsim"
)

func shapeNamed(t *testing.T, name string) shape {
	for _, s := range shapes() {
		if s.name == name {
			return s
		}
	}
	t.Fatalf("no shape %q", name)
	return shape{}
}

// The final event written for a past drain reads back through lag.ReadEvents as the hook's
// would: in regime (b) each client that let go by the stop, at the table read after its lag.
func TestFinalEventReadsBack(t *testing.T) {
	s := shapeNamed(t, "sidecars (b)")
	p := drainPlan{clients: []podsim.PlannedClient{
		{Lag: 1300 * time.Millisecond, Arrivals: []time.Duration{time.Second}},
		{Lag: 30 * time.Second, Arrivals: []time.Duration{29 * time.Second}},
	}, arrivals: []time.Duration{time.Second, 29 * time.Second}}
	cfg := guesses()[1].cfg
	var events bytes.Buffer
	o := outcome{stop: 11 * time.Second, lost: true}
	if err := writeFinalEvent(&events, s, p, cfg, o, drain.Decision{Reason: drain.ReasonQuiet, Term: drain.TermLagBound}); err != nil {
		t.Fatal(err)
	}
	line := events.String()
	samples, skipped, err := lag.ReadEvents(&events)
	if err != nil || skipped.Total() != 0 {
		t.Fatalf("%v, skipped %+v:\n%s", err, skipped, line)
	}
	if len(samples) != 1 {
		t.Fatalf("%d samples, want the one client that let go by the stop:\n%s", len(samples), line)
	}
	got := samples[0]
	if got.Seconds != 2 || got.Evidence != lag.EvidenceLetGo || !got.Censored || got.CutBy != lag.CutLagBound || got.LagBound != 10 || got.Mesh != string(s.sc.Mesh) {
		t.Errorf("%+v: want let-go at the 2s read, cut by the lag bound of 10s", got)
	}
	if !strings.Contains(line, `"last_arrival_ms":1000`) || !strings.Contains(line, `"msg":"drain finished"`) {
		t.Errorf("event: %s", line)
	}
}

// Without a mesh a client's evidence is its last arrival by the stop, named by its kind; the
// kube-proxy histogram has one observation per node.
func TestMeshlessEvidenceAndHistogram(t *testing.T) {
	s := shapeNamed(t, "none: mixed")
	p := drainPlan{clients: []podsim.PlannedClient{
		{Kind: "per-request", Node: 0, Lag: 3 * time.Second, Arrivals: []time.Duration{time.Second, 2 * time.Second}},
		{Kind: "keep-alive", Node: 0, Lag: 3 * time.Second, Arrivals: []time.Duration{1500 * time.Millisecond}},
		{Kind: "ingress", Node: 1, Lag: 4 * time.Second},
		{Kind: "keep-alive", Node: 1, Lag: 70 * time.Second},
	}}
	learnt := learntOf(s, p, 10*time.Second)
	if len(learnt) != 2 || learnt[0].At != start.Add(2*time.Second) || learnt[0].Evidence != drain.EvidenceLastNewConnection || learnt[1].Evidence != drain.EvidenceLastRequest {
		t.Errorf("learnt %+v", learnt)
	}
	h, err := modelHistogram([]drainPlan{p})
	if err != nil {
		t.Fatal(err)
	}
	at := func(bound float64) float64 {
		for _, b := range h.Buckets {
			if b.UpperBound == bound {
				return b.Count
			}
		}
		return -1
	}
	if h.Count() != 2 || at(2) != 0 || at(3) != 1 || at(65) != 1 || at(70) != 2 {
		t.Errorf("histogram %+v: want node 0's 3s and node 1's 70s, once each, and no ingress", h.Buckets)
	}
}

// The loop on a few drains: the settings come from plan's code, from the events and from the
// histogram, and the new drains run with them.
func TestCloseLoopFewDrains(t *testing.T) {
	c := loopCase{shapeNamed(t, "sidecars (b)"), families()[0]}
	rows, err := closeLoop(c, 4, 3)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != len(guesses())*len(loopRisks) {
		t.Fatalf("%d rows", len(rows))
	}
	for _, r := range rows {
		if r.samples == 0 || r.learnt <= 0 || r.fromHistogram <= 0 || r.withLearnt.drains != 3 || r.withHistogram.drains != 3 {
			t.Errorf("%+v", r)
		}
		if !strings.HasPrefix(r.learntDist, "0:") {
			t.Errorf("learnt --lag-dist %q", r.learntDist)
		}
	}
	var table strings.Builder
	printLoop(&table, rows)
	if !strings.Contains(table.String(), "| sidecars (b) | lognormal | --eds-lag-bound 10s | 1.0e-02 |") {
		t.Errorf("table:\n%s", table.String())
	}
}
