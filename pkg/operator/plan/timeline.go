package plan

import (
	"fmt"
)

// timeline lays out who does what from t0, for p's mesh and sidecar kind. It is derived from
// the same numbers as the recommendation, so the text cannot disagree with the arithmetic.
func timeline(p Plan) []Step { return p.mesh().timeline(p) }

// clientSteps are the mesh-independent middle of the timeline: the clients still sending,
// meshdrain waiting for them, the app answering, stopping and exiting. forwarder names the
// proxy that forwards the late clients' requests to the app.
func clientSteps(p Plan, forwarder string) []Step {
	in := p.Input
	return []Step{
		{Until: p.LastClientLag, Who: "clients", What: fmt.Sprintf(
			"each client sidecar learns of the removal at its own time (%s, the slowest by %s); until then it keeps sending "+
				"new requests here, which %s forwards to the app, still serving", clientsTypical(p), fmtD(p.LastClientLag), forwarder)},
		{At: p.LastRequestDone, Who: "app", What: fmt.Sprintf(
			"answers the last client requests (arrived by %s, each ≤ p99 %s)", fmtD(p.LastClientLag), fmtD(in.P99))},
		{At: p.ExpectedFinish, Worst: p.Deadline, Who: "meshdrain", What: meshdrainWaitStep(p)},
		{At: p.ExpectedFinish, Worst: p.Deadline, Who: "kubelet", What: "sends SIGTERM to the app as soon as its preStop returns"},
		{At: p.AppExitExpected, Worst: p.AppExitWorst, Who: "app", What: fmt.Sprintf(
			"waits for its own in-flight requests (≤ p99 %s) and exits; bounded by --app-drain %s (e.g. Spring Boot server.shutdown=graceful, "+
				"spring.lifecycle.timeout-per-shutdown-phase=%s)", fmtD(in.P99), fmtD(p.AppDrain), fmtD(p.AppDrain))},
	}
}

// killStep is the grace period's end.
func killStep(p Plan) Step {
	return Step{At: p.GracePeriod, Who: "kubelet", What: fmt.Sprintf(
		"terminationGracePeriodSeconds %d is over: SIGKILL to whatever is left (nothing, if the bounds above hold)", int(p.GracePeriod.Seconds()))}
}

// clientsTypical describes how late most clients are: measured when a lag distribution was
// given, the usual 1-3s otherwise.
func clientsTypical(p Plan) string {
	if p.Input.EDSLagMedian > 0 {
		return fmt.Sprintf("half of them within %s, the last of %d typically by %s", fmtD(p.Input.EDSLagMedian), p.Input.Clients, fmtD(p.TypicalLastClientLag))
	}
	return "most within 1-3s"
}

func sidecarT0(s Sidecar) string {
	if s == Native {
		return "the istio-proxy sidecar's preStop; the sidecar itself gets SIGTERM only after the app has exited"
	}
	return "sends SIGTERM to istio-proxy: the containers of a classic pod stop in no particular order"
}

// meshdrainWaitStep is meshdrain's wait in the timeline.
func meshdrainWaitStep(p Plan) string {
	return fmt.Sprintf("waits for the clients: no new inbound request for %s and none active → the preStop returns "+
		"(%s); bounded by --deadline %s, where it returns anyway and says so", fmtD(p.Quiet), meshdrainWaitSum(p), fmtD(p.Deadline))
}

// meshdrainWaitSum is the sum behind meshdrain's expected finish, in words.
func meshdrainWaitSum(p Plan) string {
	in := p.Input
	if in.MinWait > p.LastClientLag+max(p.Quiet, in.P99) {
		return fmt.Sprintf("its --min-wait %s + one poll %s, later than %s + %s", fmtD(in.MinWait), fmtD(in.Poll), fmtD(p.LastClientLag), fmtD(max(p.Quiet, in.P99)))
	}
	return fmt.Sprintf("%s + %s + one poll %s", fmtD(p.LastClientLag), fmtD(max(p.Quiet, in.P99)), fmtD(in.Poll))
}
