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
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/meshdrain/meshdrain/pkg/hook/drain"
	"github.com/meshdrain/meshdrain/pkg/mesh"
)

func normalize(in Input) (Input, error) {
	var errs []error
	// A negative one is named below with the other durations: one message per input.
	if in.P99 == 0 {
		errs = append(errs, errors.New("p99 must be > 0: the app's 99th-percentile latency bounds its drain"))
	}
	if in.LagFrom != nil {
		errs = append(errs, in.LagFrom.inputProblems(in)...)
		_, in.EDSLag = in.LagFrom.quantileLag()
	}
	if in.EDSLag == 0 && in.LagFrom == nil {
		errs = append(errs, errors.New("eds-lag must be > 0: the worst time until the last client stops sending"))
	}
	switch {
	case in.Clients < 0:
		errs = append(errs, fmt.Errorf("--clients must not be negative, got %d", in.Clients))
	case in.EDSLagMedian < 0:
		errs = append(errs, fmt.Errorf("--eds-lag p50 must not be negative, got %s", fmtD(in.EDSLagMedian)))
	case in.EDSLagMedian > 0 && in.Clients == 0:
		errs = append(errs, errors.New("an eds-lag distribution (p50=D,p99=D) is one client's lag: give the number of client proxies (clients) so the last one's lag can be derived"))
	case in.Clients > 0 && in.EDSLagMedian == 0:
		errs = append(errs, errors.New("clients needs one client's lag distribution, eds-lag p50=D,p99=D (e.g. istiod's pilot_proxy_convergence_time quantiles); a single eds-lag is already the last client's lag"))
	case in.EDSLagMedian > 0 && in.EDSLag > 0 && in.EDSLag < in.EDSLagMedian:
		errs = append(errs, errors.New("eds-lag p99 is below its p50"))
	}
	if in.Quiet == 0 {
		in.Quiet = DefaultQuiet
	}
	if in.Poll == 0 {
		in.Poll = DefaultPoll
	}
	if in.MinWait == 0 && !in.lagGuards() {
		in.MinWait = drain.DefaultMinWait
	}
	if in.RPSPerClient < 0 {
		errs = append(errs, fmt.Errorf("--rps-per-client must not be negative, got %g", in.RPSPerClient))
	}
	if in.DrainDuration == 0 {
		in.DrainDuration = DefaultDrainDuration
	}
	if in.Mesh == "" {
		in.Mesh = mesh.Istio
	}
	if m := meshPlanOf(in.Mesh); m != nil {
		errs = append(errs, m.normalize(&in)...)
	} else {
		errs = append(errs, fmt.Errorf("mesh %q is not one of %s", in.Mesh, strings.Join(mesh.Names(Meshes...), ", ")))
	}
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{{"--p99", in.P99}, {"--eds-lag", in.EDSLag}, {"--quiet", in.Quiet}, {"--poll", in.Poll}, {"--min-wait", in.MinWait},
		{"--client-period", in.ClientPeriod}, {"--app-drain", in.AppDrain}, {"--grace-period", in.CurrentGracePeriod},
		{"--drain-duration", in.DrainDuration}, {"proxy-wait-before-exit-seconds", in.CurrentWaitBeforeExit}, {"--fallback-wait", in.FallbackWait}} {
		if d.v < 0 {
			errs = append(errs, fmt.Errorf("%s must not be negative, got %s", d.flag, fmtD(d.v)))
		}
	}
	if in.AppDrain == 0 && in.P99 > 0 {
		in.AppDrain = DefaultAppDrain(in.P99)
	}
	if in.AppDrain > 0 && in.AppDrain < in.P99 {
		errs = append(errs, fmt.Errorf("app-drain %s is shorter than p99 %s: requests in flight at SIGTERM would be cut", fmtD(in.AppDrain), fmtD(in.P99)))
	}
	switch in.Sidecar {
	case Classic, ExitOnZero, Native:
	case "": // a meshless pod's: the sidecar plans have theirs from their normalize
	default:
		errs = append(errs, fmt.Errorf("sidecar %q is not one of classic, exit-on-zero, native", in.Sidecar))
	}
	return in, errors.Join(errs...)
}

// DefaultAppDrain is the app drain the plan assumes when none is given: 4 × p99, rounded up
// to a whole second, at least 1s.
func DefaultAppDrain(p99 time.Duration) time.Duration {
	return max(minAppDrain, ceilSecond(appDrainPerP99*p99))
}
