package lag

import (
	"strings"
	"testing"
)

const finalEventsFixture = "testdata/meshdrain-final-events.jsonl"

// The built binary's final events (testdata/README.md): an Istio pod in regime (b) whose 50
// clients let go (32 listed, the latest), a pod without a mesh whose clients show their last
// new connection or last request (the lag bound cut it), and a Linkerd pod, which lists no
// client and gives its last arrival.
func TestReadEventsPerClient(t *testing.T) {
	got, skipped, err := ReadEvents(strings.NewReader(mustRead(t, finalEventsFixture)))
	if err != nil {
		t.Fatal(err)
	}
	if skipped.Total() != 0 {
		t.Errorf("skipped %+v, want nothing", skipped)
	}
	byDrain := map[int]Samples{}
	for _, s := range got {
		byDrain[s.Drain] = append(byDrain[s.Drain], s)
	}
	if len(got) != 83 || len(byDrain) != 3 || len(byDrain[0]) != 50 || len(byDrain[1]) != 32 || len(byDrain[2]) != 1 {
		t.Fatalf("%d samples in drains of %d, %d, %d; want 83: 50, 32, 1", len(got), len(byDrain[0]), len(byDrain[1]), len(byDrain[2]))
	}

	istio := byDrain[0]
	listed, unlisted, latest := 0, 0, 0.0
	for _, s := range istio {
		if s.Evidence != EvidenceLetGo || s.Mesh != "istio" || s.Censored || s.LagBound != 8.875 {
			t.Errorf("istio sample %+v, want let-go, mesh istio, uncensored, bound 8.875 s", s)
			break
		}
		if s.Unlisted {
			unlisted++
			if s.Seconds != 1.281 || s.Client != "" {
				t.Errorf("unlisted sample %+v, want at the earliest listed value 1.281 s, no client", s)
			}
			continue
		}
		listed++
		latest = max(latest, s.Seconds)
		if s.Client == "" {
			t.Errorf("listed sample %+v without its client", s)
		}
	}
	if listed != 32 || unlisted != 18 || latest != 1.947 {
		t.Errorf("istio: %d listed, %d unlisted, latest %v s; want 32, 18, 1.947 s", listed, unlisted, latest)
	}

	kinds := map[string]int{}
	for _, s := range byDrain[1] {
		kinds[s.Evidence]++
		if s.Mesh != "none" || !s.Censored || s.CutBy != CutLagBound || s.Unlisted {
			t.Errorf("mesh none sample %+v, want censored by the lag bound (cut_by), listed", s)
			break
		}
	}
	if kinds[EvidenceLastRequest] == 0 || kinds[EvidenceLastNewConnection] == 0 || kinds[EvidenceLastRequest]+kinds[EvidenceLastNewConnection] != 32 {
		t.Errorf("mesh none evidence %v, want both last-request and last-new-connection, 32 in all", kinds)
	}

	if s := byDrain[2][0]; s.Evidence != EvidenceLastArrival || s.Seconds != 1.845 || s.Mesh != "linkerd" || s.Censored || s.Client != "" {
		t.Errorf("linkerd sample %+v, want its last arrival, 1.845 s, uncensored", s)
	}

	sum := got.Summary(0.99, skipped)
	for _, want := range []string{
		"3 drains read (1 censored: 0 by the deadline, 1 by the lag bound)",
		"83 samples: 82 clients of 2 drains from clients_learnt (18 not listed, counted at their drain's earliest listed time: an over-estimate), 1 drains by their last-arrival",
	} {
		if !strings.Contains(sum, want) {
			t.Errorf("summary %q\nlacks %q", sum, want)
		}
	}
}

// cut_by, where the event has it, says what cut the wait, over what the reason and the
// window term would say; an empty list, or one without a usable time, leaves the drain its
// last arrival; drains are numbered across old and new events.
func TestReadEventsCutByAndEmptyLists(t *testing.T) {
	export := strings.Join([]string{
		`{"msg":"drain finished","component":"prestop","reason":"quiet","last_arrival_ms":1500,"window_term":"lag-bound"}`,
		`{"msg":"drain finished","component":"prestop","reason":"quiet","last_arrival_ms":2500,"window_term":"lag-bound","cut_by":"","clients_learnt":[],"clients_learnt_total":0,"clients_learnt_kept":0}`,
		`{"msg":"drain finished","component":"prestop","reason":"deadline","last_arrival_ms":9000,"cut_by":"deadline","clients_learnt":[{"client":"10.0.0.7","s":"soon","evidence":"let-go"}],"clients_learnt_total":1}`,
		`{"msg":"drain finished","component":"prestop","reason":"quiet","last_arrival_ms":3000,"cut_by":"","clients_learnt":[{"client":"10.0.0.7","s":2.2,"evidence":"let-go"},{"client":"10.0.0.8","s":1.1,"evidence":"last-request"}],"clients_learnt_total":4,"clients_learnt_kept":2}`,
	}, "\n")
	got, _, err := ReadEvents(strings.NewReader(export))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 7 {
		t.Fatalf("%d samples %+v, want 7", len(got), got)
	}
	if s := got[0]; s.Drain != 0 || s.CutBy != CutLagBound || s.Seconds != 1.5 {
		t.Errorf("old event %+v, want drain 0 censored by the lag bound from window_term", s)
	}
	if s := got[1]; s.Drain != 1 || s.Censored || s.Evidence != EvidenceLastArrival || s.Seconds != 2.5 {
		t.Errorf("empty list %+v, want drain 1's last arrival, uncensored as cut_by says", s)
	}
	if s := got[2]; s.Drain != 2 || s.CutBy != CutDeadline || s.Evidence != EvidenceLastArrival || s.Seconds != 9 {
		t.Errorf("unusable list %+v, want drain 2's last arrival, censored by the deadline", s)
	}
	wantLast := []struct {
		seconds  float64
		evidence string
		unlisted bool
	}{{2.2, EvidenceLetGo, false}, {1.1, EvidenceLastRequest, false}, {1.1, EvidenceLastRequest, true}, {1.1, EvidenceLastRequest, true}}
	for i, w := range wantLast {
		if s := got[3+i]; s.Drain != 3 || s.Seconds != w.seconds || s.Evidence != w.evidence || s.Unlisted != w.unlisted {
			t.Errorf("sample %d: %+v, want drain 3, %v s of %s, unlisted %v", 3+i, s, w.seconds, w.evidence, w.unlisted)
		}
	}
}
