package podsim

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

// Sample draws one value.
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
		if err != nil || v < 0 {
			return Dist{}, fmt.Errorf("distribution %q: want a duration or p50=D,p99=D", s)
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

// latencyDist is the app's request latency: the operator knows its P99; the median is taken
// as P99/4.5 (σ ≈ 0.65), the shape of a typical JVM web service whose slow tail comes from
// downstream calls and GC pauses.
func latencyDist(p99 time.Duration) Dist {
	return Dist{Median: time.Duration(float64(p99) / 4.5), P99: p99}
}

// fmtD prints a duration the way flags take it: "5s", "450ms", "1.5s", "2m30s".
func fmtD(d time.Duration) string {
	switch {
	case d == 0:
		return "0s"
	case d%time.Second == 0 && d < time.Minute:
		return fmt.Sprintf("%ds", d/time.Second)
	case d < time.Second && d%time.Millisecond == 0:
		return fmt.Sprintf("%dms", d/time.Millisecond)
	default:
		return d.Round(time.Millisecond).String()
	}
}
