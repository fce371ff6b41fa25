// Package plan answers the question the user's report ends with: "what should each timeout
// be, and who waits for whom?". From a few facts about the workload (request latency, how
// late the slowest client learns that the pod is gone, how long the app needs to finish its
// in-flight work) and the kind of sidecar, it derives every bound of the pod's termination:
// meshdrain's deadline, terminationGracePeriodSeconds, and the sidecar setting that keeps
// the proxy serving until the app has finished (Istio's Envoy, or a Linkerd proxy: see
// linkerd.go). It is a plain function so `meshdrain simulate` replays exactly the numbers
// `meshdrain plan` recommends.
package plan

import (
	"fmt"
	"time"
)

// Bounds past which an input is more likely a typo than a measurement.
const (
	// implausibleEDSLag: endpoint updates reach client sidecars within seconds, a busy
	// istiod's within a minute or two (docs/facts.md §1).
	implausibleEDSLag = 5 * time.Minute
	// implausibleGracePeriod: a pod that takes an hour to stop holds its node's drain.
	implausibleGracePeriod = time.Hour
)

// currentGraceWarnings compares the pod's grace period today with the plan.
func currentGraceWarnings(p Plan) []string {
	cur := p.Input.CurrentGracePeriod
	var w []string
	switch {
	case cur == 0:
	case cur%time.Second != 0:
		w = append(w, fmt.Sprintf("grace period %s is not whole seconds: terminationGracePeriodSeconds is an integer", fmtD(cur)))
	case cur < p.GracePeriod:
		derived := cur - p.AppDrain - KillMargin
		w = append(w, fmt.Sprintf("current grace period %s is too short: meshdrain's deadline would be %s − %s − %s = %s, less than the expected finish + margin %s; raise it to %s",
			fmtD(cur), fmtD(cur), fmtD(p.AppDrain), fmtD(KillMargin), fmtD(derived), fmtD(p.ExpectedFinish+p.Margin), fmtD(p.GracePeriod)))
	case cur > p.GracePeriod:
		extra := p.mesh().keptGraceNote(p, cur)
		if extra == "" {
			extra = fmt.Sprintf("; without --lower-grace-period plan keeps it (meshdrain's deadline then %s)", fmtD(cur-p.AppDrain-KillMargin))
		}
		w = append(w, fmt.Sprintf("current grace period %s is enough; %s suffices (meshdrain returns as soon as the clients stop, so a longer one only matters when the deadline is hit)%s",
			fmtD(cur), fmtD(p.GracePeriod), extra))
	}
	return w
}

// implausibleInputs warns about inputs that are valid but unlikely to be meant: plan still
// derives everything from them, and says which number to check.
func implausibleInputs(in Input) []string {
	var w []string
	if in.EDSLag > implausibleEDSLag {
		w = append(w, fmt.Sprintf("--eds-lag %s: endpoint updates reach clients within seconds, minutes at worst; every number here grows with it (is it a typo for %s?)",
			fmtD(in.EDSLag), fmtD(in.EDSLag/time.Hour*time.Second+in.EDSLag%time.Hour/time.Minute*time.Second)))
	}
	if in.CurrentGracePeriod > implausibleGracePeriod {
		w = append(w, fmt.Sprintf("--grace-period %s: a pod that takes over an hour to stop holds up node drains and rollouts; is that meant?", fmtD(in.CurrentGracePeriod)))
	}
	return w
}

// LongGracePeriod is the grace period past which plan warns: a pod that takes longer to
// stop holds up every rollout and node drain by as much, and it usually comes from one input
// that is far off (a p99 in minutes, a lag in tens of minutes), often a typo.
const LongGracePeriod = 10 * time.Minute

// longGraceWarning names the input that drives a grace period over LongGracePeriod, "" when
// the grace period is shorter.
func longGraceWarning(p Plan) string {
	if p.GracePeriod <= LongGracePeriod {
		return ""
	}
	in := p.Input
	if p.GracePeriod > p.SufficientGracePeriod {
		if in.CurrentGracePeriod > implausibleGracePeriod {
			return "" // implausibleInputs has said it of this very input
		}
		return fmt.Sprintf("terminationGracePeriodSeconds %d is over %g minutes: it is the workload's own, which plan keeps (%s would suffice; --lower-grace-period sets it)",
			int(p.GracePeriod/time.Second), LongGracePeriod.Minutes(), fmtD(p.SufficientGracePeriod))
	}
	// Each input's share of the grace period: the app's drain counts once, what delays the
	// expected finish counts with its margin (a quarter more).
	type driver struct {
		share time.Duration
		what  string
	}
	settle := max(p.Quiet, in.P99)
	drivers := []driver{{in.AppDrain, fmt.Sprintf("--app-drain %s", fmtD(in.AppDrain))}}
	if in.AppDrain == DefaultAppDrain(in.P99) {
		drivers[0].what = fmt.Sprintf("--p99 %s (the app's drain, 4 × p99 unless --app-drain says otherwise: %s)", fmtD(in.P99), fmtD(in.AppDrain))
	}
	lagWhat := fmt.Sprintf("--eds-lag %s", fmtD(in.EDSLag))
	if in.EDSLagMedian > 0 {
		lagWhat = fmt.Sprintf("--eds-lag p50=%s,p99=%s with --clients %d (the last client by %s)", fmtD(in.EDSLagMedian), fmtD(in.EDSLag), in.Clients, fmtD(p.LastClientLag))
	}
	drivers = append(drivers, driver{p.LastClientLag * 5 / 4, lagWhat})
	switch {
	case settle == in.P99:
		drivers = append(drivers, driver{settle * 5 / 4, fmt.Sprintf("--p99 %s (the wait for the last request)", fmtD(in.P99))})
	case p.Quiet > in.Quiet && in.ClientPeriod > 0 && p.Quiet == in.ClientPeriod+in.Poll:
		drivers = append(drivers, driver{settle * 5 / 4, fmt.Sprintf("--client-period %s (the quiet window %s)", fmtD(in.ClientPeriod), fmtD(p.Quiet))})
	case p.Quiet > in.Quiet:
		drivers = append(drivers, driver{settle * 5 / 4, fmt.Sprintf("--rps-per-client %g (the quiet window %s)", in.RPSPerClient, fmtD(p.Quiet))})
	default:
		drivers = append(drivers, driver{settle * 5 / 4, fmt.Sprintf("--quiet %s", fmtD(p.Quiet))})
	}
	drivers = append(drivers, driver{in.MinWait * 5 / 4, fmt.Sprintf("--min-wait %s", fmtD(in.MinWait))})
	top := drivers[0]
	for _, d := range drivers[1:] {
		if d.share > top.share {
			top = d
		}
	}
	return fmt.Sprintf("terminationGracePeriodSeconds %d is over %g minutes, mostly from %s: a pod that takes that long to stop holds up rollouts and node drains; check that input",
		int(p.GracePeriod/time.Second), LongGracePeriod.Minutes(), top.what)
}
