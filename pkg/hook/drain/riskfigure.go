package drain

import (
	"math"
	"time"
)

// The risk figure (RuleConfig.Lag, --lag-dist and --risk): with a distribution of when
// clients learn of the pod's removal, the lag bound is no longer one guessed moment but the
// first moment at which the probability that some client still routes to the pod is at most
// RuleConfig.Risk (docs/decision-rule.md, "The risk figure"). The figure counts every client
// the evidence cannot rule out, each known not to have learnt by some moment of the drain:
// one client nobody has seen yet (since 0: a client that has not sent yet is not in any
// table), the clients holding a drain-start connection (0), the clients that sent during the
// drain (since their latest send: the latest of all of them, for all of them, which only
// overstates the figure), and the clients without evidence (0). Clients that left are out.

// RiskFrom is which clients the risk figure came from, for the final event.
type RiskFrom struct {
	// Unseen is the client nobody has seen yet (always 1: the evidence cannot rule it out).
	Unseen int
	// Holding, Sending and NoEvidence are the clients of ClientCounts by state; without
	// per-client evidence, Sending is 1 once anything arrived (one sender, since the last
	// arrival).
	Holding, Sending, NoEvidence int
}

// sinceGroup is n clients, each known not to have learnt by since.
type sinceGroup struct {
	since time.Duration
	n     int
}

// riskClients are the clients the figure counts at observation o, grouped by since.
func (r *Rule) riskClients(o Observation) (RiskFrom, []sinceGroup) {
	lastSent := r.lastMove
	if c := o.Clients; c != nil {
		if !c.LastSent.IsZero() {
			lastSent = max(0, r.since(c.LastSent))
		}
		from := RiskFrom{Unseen: 1, Holding: c.Holding, Sending: c.Sending, NoEvidence: c.NoEvidence}
		return from, []sinceGroup{{0, from.Unseen + from.Holding + from.NoEvidence}, {lastSent, from.Sending}}
	}
	from := RiskFrom{Unseen: 1}
	if r.arrived {
		from.Sending = 1
	}
	return from, []sinceGroup{{0, from.Unseen}, {lastSent, from.Sending}}
}

// figure is the probability that some client of groups still routes to the pod at at:
// 1 − Π (1 − StillRouting)ⁿ, as risk.Distribution.Figure counts them one by one.
func (r *Rule) figure(at time.Duration, groups []sinceGroup) float64 {
	none := 1.0
	for _, g := range groups {
		if g.n > 0 {
			none *= math.Pow(1-r.cfg.Lag.StillRouting(at, g.since), float64(g.n))
		}
	}
	return 1 - none
}

// riskWithin is the earliest moment from at on at which the figure of groups is at most
// RuleConfig.Risk, to a millisecond; ok is false when it never is (a client known not to have
// learnt by the distribution's last lag: nothing bounds it).
func (r *Rule) riskWithin(at time.Duration, groups []sinceGroup) (time.Duration, bool) {
	if r.figure(at, groups) <= r.cfg.Risk {
		return at, true
	}
	// On whole milliseconds: lo's figure is above Risk, hi's at most Risk.
	lo, hi := at.Truncate(time.Millisecond), max(at, r.cfg.Lag.Last()).Truncate(time.Millisecond)+time.Millisecond
	if r.figure(hi, groups) > r.cfg.Risk {
		return 0, false
	}
	for hi-lo > time.Millisecond {
		mid := lo + (hi-lo)/2/time.Millisecond*time.Millisecond
		if r.figure(mid, groups) <= r.cfg.Risk {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi, true
}
