package podsim

import (
	"sort"
	"testing"
	"time"

	"github.com/meshdrain/meshdrain/pkg/hook/drain"
	"github.com/meshdrain/meshdrain/pkg/mesh"
)

// TestRuleAgainstEveryTrafficShape replays the planned arrivals of every traffic shape of the
// benchmark, for many seeds, through meshdrain's decision rule, sampled every poll, with the
// --quiet, --min-wait and --deadline the recommended sidecar (meshdrain plan, told what an
// operator knows of the shape: a schedule, a sparse rate per client) gives: no network, no
// real time, so it checks the rule itself against far more draws than make bench can
// afford (make bench measures the rest: latencies, connections, the real binary). A request
// planned after the rule's stop is a request lost.
func TestRuleAgainstEveryTrafficShape(t *testing.T) {
	seeds := uint64(100)
	if testing.Short() {
		seeds = 10
	}
	// Where the plan's deadline comes before the last client of the shape (never, with the
	// plan's --clients), meshdrain must still lose no more than sleep:15s; everywhere else it
	// must lose nothing.
	lostBy := map[string]int{}
	for _, tr := range Traffics() {
		for seed := uint64(1); seed <= seeds; seed++ {
			sc := tr.Apply(UserScenario())
			sc.Seed = seed
			plans := planClients(sc)
			var arrivals []time.Duration
			for _, p := range plans {
				for _, a := range p.arrivals {
					arrivals = append(arrivals, a-sc.Warmup)
				}
			}
			sort.Slice(arrivals, func(i, j int) bool { return arrivals[i] < arrivals[j] })
			spec, err := RecommendedSidecar(sc)
			if err != nil {
				t.Fatal(err)
			}
			count := func(at time.Duration) int {
				return sort.Search(len(arrivals), func(i int) bool { return arrivals[i] > at })
			}
			observe := func(at time.Duration) drain.Observation {
				n := float64(count(at))
				return drain.Observation{At: at, Signal: mesh.SignalHTTPRequests, Arrivals: &n, Active: new(float64)}
			}
			rule := drain.NewRule(drain.RuleConfig{Quiet: spec.MeshdrainQuiet, MinWait: sc.MinWait, Deadline: spec.MeshdrainDeadline, StreamsWait: sc.StreamsWait,
				ClientPeriod: spec.MeshdrainClientPeriod}, observe(0))
			stop := spec.MeshdrainDeadline
			var d drain.Decision
			for at := sc.Poll; at < spec.MeshdrainDeadline; at += sc.Poll {
				if d = rule.Observe(observe(at)); d.Reason != "" {
					stop = at
					break
				}
			}
			lost := len(arrivals) - count(stop)
			lostBySleep15 := len(arrivals) - count(15*time.Second)
			floor := lastLag(plans)
			if seed <= 3 || lost > 0 {
				t.Logf("%-13s seed %3d: floor %5.2fs, stop %5.2fs (window %5.2fs by %s), lost %d (sleep:15s %d)",
					tr.Name, seed, floor.Seconds(), stop.Seconds(), d.Window.Seconds(), d.Term, lost, lostBySleep15)
			}
			if lost > 0 {
				lostBy[tr.Name]++
				if lost > lostBySleep15 || floor < spec.MeshdrainDeadline {
					t.Errorf("%s seed %d: %d requests arrive after the rule's stop at %v (floor %v, deadline %v, sleep:15s lost %d)",
						tr.Name, seed, lost, stop, floor, spec.MeshdrainDeadline, lostBySleep15)
				}
			}
		}
	}
	t.Logf("%d seeds per shape; seeds with a loss, by shape: %v", seeds, lostBy)
}
