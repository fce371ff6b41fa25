package risk

import (
	"math"
	"testing"
	"time"
)

func TestParseRoundTripsAndRefuses(t *testing.T) {
	d, err := Parse("0:0.4s,0.5:1.2s,0.99:3.5s,1:6s")
	if err != nil {
		t.Fatal(err)
	}
	if got := d.String(); got != "0:400ms,0.5:1.2s,0.99:3.5s,1:6s" {
		t.Errorf("String = %q", got)
	}
	back, err := Parse(d.String())
	if err != nil || back.String() != d.String() {
		t.Errorf("round trip: %v %v", back, err)
	}
	for _, bad := range []string{"", "0.5:1s", "1:2s,0.5:3s", "0.5:3s,1:2s", "x:1s", "1:soon", "1.5:1s", "0.5", "1:-1s"} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q) accepted", bad)
		}
	}
}

func TestCDFAndQuantile(t *testing.T) {
	d, _ := Parse("0.5:2s,1:4s")
	cases := []struct {
		at   time.Duration
		want float64
	}{{0, 0}, {1999 * time.Millisecond, 0}, {2 * time.Second, 0.5}, {3 * time.Second, 0.75}, {4 * time.Second, 1}, {time.Hour, 1}}
	for _, c := range cases {
		if got := d.CDF(c.at); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("CDF(%v) = %v, want %v", c.at, got, c.want)
		}
	}
	if got := d.Quantile(0.75); got != 3*time.Second {
		t.Errorf("Quantile(0.75) = %v", got)
	}
	if got := d.Quantile(0.25); got != 2*time.Second {
		t.Errorf("Quantile(0.25) = %v, want the first point: nothing is known below it", got)
	}
}

// A bound is the degenerate distribution: the figure is 1 before it and 0 from it, which is
// today's rule.
func TestBoundIsTodaysRule(t *testing.T) {
	b := Bound(10 * time.Second)
	since := []Client{{Since: 0}, {Since: 3 * time.Second}}
	if got := b.Figure(9999*time.Millisecond, since); got != 1 {
		t.Errorf("before the bound: %v", got)
	}
	if got := b.Figure(10*time.Second, since); got != 0 {
		t.Errorf("at the bound: %v", got)
	}
	if got := b.Within(1e-3, 0, since); got != 10*time.Second {
		t.Errorf("Within = %v", got)
	}
}

// The figure grows with the clients that may still route, shrinks with time, and a client
// seen sending late is less likely to have learnt.
func TestFigure(t *testing.T) {
	d, _ := Parse("0:0s,0.9:2s,0.99:4s,1:8s")
	one := d.Figure(2*time.Second, []Client{{}})
	if math.Abs(one-0.1) > 1e-9 {
		t.Errorf("one client at p90: %v, want 0.1", one)
	}
	three := d.Figure(2*time.Second, []Client{{N: 3}})
	if want := 1 - math.Pow(0.9, 3); math.Abs(three-want) > 1e-9 {
		t.Errorf("three clients: %v, want %v", three, want)
	}
	if apart := d.Figure(2*time.Second, []Client{{}, {}, {}}); math.Abs(apart-three) > 1e-12 {
		t.Errorf("three clients counted apart: %v, want %v as counted together", apart, three)
	}
	if late := d.Figure(2*time.Second, []Client{{Since: time.Second}}); late <= one {
		t.Errorf("a client seen at 1s: %v, not above %v", late, one)
	}
	if got := d.Figure(9*time.Second, []Client{{Since: 8 * time.Second}}); got != 0 {
		t.Errorf("a client not learnt by the distribution's last lag: %v, want 0 (the quiet window judges it)", got)
	}
	at := d.Within(1e-2, 0, []Client{{}})
	if at < 4*time.Second || at > 4*time.Second+time.Millisecond {
		t.Errorf("Within(1e-2) = %v, want 4s to a millisecond", at)
	}
	if got := d.Within(1e-2, 5*time.Second, nil); got != 5*time.Second {
		t.Errorf("no client: %v", got)
	}
}

func TestCheckLevel(t *testing.T) {
	for _, ok := range []float64{DefaultLevel, 1e-9, 0.1, MaxLevel} {
		if err := CheckLevel(ok); err != nil {
			t.Errorf("CheckLevel(%v) = %v", ok, err)
		}
	}
	for _, bad := range []float64{0, -1e-3, 0.6, 1, math.NaN(), math.Inf(1)} {
		if err := CheckLevel(bad); err == nil {
			t.Errorf("CheckLevel(%v) accepted", bad)
		}
	}
}

// A client that would send ten times a second while it routes and has been silent for a
// second is almost surely gone: the posterior, worked out by hand, and its limits.
func TestSilenceIsEvidence(t *testing.T) {
	d, _ := Parse("0:0s,1:10s") // uniform over 10 s
	at, since := 3*time.Second, 2*time.Second
	// S(3) = 0.7; learnt in (2, 3]: density 0.1/s, weighed e^(10·(3−l)): 0.1/10·(e^10 − 1).
	learnt := 0.01 * math.Expm1(10)
	want := 0.7 / (0.7 + learnt)
	if got := d.stillRouting(at, Client{Since: since, Rate: 10}); math.Abs(got-want) > 1e-12 {
		t.Errorf("posterior %v, want %v", got, want)
	}
	if silent, deaf := d.stillRouting(at, Client{Since: since, Rate: 10}), d.StillRouting(at, since); silent >= deaf/100 {
		t.Errorf("a second of silence at 10/s: %v, not far below %v", silent, deaf)
	}
	if got, want := d.stillRouting(at, Client{Since: since}), 0.7/0.8; math.Abs(got-want) > 1e-12 {
		t.Errorf("rate 0: %v, want S(3)/S(2) = %v", got, want)
	}
	if got := d.stillRouting(time.Hour, Client{Since: since, Rate: 1e6}); got != 0 {
		t.Errorf("past the last lag: %v", got)
	}
	if got := d.stillRouting(9*time.Second, Client{Since: since, Rate: 1e6}); got != 0 || math.IsNaN(got) {
		t.Errorf("an overwhelming silence: %v, want 0 (no NaN)", got)
	}
	// A jump (a bound): silence before it says nothing, every client learns at it.
	b := Bound(5 * time.Second)
	if got := b.stillRouting(4*time.Second, Client{Since: time.Second, Rate: 10}); got != 1 {
		t.Errorf("before a bound: %v", got)
	}
	if got := b.stillRouting(5*time.Second, Client{Since: time.Second, Rate: 10}); got != 0 {
		t.Errorf("at a bound: %v", got)
	}
}
