package plan

import (
	"fmt"

	"github.com/meshdrain/meshdrain/pkg/mesh"
)

// timeline lays out who does what from t0, for p's sidecar kind. It is derived from the same
// numbers as the recommendation, so the text cannot disagree with the arithmetic.
func timeline(p Plan) []Step {
	if p.Meshless() {
		return meshlessTimeline(p)
	}
	if p.Input.Mesh == mesh.Linkerd {
		steps := append(linkerdTimelineStart(p), clientSteps(p, "the proxy")...)
		return append(append(steps, linkerdTimelineEnd(p)...), killStep(p))
	}
	if p.defers() {
		return deferredTimeline(p)
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

// deferredTimeline is regime (b): istio-proxy's preStop, meshdrain hold, waits for meshdrain
// prestop's decision, so nothing drains before it; prestop drains at its decision, hold then
// asks pilot-agent to drain (its SIGTERM then ends it at once) and returns once the app has let
// go of the proxy. A classic proxy gets its SIGTERM when hold returns, a native one once the app
// has exited and hold has returned: the same manifest, the same order, in both modes.
func deferredTimeline(p Plan) []Step {
	in := p.Input
	proxySIGTERM := "the kubelet holds istio-proxy's SIGTERM until hold returns"
	if in.Sidecar == Native {
		proxySIGTERM = "the kubelet sends istio-proxy no SIGTERM before the app container has exited and hold has returned"
	}
	steps := []Step{
		{Who: "kubelet", What: "pod deleted. Endpoint removal starts, asynchronously (EndpointSlice → istiod → every client sidecar). " +
			"At the same moment the kubelet runs the app container's preStop (meshdrain prestop) and istio-proxy's preStop (meshdrain hold); " +
			proxySIGTERM},
		{Who: "hold", What: "waits for prestop's decision on the pod's channel (@meshdrain-hold): nothing drains Envoy, so no client is told to close; " +
			"each client's pooled connections stay open until it drops this endpoint"},
		{Who: "meshdrain", What: fmt.Sprintf("reports to hold, then reads the inbound request counters and the pod's socket table every %s "+
			"(--drain-at end: no drain yet)", fmtD(in.Poll))},
	}
	steps = append(steps, clientSteps(p, "Envoy")...)
	// clientSteps' meshdrain and kubelet steps end the hook; in regime (b) the drain, the report
	// to hold and hold's own drain call come at that same moment, before the app's SIGTERM.
	for i, s := range steps {
		if s.Who == "meshdrain" && s.At == p.ExpectedFinish {
			steps[i].What = fmt.Sprintf("waits for the clients: no new inbound request for %s and none active, or every pooling client seen to let go (%s); "+
				"then drains the inbound listeners (graceful: Envoy keeps accepting for drainDuration %s, clients still connected get Connection: close), "+
				"tells hold it is done and returns; bounded by --deadline %s, where it does the same and says so",
				fmtD(p.Quiet), meshdrainWaitSum(p), fmtD(max(p.DrainDuration, in.DrainDuration)), fmtD(p.Deadline))
			steps = append(steps[:i+1], append([]Step{{At: p.ExpectedFinish, Worst: p.Deadline, Who: "hold",
				What: "hears prestop's decision and POSTs pilot-agent /drain: the proxy's next SIGTERM ends it at once; " +
					"then reads the socket table every 200ms until the app has let go of its ports and of the outbound port 15001"}}, steps[i+1:]...)...)
			break
		}
	}
	release := Step{At: p.AppExitExpected, Worst: p.HoldBound, Who: "hold",
		What: fmt.Sprintf("the app has let go (two reads in a row): returns, however long after its SIGTERM the app served (where the app cannot be seen, "+
			"--app-drain %s after it); never later than its bound (deadline %s + app-drain %s)", fmtD(p.AppDrain), fmtD(p.Deadline), fmtD(p.AppDrain))}
	exit := Step{At: p.AppExitExpected, Worst: p.HoldBound, Who: "kubelet"}
	switch in.Sidecar {
	case Native:
		exit.What = "the app has exited and hold has returned: sends SIGTERM to the istio-proxy sidecar; pilot-agent, drained by hold, exits at once"
	default:
		exit.What = "hold has returned: sends SIGTERM to istio-proxy; pilot-agent, drained by hold, ends Envoy at once " +
			fmt.Sprintf("(without that drain call it would drain then and wait terminationDrainDuration %s)", fmtD(p.TerminationDrainDuration))
		if in.Sidecar == ExitOnZero {
			exit.What = "hold has returned: sends SIGTERM to istio-proxy; pilot-agent, drained by hold, ends Envoy at once " +
				"(without that drain call it would count connections from MINIMUM_DRAIN_DURATION on)"
		}
	}
	return append(steps, release, exit, killStep(p))
}
