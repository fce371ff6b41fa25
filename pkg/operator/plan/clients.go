package plan

import (
	"fmt"
	"time"
)

// LastClientConfidence is how often the plan's EDS lag covers the last client of a pod
// deletion when it is derived from a per-client lag distribution: in 99 deletions out of 100
// every client has stopped sending before it. The deadline is sized on it, so meshdrain hits
// its deadline (and the app stops while a late client may still send) about once in a
// hundred pod deletions, and otherwise returns as soon as the clients have stopped.
const LastClientConfidence = 0.99

// roundUp rounds d up to a multiple of step, so derived lags read like the ones people type.
func roundUp(d, step time.Duration) time.Duration {
	if r := d % step; r != 0 {
		return d - r + step
	}
	return d
}

// lastClientLag derives the EDS lag the plan works with. Without Clients it is EDSLag as
// given (the operator's "worst expected" lag of the last client). With Clients and a median,
// EDSLag is one client's P99 and the last of Clients clients is derived from the lognormal:
// the worst at LastClientConfidence, and the typical (the median of the last client's lag).
func lastClientLag(in Input) (worst, typical time.Duration, why string) {
	if in.Clients <= 0 || in.EDSLagMedian <= 0 {
		return in.EDSLag, 0, ""
	}
	d := Dist{Median: in.EDSLagMedian, P99: in.EDSLag}
	worst = roundUp(d.LastOf(in.Clients, LastClientConfidence), 100*time.Millisecond)
	typical = roundUp(d.LastOf(in.Clients, 0.5), 100*time.Millisecond)
	why = fmt.Sprintf("last of %d clients in %d of 100 deletions, each client's lag lognormal with p50 %s, p99 %s (σ %.2f)",
		in.Clients, int(LastClientConfidence*100), fmtD(in.EDSLagMedian), fmtD(in.EDSLag), d.sigma())
	return worst, typical, why
}
