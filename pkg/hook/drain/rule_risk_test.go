package drain

import (
	"math"
	"testing"
	"time"

	"github.com/meshdrain/meshdrain/pkg/hook/risk"
)

// riskRuleConfig is clientRuleConfig with a lag distribution: every client learns at a lag
// drawn uniformly from 0 to 10s, and a risk of 0.1, so that each crossing is exact
// arithmetic. --min-wait is 0, its default with a distribution.
func riskRuleConfig(t *testing.T) RuleConfig {
	t.Helper()
	lag, err := risk.Parse("0:0s,1:10s")
	if err != nil {
		t.Fatal(err)
	}
	cfg := clientRuleConfig()
	cfg.Start = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	cfg.MinWait, cfg.Lag, cfg.Risk = 0, lag, 0.1
	return cfg
}

// Nothing arrives: only the unseen client counts, 1 − at/10, at most 0.1 from 9s. Without a
// distribution and without --min-wait the same drain ends at 1s, one quiet window.
func TestRiskFigureGuardsAnUnseenClient(t *testing.T) {
	cfg := riskRuleConfig(t)
	at, d := clientsRule(t, cfg, 0, func(time.Duration) *ClientCounts { return nil })
	if at != 9*time.Second || d.Reason != ReasonQuiet || d.Term != TermLagBound {
		t.Fatalf("stopped at %v with %+v; want 9s, term lag-bound", at, d)
	}
	if d.Risk == nil || math.Abs(*d.Risk-0.1) > 1e-9 || d.RiskFrom != (RiskFrom{Unseen: 1}) {
		t.Errorf("risk %v from %+v; want 0.1 from the unseen client", d.Risk, d.RiskFrom)
	}
	// Before the crossing, the decision says when the wait may end: at 9s.
	r := NewRule(cfg, Observation{Signal: "http-requests", Arrivals: f(0), Active: f(0)})
	d = r.Observe(Observation{At: 200 * ms, Signal: "http-requests", Arrivals: f(0), Active: f(0)})
	if d.Reason != "" || d.Ends != 9*time.Second || d.Risk == nil || math.Abs(*d.Risk-0.98) > 1e-9 {
		t.Errorf("at 200ms: %+v (risk %v); want no stop, ends 9s, risk 0.98", d, *d.Risk)
	}
	cfg.Lag = risk.Distribution{}
	if at, d := clientsRule(t, cfg, 0, func(time.Duration) *ClientCounts { return nil }); at != time.Second || d.Risk != nil {
		t.Errorf("without a distribution: stopped at %v, risk %v; want 1s, no risk", at, d.Risk)
	}
}

// senderStillRouting is, for the uniform lag of riskRuleConfig, the chance that a client
// sending once a second that was not learnt by 4s and has been silent since still routes at
// at: S(at) / (S(at) + ∫ e^(at−l) dF(l) over (4, at]) = S / (S + 0.1·(e^(at−4) − 1)).
func senderStillRouting(at float64) float64 {
	survival := 1 - at/10
	return survival / (survival + 0.1*math.Expm1(at-4))
}

// One request a second until 4s, no per-client evidence: one sender not learnt by 4s, silent
// since, and the unseen client: 1 − (at/10)·(1 − senderStillRouting(at)) ≤ 0.1 from 9.055s
// (0.106 at 9s), seen at the 9.2s poll. Ignoring the sender's silence, it would be 9.616s.
func TestRiskFigureCountsTheLastSender(t *testing.T) {
	at, d := clientsRule(t, riskRuleConfig(t), 4*time.Second, func(time.Duration) *ClientCounts { return nil })
	if at != 9200*ms || d.Reason != ReasonQuiet || d.RiskFrom != (RiskFrom{Unseen: 1, Sending: 1}) {
		t.Fatalf("stopped at %v with %+v; want 9.2s, from one unseen and one sender", at, d)
	}
	want := 1 - 0.92*(1-senderStillRouting(9.2))
	if math.Abs(*d.Risk-want) > 1e-9 {
		t.Errorf("risk %v, want %v", *d.Risk, want)
	}
	cfg := riskRuleConfig(t)
	r := NewRule(cfg, Observation{Signal: "http-requests", Arrivals: f(0), Active: f(0)})
	for s := 1.0; s <= 4; s++ {
		d = r.Observe(Observation{At: time.Duration(s) * time.Second, Signal: "http-requests", Arrivals: f(s), Active: f(0)})
	}
	if d.Ends != 9055*ms {
		t.Errorf("ends %v, want 9.055s (the crossing, to the millisecond)", d.Ends)
	}
}

// The socket table's sender says it last sent at 2s, before the last arrival the counter
// showed at 4s: the later of the two counts, so the figure is the one above (the 9.2s poll),
// and the clients that left are out.
func TestRiskFigureTakesTheSendersLastSend(t *testing.T) {
	cfg := riskRuleConfig(t)
	clients := func(time.Duration) *ClientCounts {
		return &ClientCounts{Sending: 1, Left: 3, LastSent: cfg.Start.Add(2 * time.Second)}
	}
	at, d := clientsRule(t, cfg, 4*time.Second, clients)
	if at != 9200*ms || d.Reason != ReasonQuiet || d.RiskFrom != (RiskFrom{Unseen: 1, Sending: 1}) {
		t.Errorf("stopped at %v with %+v; want 9.2s, left clients out", at, d)
	}
}

// Two clients hold drain-start connections and one left: the holders hold the app while the
// figure, 1 − (at/10)³, is above 0.1 (until 9.655s, the 9.8s poll), then release it; once
// they have left (at 5s), only the unseen client is left to count (9s).
func TestRiskFigureCountsHolders(t *testing.T) {
	cfg := riskRuleConfig(t)
	hold := func(time.Duration) *ClientCounts { return &ClientCounts{Holding: 2, Left: 1} }
	at, d := clientsRule(t, cfg, 0, hold)
	if at != 9800*ms || d.Term != TermLagBound || d.RiskFrom != (RiskFrom{Unseen: 1, Holding: 2}) {
		t.Errorf("holders: stopped at %v with %+v; want 9.8s, lag-bound", at, d)
	}
	r := NewRule(cfg, Observation{Signal: "http-requests", Arrivals: f(0), Active: f(0)})
	if d := r.Observe(Observation{At: 9600 * ms, Signal: "http-requests", Arrivals: f(0), Active: f(0), Clients: hold(0)}); d.HeldBy != 2 {
		t.Errorf("at 9.6s: held by %d, want 2", d.HeldBy)
	}
	leave := func(at time.Duration) *ClientCounts {
		if at < 5*time.Second {
			return hold(at)
		}
		return &ClientCounts{Left: 3}
	}
	if at, d := clientsRule(t, cfg, 0, leave); at != 9*time.Second || d.RiskFrom != (RiskFrom{Unseen: 1}) {
		t.Errorf("holders left at 5s: stopped at %v from %+v; want 9s from the unseen client", at, d.RiskFrom)
	}
}

// A lag bound is the distribution's degenerate case: the figure is 1 before it, 0 from it,
// and the drain ends as the rule without a distribution ends it with --eds-lag-bound, also
// when clients send past the bound (one quiet window after them). --min-wait still holds as
// a floor.
func TestRiskFigureOfABound(t *testing.T) {
	cfg := clientRuleConfig()
	cfg.MinWait, cfg.Lag, cfg.Risk = 0, risk.Bound(12*time.Second), 1e-3
	bounded := cfg
	bounded.Lag, bounded.LagBound = risk.Distribution{}, 12*time.Second
	none := func(time.Duration) *ClientCounts { return nil }
	if at, d := clientsRule(t, cfg, 8*time.Second, none); at != 12*time.Second || d.Term != TermLagBound || *d.Risk != 0 {
		t.Errorf("traffic until 8s: stopped at %v (%s, risk %v); want the bound, 12s", at, d.Term, *d.Risk)
	}
	for _, until := range []time.Duration{8 * time.Second, 15 * time.Second} {
		at, d := clientsRule(t, cfg, until, none)
		want, _ := clientsRule(t, bounded, until, none)
		if at != want || d.Reason != ReasonQuiet {
			t.Errorf("traffic until %v: stopped at %v (%s); --eds-lag-bound 12s stops at %v", until, at, d.Reason, want)
		}
	}
	cfg.Lag, cfg.MinWait = risk.Bound(2*time.Second), 5*time.Second
	if at, _ := clientsRule(t, cfg, 0, none); at != 5*time.Second {
		t.Errorf("bound 2s, --min-wait 5s: stopped at %v; want 5s", at)
	}
}
