package plan

import (
	"slices"
	"testing"
	"time"

	"github.com/meshdrain/meshdrain/pkg/hook/drain"
)

// TestQuietFromTheClientsRate: a known sparse rate per client or a client period lengthens
// --quiet, the deadline follows, and the prestop command carries it.
func TestQuietFromTheClientsRate(t *testing.T) {
	base := Input{P99: 450 * time.Millisecond, EDSLag: 8 * time.Second}
	ref, err := Recommend(base)
	if err != nil {
		t.Fatal(err)
	}
	if ref.Quiet != time.Second {
		t.Fatalf("without a rate the quiet window is --quiet: %s", ref.Quiet)
	}
	for _, tc := range []struct {
		name      string
		rps       float64
		period    time.Duration
		wantQuiet time.Duration
	}{
		// −ln(1e-4) = 9.21 s at 1 request a second, rounded up to 100 ms.
		{"1 rps", 1, 0, 9300 * time.Millisecond},
		{"1.6 rps", 1.6, 0, 5800 * time.Millisecond},
		// 16 rps (the reference workload's clients): 0.58 s, shorter than --quiet.
		{"16 rps", 16, 0, time.Second},
		{"period 3s", 0, 3 * time.Second, 3200 * time.Millisecond},
		{"period 500ms", 0, 500 * time.Millisecond, time.Second},
		{"both: the longer", 1, 12 * time.Second, 12200 * time.Millisecond},
	} {
		in := base
		in.RPSPerClient, in.ClientPeriod = tc.rps, tc.period
		p, err := Recommend(in)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if p.Quiet != tc.wantQuiet {
			t.Errorf("%s: quiet %s, want %s", tc.name, p.Quiet, tc.wantQuiet)
		}
		if want := p.LastClientLag + max(p.Quiet, in.P99) + p.Poll; p.ExpectedFinish != want {
			t.Errorf("%s: expected finish %s, want %s", tc.name, p.ExpectedFinish, want)
		}
		if p.Deadline < p.ExpectedFinish+p.Margin {
			t.Errorf("%s: deadline %s before expected finish %s + margin", tc.name, p.Deadline, p.ExpectedFinish)
		}
		if !slices.Contains(p.PrestopArgs(), "--quiet="+fmtD(tc.wantQuiet)) {
			t.Errorf("%s: prestop args %v lack --quiet=%s", tc.name, p.PrestopArgs(), fmtD(tc.wantQuiet))
		}
		if hasPeriod := slices.Contains(p.PrestopArgs(), "--client-period="+fmtD(tc.period)); hasPeriod != (tc.period > 0) {
			t.Errorf("%s: prestop args %v: --client-period written %v, want %v", tc.name, p.PrestopArgs(), hasPeriod, tc.period > 0)
		}
	}
	if q := drain.PoissonQuiet(1); q < 9200*time.Millisecond || q > 9220*time.Millisecond {
		t.Errorf("PoissonQuiet(1) = %s, want −ln(1e-4) s = 9.21s", q)
	}
}

// TestMinWaitBoundsTheFinish: the hook never returns before --min-wait, so a short lag's
// expected finish is the minimum wait; a non-default one is written into the preStop.
func TestMinWaitBoundsTheFinish(t *testing.T) {
	in := Input{P99: 100 * time.Millisecond, EDSLag: time.Second}
	p, err := Recommend(in)
	if err != nil {
		t.Fatal(err)
	}
	if want := drain.DefaultMinWait + p.Poll; p.ExpectedFinish != want {
		t.Errorf("expected finish %s, want min-wait + poll = %s", p.ExpectedFinish, want)
	}
	if slices.ContainsFunc(p.PrestopArgs(), func(a string) bool { return len(a) > 10 && a[:11] == "--min-wait=" }) {
		t.Errorf("default min-wait written into the preStop: %v", p.PrestopArgs())
	}
	in.MinWait = 8 * time.Second
	p, err = Recommend(in)
	if err != nil {
		t.Fatal(err)
	}
	if want := 8*time.Second + p.Poll; p.ExpectedFinish != want || p.Deadline < want {
		t.Errorf("min-wait 8s: expected finish %s (want %s), deadline %s", p.ExpectedFinish, want, p.Deadline)
	}
	if !slices.Contains(p.PrestopArgs(), "--min-wait=8s") {
		t.Errorf("prestop args %v lack --min-wait=8s", p.PrestopArgs())
	}
	if _, err := Recommend(Input{P99: time.Second, EDSLag: time.Second, RPSPerClient: -1}); err == nil {
		t.Error("a negative rate per client was accepted")
	}
}
