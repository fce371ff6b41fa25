package plan

import (
	"fmt"

	"github.com/meshdrain/meshdrain/pkg/mesh"
)

// timeline lays out who does what from t0, for p's sidecar kind. It is derived from the same
// numbers as the recommendation, so the text cannot disagree with the arithmetic.
func timeline(p Plan) []Step {
	if p.Input.Mesh == mesh.Linkerd {
		steps := append(linkerdTimelineStart(p), clientSteps(p, "the proxy")...)
		return append(append(steps, linkerdTimelineEnd(p)...), killStep(p))
	}
	in := p.Input
	steps := []Step{{
		Who: "kubelet",
		What: "pod deleted. Endpoint removal starts, asynchronously (EndpointSlice → istiod → every client sidecar). " +
			"At the same moment the kubelet runs the app container's preStop (meshdrain) and " + sidecarT0(in.Sidecar),
	}}
	switch in.Sidecar {
	case Classic:
		steps = append(steps, Step{Who: "pilot-agent", What: fmt.Sprintf(
			"POSTs /drain_listeners?inboundonly&graceful: Envoy keeps accepting for drainDuration (%s) but answers with Connection: close / GOAWAY; "+
				"then waits terminationDrainDuration (%s) before killing Envoy", fmtD(in.DrainDuration), fmtD(p.TerminationDrainDuration))})
	case ExitOnZero:
		steps = append(steps, Step{Who: "pilot-agent", What: fmt.Sprintf(
			"POSTs /drain_listeners?inboundonly&graceful (Envoy keeps accepting for drainDuration %s, with Connection: close); "+
				"then sleeps MINIMUM_DRAIN_DURATION (%s) before it starts counting Envoy's open connections", fmtD(in.DrainDuration), fmtD(p.MinimumDrainDuration))})
	case Native:
		steps = append(steps, Step{Who: "istio-proxy", What: fmt.Sprintf(
			"its preStop POSTs pilot-agent /drain (graceful, skip_exit): Envoy keeps accepting for drainDuration (%s) with Connection: close, "+
				"and the kubelet will not stop it before the app container has exited", fmtD(in.DrainDuration))})
	}
	joins := "joins the drain already running"
	if in.Sidecar == Native {
		// Envoy queues a repeated graceful drain's completion for the running drain's end
		// (drain_manager_impl.cc): without skip_exit, the listeners then stop.
		joins = fmt.Sprintf("joins the drain already running; the inbound listeners stop at its end, t0+%s, instead of with Envoy", fmtD(in.DrainDuration))
	}
	steps = append(steps, Step{Who: "meshdrain", What: fmt.Sprintf(
		"drains the inbound listeners (graceful; %s), then reads the inbound request counters every %s", joins, fmtD(in.Poll))})
	steps = append(steps, clientSteps(p, "Envoy")...)
	switch in.Sidecar {
	case Classic:
		steps = append(steps, Step{At: p.TerminationDrainDuration, Who: "pilot-agent", What: fmt.Sprintf(
			"terminationDrainDuration %s is over: kills Envoy, %s after the app's latest exit, so no request is in flight through it",
			fmtD(p.TerminationDrainDuration), fmtD(p.TerminationDrainDuration-p.AppExitWorst))})
	case ExitOnZero:
		steps = append(steps, Step{At: max(p.MinimumDrainDuration, p.AppExitExpected), Worst: p.GracePeriod, Who: "pilot-agent", What: fmt.Sprintf(
			"from %s on checks downstream_cx_active every 1s and stops Envoy when it is 0 (after the app has exited and its connections closed); "+
				"it has no deadline of its own: idle keep-alive and outbound connections can hold it until the grace period", fmtD(p.MinimumDrainDuration))})
	case Native:
		steps = append(steps, Step{At: p.AppExitExpected, Worst: p.AppExitWorst, Who: "kubelet", What: "the app has exited: sends SIGTERM to the istio-proxy sidecar, which exits at once"})
	}
	return append(steps, killStep(p))
}

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
	in := p.Input
	sum := fmt.Sprintf("%s + %s + one poll %s", fmtD(p.LastClientLag), fmtD(max(p.Quiet, in.P99)), fmtD(in.Poll))
	if in.MinWait > p.LastClientLag+max(p.Quiet, in.P99) {
		sum = fmt.Sprintf("its --min-wait %s + one poll %s, later than %s + %s", fmtD(in.MinWait), fmtD(in.Poll), fmtD(p.LastClientLag), fmtD(max(p.Quiet, in.P99)))
	}
	return fmt.Sprintf("waits for the clients: no new inbound request for %s and none active → the preStop returns "+
		"(%s); bounded by --deadline %s, where it returns anyway and says so", fmtD(p.Quiet), sum, fmtD(p.Deadline))
}
