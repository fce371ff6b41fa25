package drain

import (
	"time"

	"github.com/meshdrain/meshdrain/pkg/hook/risk"
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

// RiskClients are the clients the figure counts at a poll: one unseen client, the holders and
// the clients without evidence, each known not to have learnt by the drain's start (0) and
// whose silence says nothing (an idle connection, no connection at all); and the senders,
// each known not to have learnt by the last arrival (or ClientCounts.LastSent, whichever is
// later: for the senders that sent earlier this overstates the figure) and silent since,
// each sending at rate / senders a second while it routes here (rate: the arrival rate the
// rule measured, 0 when none). Without per-client evidence (c nil) they are the unseen
// client and, once anything arrived, one sender. status counts with it too, so that it
// shows what the hook would state for the same evidence.
func RiskClients(start time.Time, c *ClientCounts, lastArrival time.Duration, arrived bool, rate float64) ([]risk.Client, RiskFrom) {
	from := RiskFrom{Unseen: 1}
	lastSent := max(lastArrival, 0)
	if c == nil {
		if arrived {
			from.Sending = 1
		}
	} else {
		if !c.LastSent.IsZero() {
			lastSent = max(lastSent, c.LastSent.Sub(start))
		}
		from.Holding, from.Sending, from.NoEvidence = c.Holding, c.Sending, c.NoEvidence
	}
	// One entry per kind: a poll counts thousands of clients, and the figure is polled a few
	// times a poll.
	clients := []risk.Client{{N: from.Unseen + from.Holding + from.NoEvidence}}
	if from.Sending > 0 {
		clients = append(clients, risk.Client{Since: lastSent, Rate: max(rate, 0) / float64(from.Sending), N: from.Sending})
	}
	return clients, from
}

// riskClients are RiskClients at observation o, on the rule's clock.
func (r *Rule) riskClients(o Observation) (RiskFrom, []risk.Client) {
	clients, from := RiskClients(r.cfg.Start, o.Clients, r.lastMove, r.arrived, r.rate)
	return from, clients
}

// figure is the probability that some of the clients still routes to the pod at at.
func (r *Rule) figure(at time.Duration, clients []risk.Client) float64 {
	return r.cfg.Lag.Figure(at, clients)
}

// riskWithin is the earliest moment from at on at which the figure of since is at most
// RuleConfig.Risk, to a millisecond; ok is false when it never is (a client known not to have
// learnt by the distribution's last lag: nothing bounds it).
func (r *Rule) riskWithin(at time.Duration, since []risk.Client) (time.Duration, bool) {
	if r.figure(at, since) <= r.cfg.Risk {
		return at, true
	}
	// On whole milliseconds: lo's figure is above Risk, hi's at most Risk.
	lo, hi := at.Truncate(time.Millisecond), max(at, r.cfg.Lag.Last()).Truncate(time.Millisecond)+time.Millisecond
	if r.figure(hi, since) > r.cfg.Risk {
		return 0, false
	}
	for hi-lo > time.Millisecond {
		mid := lo + (hi-lo)/2/time.Millisecond*time.Millisecond
		if r.figure(mid, since) <= r.cfg.Risk {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi, true
}
