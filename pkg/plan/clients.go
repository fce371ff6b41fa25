package plan

import (
	"fmt"
	"math"
	"time"
)

// LastClientConfidence is how often the plan's EDS lag covers the last client of a pod
// deletion when it is derived from a per-client lag distribution: in 99 deletions out of 100
// every client has stopped sending before it. The deadline is sized on it, so meshdrain hits
// its deadline (and the app stops while a late client may still send) about once in a
// hundred pod deletions, and otherwise returns as soon as the clients have stopped.
const LastClientConfidence = 0.99

// z99 is the standard normal quantile at 0.99: a lognormal's P99 is median·exp(z99·σ).
const z99 = 2.3263478740408408

// lagDistribution is one client sidecar's endpoint-propagation lag: a lognormal through its
// median and its P99, the two numbers istiod's pilot_proxy_convergence_time histogram gives.
// Lognormal because a push's delay is a product of many small delays with a long right tail.
type lagDistribution struct {
	median, p99 time.Duration
}

// sigma is the lognormal shape implied by the two quantiles.
func (d lagDistribution) sigma() float64 {
	return math.Log(float64(d.p99)/float64(d.median)) / z99
}

// lastOf is the lag by which the last of n independent clients has stopped sending, with
// probability q: each client must be under it, so the per-client quantile is q^(1/n). The
// slowest of 50 clients is far later than one client's P99: that is why the plan asks for
// the number of client proxies.
func (d lagDistribution) lastOf(n int, q float64) time.Duration {
	perClient := math.Pow(q, 1/float64(n))
	z := math.Sqrt2 * math.Erfinv(2*perClient-1)
	return time.Duration(float64(d.median) * math.Exp(d.sigma()*z))
}

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
	d := lagDistribution{median: in.EDSLagMedian, p99: in.EDSLag}
	worst = roundUp(d.lastOf(in.Clients, LastClientConfidence), 100*time.Millisecond)
	typical = roundUp(d.lastOf(in.Clients, 0.5), 100*time.Millisecond)
	why = fmt.Sprintf("last of %d clients in %d of 100 deletions, each client's lag lognormal with p50 %s, p99 %s (σ %.2f)",
		in.Clients, int(LastClientConfidence*100), fmtD(in.EDSLagMedian), fmtD(in.EDSLag), d.sigma())
	return worst, typical, why
}
