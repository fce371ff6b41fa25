package plan

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"time"
)

// z99 is the standard normal quantile at 0.99: a lognormal's P99 is median·exp(z99·σ).
const z99 = 2.3263478740408408

// Dist is a distribution of durations: a constant, or a lognormal fitted through its median
// and its P99. Lognormal because both request latencies and endpoint propagation delays are
// products of many small delays with a long right tail, and because two quantiles are what
// operators actually know ("P99 450ms", "most clients within 1-3s, a few much later").
type Dist struct {
	// Median is the 50th percentile; for a constant it is the value.
	Median time.Duration
	// P99 is the 99th percentile; equal to Median for a constant.
	P99 time.Duration
}

// Constant reports whether d always yields the same value.
func (d Dist) Constant() bool { return d.P99 == d.Median }

// sigma is the lognormal shape parameter implied by the two quantiles.
func (d Dist) sigma() float64 {
	if d.Constant() || d.Median <= 0 {
		return 0
	}
	return math.Log(float64(d.P99)/float64(d.Median)) / z99
}

// LastOf is the lag by which the last of n independent clients has stopped sending, with
// probability q: each client must be under it, so the per-client quantile is q^(1/n). The
// slowest of 50 clients is far later than one client's P99: that is why the plan asks for
// the number of client proxies.
func (d Dist) LastOf(n int, q float64) time.Duration {
	perClient := math.Pow(q, 1/float64(n))
	z := math.Sqrt2 * math.Erfinv(2*perClient-1)
	return time.Duration(float64(d.Median) * math.Exp(d.sigma()*z))
}

// Sample draws one value (the simulator's clients).
func (d Dist) Sample(r *rand.Rand) time.Duration {
	if d.Constant() {
		return d.Median
	}
	v := float64(d.Median) * math.Exp(d.sigma()*r.NormFloat64())
	return time.Duration(v)
}

// String prints d the way ParseDist reads it.
func (d Dist) String() string {
	if d.Constant() {
		return fmtD(d.Median)
	}
	return fmt.Sprintf("p50=%s,p99=%s", fmtD(d.Median), fmtD(d.P99))
}

// ParseDist reads "2s" (a constant) or "p50=1.5s,p99=12s" (a lognormal through both).
func ParseDist(s string) (Dist, error) {
	s = strings.TrimSpace(s)
	if !strings.Contains(s, "=") {
		v, err := time.ParseDuration(s)
		switch {
		case err != nil:
			return Dist{}, fmt.Errorf("distribution %q: want a duration or p50=D,p99=D", s)
		case v < 0:
			return Dist{}, fmt.Errorf("%q: a lag must not be negative", s)
		}
		return Dist{Median: v, P99: v}, nil
	}
	var d Dist
	var seen50, seen99 bool
	for _, part := range strings.Split(s, ",") {
		key, value, ok := strings.Cut(strings.TrimSpace(part), "=")
		v, err := time.ParseDuration(strings.TrimSpace(value))
		if !ok || err != nil || v <= 0 {
			return Dist{}, fmt.Errorf("distribution %q: %q is not name=positive duration", s, part)
		}
		switch strings.TrimSpace(key) {
		case "p50", "median":
			d.Median, seen50 = v, true
		case "p99":
			d.P99, seen99 = v, true
		default:
			return Dist{}, fmt.Errorf("distribution %q: unknown quantile %q (want p50 and p99)", s, key)
		}
	}
	if !seen50 || !seen99 {
		return Dist{}, fmt.Errorf("distribution %q: give both p50 and p99", s)
	}
	if d.P99 < d.Median {
		return Dist{}, fmt.Errorf("distribution %q: p99 is below p50", s)
	}
	return d, nil
}
