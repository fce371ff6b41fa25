package plan

import "time"

// FromWorkload takes what the workload read with -f says about the pod into in, where the
// flags did not say it (given says whether a flag was): the grace period in force, the
// app's time a replaced sleep left it, and what the mesh's plan reads (its sidecar settings,
// a meshless pod's ports and probes). Unless lowerGrace, the workload's own bounds are kept
// where longer. choices are what plan chose from the manifest where it was not plain, a
// line each for the operator.
func FromWorkload(in *Input, w *Workload, given func(string) bool, lowerGrace bool) (choices []string, err error) {
	if !given("grace-period") {
		in.CurrentGracePeriod = w.GracePeriod
	}
	if w.PreStopOnlySleeps && !w.PreStopIsMeshdrain && w.PreStopSleep > 0 {
		// The app keeps its time after SIGTERM, and a broken configuration holds the pod as
		// long as the sleep did.
		in.ReplacedSleep = w.PreStopSleep
		in.ReplacedAppTime = max(0, w.GracePeriod-w.PreStopSleep)
		if !given("app-drain") && in.ReplacedAppTime >= in.P99 && in.ReplacedAppTime > 0 {
			in.AppDrain = in.ReplacedAppTime
		}
		if !given("fallback-wait") {
			in.FallbackWait = w.PreStopSleep
		}
	}
	mp := meshPlanOf(in.Mesh)
	if mp == nil {
		return nil, nil // normalize names the mesh
	}
	return mp.fromWorkload(in, w, given, lowerGrace)
}

// durations reads the workload's settings in order, stopping at the first error.
func durations(reads ...func() (time.Duration, error)) ([]time.Duration, error) {
	out := make([]time.Duration, len(reads))
	for i, read := range reads {
		d, err := read()
		if err != nil {
			return nil, err
		}
		out[i] = d
	}
	return out, nil
}
