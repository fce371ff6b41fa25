// Package risk turns a fleet's lag distribution into one figure: the probability that some
// client still routes to the pod at a moment of the drain. A lag is the time from the
// preStop's start to the moment a client applies the pod's removal (its sidecar's EDS update,
// its node's kube-proxy sync); plan learns the distribution from past drains and the
// fleet's histograms (plan --lag-from) and writes it into the hook as --lag-dist.
//
// The model, and where it is wrong (docs/decision-rule.md): clients learn independently, each
// at a lag drawn from the same distribution, which does not change between the drains it was
// learnt from and this one. Clients on one node learn together without a mesh (kube-proxy is
// per node), so counting them apart overstates the figure; a fleet whose lag grew since the
// distribution was learnt, or a first rollout learnt from nothing, understates it.
package risk

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Point is one point of a lag distribution: a share Q of the clients have learnt by At.
type Point struct {
	Q  float64
	At time.Duration
}

// Distribution is a lag distribution: its CDF is piecewise linear through its points, 0
// before the first and 1 from the last, whose Q is 1. A lag bound B is its degenerate case,
// the one point {1, B}: nobody has learnt before B, everybody has at B.
type Distribution struct {
	points []Point
}

// Bound is the degenerate distribution of a lag bound.
func Bound(b time.Duration) Distribution { return Distribution{points: []Point{{1, b}}} }

// New checks points (Q increasing in [0, 1], the last 1; At not decreasing and not negative)
// and returns their distribution.
func New(points []Point) (Distribution, error) {
	if len(points) == 0 {
		return Distribution{}, errors.New("no points")
	}
	for i, p := range points {
		if math.IsNaN(p.Q) || p.Q < 0 || p.Q > 1 {
			return Distribution{}, fmt.Errorf("share %v: want 0 <= q <= 1", p.Q)
		}
		if p.At < 0 {
			return Distribution{}, fmt.Errorf("lag %v: want >= 0", p.At)
		}
		if i > 0 && (p.Q <= points[i-1].Q || p.At < points[i-1].At) {
			return Distribution{}, fmt.Errorf("point %s after %s: shares must increase and lags must not decrease", format(p), format(points[i-1]))
		}
	}
	if last := points[len(points)-1]; last.Q != 1 {
		return Distribution{}, fmt.Errorf("the last point is %s: it must be the whole fleet, 1:LAG", format(last))
	}
	return Distribution{points: append([]Point(nil), points...)}, nil
}

// Parse reads the --lag-dist form, "Q:LAG,..." (e.g. 0:0.4s,0.5:1.2s,0.99:3.5s,1:6s).
func Parse(s string) (Distribution, error) {
	var points []Point
	for _, field := range strings.Split(s, ",") {
		field = strings.TrimSpace(field)
		q, at, ok := strings.Cut(field, ":")
		if !ok {
			return Distribution{}, fmt.Errorf("%q: want SHARE:LAG, e.g. 0.99:3.5s", field)
		}
		share, err := strconv.ParseFloat(q, 64)
		if err != nil {
			return Distribution{}, fmt.Errorf("%q: share %q is not a number", field, q)
		}
		lag, err := time.ParseDuration(at)
		if err != nil {
			return Distribution{}, fmt.Errorf("%q: lag %q is not a duration (e.g. 3.5s)", field, at)
		}
		points = append(points, Point{share, lag})
	}
	return New(points)
}

// String is the --lag-dist form, which Parse reads back.
func (d Distribution) String() string {
	parts := make([]string, len(d.points))
	for i, p := range d.points {
		parts[i] = format(p)
	}
	return strings.Join(parts, ",")
}

func format(p Point) string {
	return strconv.FormatFloat(p.Q, 'g', -1, 64) + ":" + p.At.Round(time.Millisecond).String()
}

// IsZero says that d is no distribution (the hook then behaves as without --lag-dist).
func (d Distribution) IsZero() bool { return len(d.points) == 0 }

// Points are d's points.
func (d Distribution) Points() []Point { return append([]Point(nil), d.points...) }

// Last is the lag by which every client has learnt: the figure is 0 from it on.
func (d Distribution) Last() time.Duration {
	if d.IsZero() {
		return 0
	}
	return d.points[len(d.points)-1].At
}

// CDF is the share of clients that have learnt by at.
func (d Distribution) CDF(at time.Duration) float64 {
	if d.IsZero() {
		return 0
	}
	prev := Point{}
	for i, p := range d.points {
		if at < p.At {
			if i == 0 {
				return 0
			}
			return prev.Q + (p.Q-prev.Q)*float64(at-prev.At)/float64(p.At-prev.At)
		}
		prev = p
	}
	return 1
}

// Quantile is the least lag by which a share q of the clients have learnt.
func (d Distribution) Quantile(q float64) time.Duration {
	if d.IsZero() {
		return 0
	}
	prev := Point{At: d.points[0].At}
	for _, p := range d.points {
		if q <= p.Q {
			if p.Q == prev.Q {
				return p.At
			}
			return prev.At + time.Duration((q-prev.Q)/(p.Q-prev.Q)*float64(p.At-prev.At))
		}
		prev = p
	}
	return d.Last()
}

// Client is one client the figure counts: known not to have learnt by Since (it sent then,
// or it was there when the drain began: 0), and silent from Since on. Rate is how often it
// sends while it still routes to the pod (per second): its silence since then is evidence
// that it has learnt. Zero: its silence says nothing (an idle pooled connection, a client
// nobody has seen).
type Client struct {
	Since time.Duration
	Rate  float64
	// N is how many clients are alike (0 and 1 both mean one): a hook counts its clients by
	// kind, thousands of them at a poll, and works each kind out once.
	N int
}

// StillRouting is the probability that a client still routes to the pod at at, given that
// it had not learnt by since: the distribution's survival from since to at.
func (d Distribution) StillRouting(at, since time.Duration) float64 {
	return d.stillRouting(at, Client{Since: since})
}

// stillRouting is the probability that c still routes to the pod at at, given what is known
// of it: not learnt by c.Since, and silent since then. A client that sends at rate r while it
// routes stays silent for s with probability e^(−r·s) only if it still routes; once it has
// learnt, it is silent for sure. So, by Bayes, with S the survival and the learning moment l
// between Since and at:
//
//	S(at) / (S(at) + ∫ e^(r·(at−l)) dF(l))
//
// which is S(at)/S(Since) when r is 0 (silence says nothing).
func (d Distribution) stillRouting(at time.Duration, c Client) float64 {
	if at <= c.Since {
		return 1
	}
	if 1-d.CDF(c.Since) <= 0 {
		// The distribution says every client had learnt by Since, and this one had not: it
		// is no client the distribution describes (one addressing the pod directly, which
		// never learns, or a fleet slower than the one it was learnt from). The figure
		// leaves it to the quiet window, as the rule does with a client past a lag bound.
		return 0
	}
	survival := 1 - d.CDF(at)
	if survival <= 0 {
		return 0
	}
	learnt := d.weighedLearning(c.Since, at, c.Rate)
	return math.Max(0, math.Min(1, survival/(survival+learnt)))
}

// weighedLearning is ∫ e^(r·(at−l)) dF(l) over since < l ≤ at: the share of clients that
// learnt in that span, each weighed by how much likelier its silence since then is than a
// routing client's. F is linear between points (density q/Δ) and may jump at a point.
func (d Distribution) weighedLearning(since, at time.Duration, rate float64) float64 {
	weigh := func(l time.Duration) float64 { return math.Exp(rate * (at - l).Seconds()) }
	total := 0.0
	prev := Point{}
	for i, p := range d.points {
		lo, hi := max(prev.At, since), min(p.At, at)
		if i > 0 && hi > lo && p.At > prev.At {
			density := (p.Q - prev.Q) / (p.At - prev.At).Seconds()
			if rate == 0 {
				total += density * (hi - lo).Seconds()
			} else {
				// ∫ e^(r·(at−l)) dl over [lo, hi], in a form that overflows to +Inf (the
				// silence rules the client out) rather than to Inf − Inf.
				total += density / rate * weigh(hi) * math.Expm1(rate*(hi-lo).Seconds())
			}
		}
		// A jump: the first point's share is reached at once at its lag, as is a share at
		// a lag equal to the previous point's.
		jump := p.Q
		if i > 0 {
			jump = 0
			if p.At == prev.At {
				jump = p.Q - prev.Q
			}
		}
		if jump > 0 && p.At > since && p.At <= at {
			total += jump * weigh(p.At)
		}
		prev = p
	}
	return total
}

// Figure is the probability that at least one of the clients still routes to the pod at at:
// 1 − Π(1 − still routing)^N.
func (d Distribution) Figure(at time.Duration, clients []Client) float64 {
	none := 1.0
	for _, c := range clients {
		none *= math.Pow(1-d.stillRouting(at, c), float64(max(c.N, 1)))
	}
	return 1 - none
}

// Within is the earliest moment from at on at which Figure(·, clients) is at most p, to a
// millisecond; d.Last() at the latest (the figure only falls with time, as long as the
// clients stay silent).
func (d Distribution) Within(p float64, at time.Duration, clients []Client) time.Duration {
	if d.Figure(at, clients) <= p {
		return at
	}
	lo, hi := at, max(at, d.Last())
	for hi-lo > time.Millisecond {
		mid := lo + (hi-lo)/2
		if d.Figure(mid, clients) <= p {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi
}
