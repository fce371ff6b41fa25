package kernel

import "time"

// A client that still opens new connections past the lag bound is one of two things: a node
// whose routing is slower than the bound the user gave, or a caller that addresses the pod
// directly (a monitor, a scraper, a health checker polling its IP), which no routing update
// ever reaches. The pod cannot tell them apart for sure; what it can see is the cadence. A
// caller that addresses the pod directly goes on as it did before the removal, at the same
// period; a client that is learning, or one that only now found the pod, does not look like
// that. So a client whose opens past the bound keep the period it had before it (cadence) is
// taken for a direct caller: it is named (Client.AddressesPod) and, unless
// Options.WaitPastBoundOpeners, its activity past the bound no longer counts, so that it does
// not hold the hook to its deadline. Any other client opening past the bound counts as before.
//
// The period is measured on the reads that name the accepts (a poll apart, up to
// DenseReadPolls apart before the bound while the traffic is dense), so it is a mean over
// every open before the bound rather than a single gap, and one below directMinPeriod is not
// judged: there, the read timing is too large a part of a gap to call it steady, and a client
// opening that often is traffic, not a monitor. A monitor slower than half the bound opens
// fewer than directOpensBefore times before it and is not judged either; one that slow does
// not hold the hook anyway, its gaps being longer than the settled quiet window.
const (
	// directOpensBefore is how many opens before the bound the period needs: two gaps.
	directOpensBefore = 3
	// directOpensPast is how many opens past the bound, each at the period, make a direct
	// caller: the first one's gap spans the bound (the client opened steadily across it).
	directOpensPast = 3
	// directMinPeriod is the shortest period judged.
	directMinPeriod = 500 * time.Millisecond
	// directTolerance is how far a gap past the bound may be from the period, as a fraction
	// of it: a poll of read timing at each end, and a monitor's own jitter.
	directTolerance = 0.5
)

// cadence is how one client opens connections, for the judgment above.
type cadence struct {
	first, lastBefore time.Time // its first open, and its latest before the bound
	before            int       // opens before the bound
	last              time.Time // its latest open
	// steadyPast counts its opens past the bound, each at the period; irregular: one was not
	// (or it had no period to keep), and it is never judged a direct caller.
	steadyPast int
	irregular  bool
}

// open records an open at at, named by the read of at.
func (c *cadence) open(at time.Time, pastBound bool) {
	defer func() { c.last = at }()
	if !pastBound {
		if c.before == 0 {
			c.first = at
		}
		c.before++
		c.lastBefore = at
		return
	}
	if c.irregular {
		return
	}
	period, ok := c.period()
	if !ok || !steady(at.Sub(c.last), period) {
		c.irregular = true
		return
	}
	c.steadyPast++
}

// period is the mean gap between its opens before the bound, when there were enough of them
// and it is long enough to judge.
func (c *cadence) period() (time.Duration, bool) {
	if c.before < directOpensBefore {
		return 0, false
	}
	p := c.lastBefore.Sub(c.first) / time.Duration(c.before-1)
	return p, p >= directMinPeriod
}

// steady says whether gap keeps period.
func steady(gap, period time.Duration) bool {
	slack := time.Duration(directTolerance * float64(period))
	return gap >= period-slack && gap <= period+slack
}

// direct says whether the client is taken for a caller that addresses the pod directly.
func (c *cadence) direct() bool { return !c.irregular && c.steadyPast >= directOpensPast }
