package main

import (
	"math"
	"math/rand/v2"
	"time"

	"github.com/meshdrain/meshdrain/pkg/hook/risk"
	"github.com/meshdrain/meshdrain/pkg/sim/podsim"
)

// lagCap is the simulator's cap on a drawn lag (podsim's maxLag): the distributions given to
// the rule end there, as plan's would at the longest lag it saw.
const lagCap = time.Minute

// family is a lag family: its true CDF (before the cap) and its draws.
type family struct {
	name, about string
	cdf         func(t time.Duration) float64
	// model draws the lags of one drain (seed): a slow node is slow for all its clients.
	model func(seed uint64) podsim.LagModel
}

// lognormal is the lognormal of median m and 99th percentile p99, as podsim.Dist draws it.
type lognormal struct{ median, p99 time.Duration }

func (l lognormal) sigma() float64 {
	return math.Log(float64(l.p99)/float64(l.median)) / 2.3263478740408408
}

func (l lognormal) cdf(t time.Duration) float64 {
	if t <= 0 {
		return 0
	}
	return 0.5 * math.Erfc(-math.Log(float64(t)/float64(l.median))/(l.sigma()*math.Sqrt2))
}

func (l lognormal) sample(r *rand.Rand) time.Duration {
	return time.Duration(float64(l.median) * math.Exp(l.sigma()*r.NormFloat64()))
}

// lagFunc is a LagModel from a function.
type lagFunc func(r *rand.Rand, i int) time.Duration

func (f lagFunc) Lag(r *rand.Rand, i int) time.Duration { return f(r, i) }

// slowNodes is how many nodes the slow-node family spreads its clients over (client or
// kube-proxy i on node i mod slowNodes), and slowShare the chance that a node is slow.
const (
	slowNodes = 10
	slowShare = 0.1
)

// families are the lag families of the calibration (issue 39 item 4).
func families() []family {
	ref := lognormal{1500 * time.Millisecond, 12 * time.Second}
	const paretoMin, paretoAlpha = 400 * time.Millisecond, 2.5
	fast, slow := lognormal{800 * time.Millisecond, 3 * time.Second}, lognormal{6 * time.Second, 15 * time.Second}
	return []family{
		{"lognormal", "lognormal, median 1.5s, P99 12s (the simulator's reference EDS lag)", ref.cdf,
			func(uint64) podsim.LagModel {
				return lagFunc(func(r *rand.Rand, _ int) time.Duration { return ref.sample(r) })
			}},
		{"pareto", "Pareto from 0.4s, alpha 2.5 (median 0.53s, P99 2.5s, P99.99 16s): a heavy tail", func(t time.Duration) float64 {
			if t <= paretoMin {
				return 0
			}
			return 1 - math.Pow(float64(paretoMin)/float64(t), paretoAlpha)
		}, func(uint64) podsim.LagModel {
			return lagFunc(func(r *rand.Rand, _ int) time.Duration {
				return time.Duration(float64(paretoMin) * math.Pow(1-r.Float64(), -1/paretoAlpha))
			})
		}},
		{"slow-node", "a slow node among fast ones: each of 10 nodes slow (lognormal 6s/P99 15s) with chance 0.1, else fast (0.8s/P99 3s); a node's clients share its speed", func(t time.Duration) float64 {
			return (1-slowShare)*fast.cdf(t) + slowShare*slow.cdf(t)
		}, func(seed uint64) podsim.LagModel {
			var isSlow [slowNodes]bool
			for n := range isSlow {
				isSlow[n] = rand.New(rand.NewPCG(seed, 1<<40+uint64(n))).Float64() < slowShare
			}
			return lagFunc(func(r *rand.Rand, i int) time.Duration {
				if isSlow[i%slowNodes] {
					return slow.sample(r)
				}
				return fast.sample(r)
			})
		}},
	}
}

// distShares are the shares at which a family's true quantiles are given to the rule: dense
// in the tail, where the figure of tens of clients at a risk of 10⁻³ reads (a share of 10⁻⁵
// per client).
var distShares = []float64{0, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 0.995, 0.999, 0.9995, 0.9999,
	0.99995, 0.99999, 0.999995, 0.999999, 0.9999999}

// distribution is f's true distribution as --lag-dist points: its quantiles at distShares,
// and 1 at the cap.
func (f family) distribution() (risk.Distribution, error) {
	var points []risk.Point
	for _, q := range distShares {
		if at := f.quantile(q); at < lagCap {
			points = append(points, risk.Point{Q: q, At: at})
		}
	}
	return risk.New(append(points, risk.Point{Q: 1, At: lagCap}))
}

// quantile is the least lag by which a share q has learnt, to a microsecond (bisection on
// the CDF).
func (f family) quantile(q float64) time.Duration {
	lo, hi := time.Duration(0), lagCap
	if f.cdf(lo) >= q {
		return lo
	}
	for hi-lo > time.Microsecond {
		mid := lo + (hi-lo)/2
		if f.cdf(mid) >= q {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi
}
