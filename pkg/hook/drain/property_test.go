package drain

import (
	"context"
	"errors"
	"math/rand"
	"sort"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/meshdrain/meshdrain/pkg/clock"
	"github.com/meshdrain/meshdrain/pkg/mesh"
)

// trace is one random traffic history: requests arriving at given times and each in flight
// for a while, polls that fail, and the rule's settings.
type trace struct {
	seed                           int64
	poll, quiet, deadline, minWait time.Duration
	arrivals                       []time.Duration // sorted
	ends                           []time.Duration // ends[i]: when request i completes
	errorRate                      float64
}

func randomTrace(seed int64) trace {
	rng := rand.New(rand.NewSource(seed))
	tr := trace{seed: seed}
	tr.poll = time.Duration(20+rng.Intn(480)) * time.Millisecond
	tr.quiet = tr.poll*2 + time.Duration(rng.Int63n(int64(5*time.Second)))
	// At most ~300 polls per trace keeps 10,000 traces within seconds.
	maxDeadline := 300 * tr.poll
	tr.deadline = tr.quiet + tr.poll + time.Duration(rng.Int63n(int64(maxDeadline)))
	if rng.Intn(3) == 0 {
		tr.minWait = time.Duration(rng.Int63n(int64(tr.deadline)))
	}
	if rng.Intn(4) == 0 {
		tr.errorRate = rng.Float64() * 0.5
	}
	// Traffic: bursts separated by gaps of every size relative to the quiet window, ending
	// anywhere from at once to past the deadline. A third of the traces are steady (every gap
	// shorter than the window), so that only their end can be quiet.
	end := time.Duration(rng.Int63n(int64(tr.deadline) * 3 / 2))
	steady := rng.Intn(3) == 0
	for at := time.Duration(0); at < end; {
		for i := rng.Intn(20); i >= 0 && at < end; i-- {
			tr.arrivals = append(tr.arrivals, at)
			d := time.Duration(rng.Int63n(int64(50 * time.Millisecond)))
			if rng.Intn(10) == 0 {
				d = time.Duration(rng.Int63n(int64(tr.quiet * 2))) // a long request
			}
			tr.ends = append(tr.ends, at+d)
			at += time.Duration(rng.Int63n(int64(20 * time.Millisecond)))
		}
		var gap time.Duration
		switch rng.Intn(3) {
		case 0:
			gap = time.Duration(rng.Int63n(int64(tr.quiet))) // shorter than the window
		case 1:
			gap = tr.quiet - tr.poll + time.Duration(rng.Int63n(int64(2*tr.poll))) // about the window
		default:
			gap = time.Duration(rng.Int63n(int64(tr.quiet * 3)))
		}
		if steady {
			gap = min(gap, tr.quiet/2)
		}
		at += gap
	}
	return tr
}

func (tr trace) arrivedBy(at time.Duration) int {
	return sort.Search(len(tr.arrivals), func(i int) bool { return tr.arrivals[i] > at })
}

func (tr trace) activeAt(at time.Duration) int {
	n := 0
	for i, a := range tr.arrivals {
		if a <= at && at < tr.ends[i] {
			n++
		}
	}
	return n
}

// traceSidecar serves a trace on the fake clock, failing some polls as a flaky admin would.
type traceSidecar struct {
	clock *clock.Fake
	tr    trace
	rng   *rand.Rand
}

var errFlaky = errors.New("GET /stats/prometheus: status 503")

func (s *traceSidecar) Inbound(context.Context, mesh.Selector) (mesh.Snapshot, error) {
	if s.tr.errorRate > 0 && s.rng.Float64() < s.tr.errorRate {
		return mesh.Snapshot{}, errFlaky
	}
	at := s.clock.Now().Sub(t0)
	return httpSnap(float64(s.tr.arrivedBy(at)), float64(s.tr.activeAt(at))), nil
}

func (s *traceSidecar) DrainListeners(context.Context, mesh.DrainMode) error { return nil }

// TestDecisionRuleProperties runs the coordinator over 10,000 random traces on a fake clock
// and checks, for every one: it never decides quiet while a request is in flight, nor within
// --quiet of any arrival; it always ends by the deadline (exactly at it when the deadline is
// the reason); --min-wait is honoured; and when the traffic really stops early enough, with
// every poll answered, it does decide quiet, within two polls of the end of the rule's quiet
// window.
func TestDecisionRuleProperties(t *testing.T) {
	traces := 10000
	if raceEnabled || testing.Short() {
		traces = 1000
	}
	quietCount := 0
	for seed := int64(1); seed <= int64(traces); seed++ {
		tr := randomTrace(seed)
		fake := clock.NewAutoFake(t0)
		cfg := Config{
			DrainMode: mesh.DrainGraceful, Deadline: tr.deadline, Quiet: tr.quiet, MinWait: tr.minWait,
			Poll: tr.poll, ConnectTimeout: time.Second, FallbackWait: time.Second,
			Clock: fake, Logger: zap.NewNop(),
		}
		res := Run(context.Background(), cfg, &traceSidecar{clock: fake, tr: tr, rng: rand.New(rand.NewSource(seed))})
		fail := func(format string, args ...any) {
			t.Helper()
			t.Errorf("seed %d (poll %v quiet %v deadline %v min-wait %v errors %.2f): "+format,
				append([]any{seed, tr.poll, tr.quiet, tr.deadline, tr.minWait, tr.errorRate}, args...)...)
		}
		if res.Elapsed > tr.deadline {
			fail("ended at %v, past the deadline", res.Elapsed)
		}
		if res.Elapsed < tr.minWait {
			fail("ended at %v, before --min-wait", res.Elapsed)
		}
		switch res.Reason {
		case ReasonDeadline:
			if res.Elapsed != tr.deadline {
				fail("deadline reason at %v", res.Elapsed)
			}
		case ReasonQuiet:
			quietCount++
			if n := tr.activeAt(res.Elapsed); n > 0 {
				fail("quiet at %v with %d requests in flight", res.Elapsed, n)
			}
			if last := tr.arrivedBy(res.Elapsed); last > 0 {
				if gap := res.Elapsed - tr.arrivals[last-1]; gap < tr.quiet {
					fail("quiet at %v, only %v after the arrival at %v", res.Elapsed, gap, tr.arrivals[last-1])
				}
			}
		default:
			fail("reason %s", res.Reason)
		}
		// Liveness: traffic over (nothing arrives or is in flight after `over`) early enough
		// and no failed poll: quiet, no later than two polls after it was possible.
		over := time.Duration(0)
		if n := len(tr.arrivals); n > 0 {
			over = tr.arrivals[n-1] + tr.poll // first poll that can see the last arrival
			for _, e := range tr.ends {
				over = max(over, e)
			}
		}
		// The rule's window is at least --quiet and longer for traffic with long pauses
		// (rule_test.go checks how it is computed); the coordinator must end within two
		// polls of it.
		window := max(tr.quiet, res.Window)
		possible := max(over+window, tr.minWait)
		if tr.errorRate == 0 && possible+2*tr.poll < tr.deadline && (res.Reason != ReasonQuiet || res.Elapsed > possible+2*tr.poll) {
			fail("traffic over at %v: %s at %v, want quiet by %v", over, res.Reason, res.Elapsed, possible+2*tr.poll)
		}
	}
	if quietCount < traces/10 || quietCount > traces*9/10 {
		t.Errorf("%d of %d traces ended quiet: the generator does not exercise both outcomes", quietCount, traces)
	}
	t.Logf("%d traces, %d quiet", traces, quietCount)
}
