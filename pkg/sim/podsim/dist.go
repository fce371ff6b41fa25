package podsim

import (
	"fmt"
	"time"

	"github.com/meshdrain/meshdrain/pkg/operator/plan"
)

// Dist is plan's lag and latency distribution: the simulator draws from the same one that
// plan sizes from.
type Dist = plan.Dist

// ParseDist reads a distribution the way plan's flags do.
func ParseDist(s string) (Dist, error) { return plan.ParseDist(s) }

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
