package drain

import "time"

// RiskClients are the clients that may still route to the pod at a poll, as the risk figure
// counts them (docs/decision-rule.md): each with the moment, since the start of the drain,
// by which it is known not to have learnt of the removal (risk.Distribution.Figure's since).
// A holding client and one that gave no evidence were there when the drain began (0); a
// sending client sent at the latest send of all of them (ClientCounts.LastSent: the
// conservative choice, one time for all); a client that left is out. One more client nobody
// has seen yet is always counted (0). Without per-client evidence (c nil) the clients are that
// unseen one and, when anything arrived during the drain, one sender at the last arrival.
//
// status computes its figure from the same function, so that it shows what the hook would
// state for the same evidence.
func RiskClients(start time.Time, c *ClientCounts, lastArrival time.Duration, arrived bool) ([]time.Duration, RiskFrom) {
	from := RiskFrom{Unseen: 1}
	since := []time.Duration{0}
	if c == nil {
		if arrived {
			from.Sending = 1
			since = append(since, max(lastArrival, 0))
		}
		return since, from
	}
	from.Holding, from.Sending, from.NoEvidence = c.Holding, c.Sending, c.NoEvidence
	sent := time.Duration(0)
	if !c.LastSent.IsZero() {
		sent = max(c.LastSent.Sub(start), 0)
	}
	for range c.Holding + c.NoEvidence {
		since = append(since, 0)
	}
	for range c.Sending {
		since = append(since, sent)
	}
	return since, from
}
