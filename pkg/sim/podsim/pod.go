package podsim

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/meshdrain/meshdrain/pkg/mesh"
	"github.com/meshdrain/meshdrain/pkg/sim/envoysim"
)

// runPod is the kubelet for one pod deletion: it starts the pod and its clients, deletes
// the pod at t0, and applies Kubernetes' termination order until every container is gone.
// trafficOver is called once every client has stopped sending, so that Run can start the
// next run while this one only waits.
func runPod(ctx context.Context, sc Scenario, plans []clientPlan, strat Strategy, spec SidecarSpec,
	startSidecar startSidecarFunc, trafficOver func()) (Result, error) {
	p := newPodRun(sc, plans, strat, spec)
	defer p.release()
	if err := p.start(ctx, startSidecar, trafficOver); err != nil {
		return p.res, err
	}
	if err := sleepUntil(ctx, p.clock.t0); err != nil {
		return p.res, err
	}
	if err := p.deletePod(ctx); err != nil {
		return p.res, err
	}
	if err := p.terminate(ctx); err != nil {
		return p.res, err
	}
	// The clients keep going until each has learned that the pod is gone; what they send
	// after the pod is gone meets refused connections.
	select {
	case <-p.clientsDone:
	case <-ctx.Done():
		return p.res, ctx.Err()
	}
	p.collect()
	return p.res, nil
}

// podRun is one pod deletion in progress: the containers and clients of the run, what the
// kubelet has seen of them, and the result as it is written. Its methods are runPod's steps.
type podRun struct {
	sc    Scenario
	plans []clientPlan
	strat Strategy
	spec  SidecarSpec
	grace time.Duration
	proxy string // the sidecar container's name in the timeline
	clock podClock
	res   Result

	other       *otherReplicas
	app         *app
	side        sidecar
	clients     *fleet
	stopClients context.CancelFunc
	clientsDone chan struct{} // closed once every client has stopped
	hook        *preStop
	// hold is the proxy container's preStop (`meshdrain hold`), where the sidecar runs one.
	hold *proxyHold

	// What the kubelet has seen since t0.
	appStopped, appExited, sideExited, graceOver, holdReturned bool
}

// newPodRun fills in what the plans already fix: the floor (the last client's endpoint
// update) and the traffic's own pauses, which no strategy changes.
func newPodRun(sc Scenario, plans []clientPlan, strat Strategy, spec SidecarSpec) *podRun {
	grace := sc.grace(spec)
	longest, last := trafficPauses(plans, sc.Warmup)
	if spec.holds() {
		spec.holdChannel = newHoldChannel()
	}
	return &podRun{sc: sc, plans: plans, strat: strat, spec: spec, grace: grace, proxy: proxyName(spec),
		res: Result{Strategy: strat.String(), Sidecar: spec.Name, DrainRegime: drainRegime(spec, strat), GracePeriodS: grace.Seconds(),
			LastClientLagS: roundS(lastLag(plans).Seconds()), LastRequestS: roundS((last - sc.Warmup).Seconds()),
			LongestGapS: roundS(longest.Seconds()), LagBoundS: lagBound(spec, strat)}}
}

// lagBound is the hook's --eds-lag-bound in pod seconds, 0 where it runs none.
func lagBound(spec SidecarSpec, strat Strategy) float64 {
	if strat.Kind != StrategyMeshdrain {
		return 0
	}
	return roundS(spec.MeshdrainLagBound.Seconds())
}

// log adds an event to the timeline, at the pod time of a real instant.
func (p *podRun) log(at time.Time, who, what string, args ...any) {
	p.res.Timeline = append(p.res.Timeline, Event{AtS: p.clock.at(at), Who: who, What: fmt.Sprintf(what, args...)})
}

// start brings the world up before t0: the other replicas (where a client sends once it has
// learned the pod is gone), the app, the sidecar in front of it, and the clients, which start
// at once so that the pod has served sc.Warmup of traffic when it is deleted. Pod time starts
// at t0, the end of the warm-up.
func (p *podRun) start(ctx context.Context, startSidecar startSidecarFunc, trafficOver func()) error {
	other, err := startOtherReplicas(p.sc.TimeScale)
	if err != nil {
		return fmt.Errorf("other replicas: %w", err)
	}
	p.other = other
	a, err := startApp(p.sc.Threads, p.sc.TimeScale, p.sc.AppShutdown)
	if err != nil {
		return fmt.Errorf("app: %w", err)
	}
	if p.sc.meshless() {
		a.idleGrace = p.sc.scale(meshlessIdleGrace)
		a.metrics = p.sc.Meshless.AppMetrics
	}
	p.app = a
	side, err := startSidecar(p.sc, p.spec, p.strat, a.Addr())
	if err != nil {
		return fmt.Errorf("sidecar: %w", err)
	}
	p.side = side

	clients := newFleet(p.sc, p.plans, side.InboundAddr(p.sc.Port), other.Addr())
	runCtx, stopClients := context.WithCancel(ctx)
	p.clients, p.stopClients = clients, stopClients
	clients.warm(runCtx)
	begin := time.Now()
	clients.start(runCtx, begin)
	if p.sc.meshless() {
		go runProbes(runCtx, a.Addr(), p.sc.scale(p.sc.Meshless.ProbePeriod), p.sc.scale(connectTimeout))
	}
	clientsDone := make(chan struct{})
	p.clientsDone = clientsDone
	go func() {
		clients.wait()
		close(clientsDone)
		trafficOver()
	}()
	p.clock = podClock{t0: begin.Add(p.sc.scale(p.sc.Warmup)), scale: p.sc.TimeScale}
	return nil
}

// release stops whatever of the run is still going, in the reverse order of start, whether
// the run ended or failed half-way.
func (p *podRun) release() {
	if p.hook != nil {
		p.hook.kill()
	}
	if p.hold != nil {
		p.hold.kill()
		<-p.hold.done
	}
	if p.stopClients != nil {
		p.stopClients()
	}
	if p.side != nil {
		_ = p.side.Close()
	}
	if p.app != nil {
		p.app.Kill()
	}
	if p.other != nil {
		p.other.Close()
	}
}

// deletePod is t0. The endpoint removal starts (the clients learn of it as their plans say),
// and the kubelet starts both containers' termination at once: the sidecar's as its mesh and
// mode say, and the app container's preStop hook.
func (p *podRun) deletePod(ctx context.Context) error {
	now := time.Now()
	p.log(now, "kubelet", "pod deleted: endpoint removal starts (clients learn within %.2fs); preStop %s starts", lastLag(p.plans).Seconds(), p.strat)
	switch {
	case p.spec.holds():
		if err := p.startHold(ctx); err != nil {
			return err
		}
	case !p.spec.DeferDrain:
		p.side.Terminate()
	}
	if !p.sc.meshless() {
		p.log(now, p.proxy, "%s", sidecarOnDeletion(p.spec))
	}
	hook, err := startPreStop(ctx, p.sc, p.spec, p.strat, p.side.AdminURL(), listenerPort(p.side.InboundAddr(p.sc.Port)), p.clients.LastAnswered())
	if err != nil {
		return err
	}
	p.hook = hook
	return nil
}

// sidecarOnDeletion is what the sidecar container does at t0, for the timeline.
func sidecarOnDeletion(spec SidecarSpec) string {
	switch {
	case spec.Mesh == mesh.Linkerd && spec.Mode == SidecarNative:
		return "native sidecar: no preStop, keeps serving until the app has exited (Linkerd has no drain call)"
	case spec.Mesh == mesh.Linkerd && spec.WaitBeforeExit > 0:
		return fmt.Sprintf("preStop: sleep %s (proxy-wait-before-exit-seconds), serving meanwhile", fmtD(spec.WaitBeforeExit))
	case spec.Mesh == mesh.Linkerd:
		return "SIGTERM: stops accepting in both directions, finishes the requests in hand"
	case spec.holds() && spec.Mode == SidecarNative:
		return "native sidecar, preStop meshdrain hold: no drain; Envoy serves as before until meshdrain drains it, and is SIGTERMed once the app has exited and hold has returned"
	case spec.holds():
		return "classic sidecar, preStop meshdrain hold: no SIGTERM, no drain; Envoy serves as before until meshdrain drains it, and pilot-agent gets its SIGTERM when hold returns"
	case spec.Mode == SidecarNative && spec.DeferDrain:
		return "native sidecar, preStop overridden: no drain; Envoy serves as before until meshdrain drains it and the app has exited"
	case spec.Mode == SidecarNative:
		return "native sidecar preStop: drain inbound listeners; Envoy stays until the app has exited"
	case spec.Mode == SidecarExitOnZero:
		return fmt.Sprintf("SIGTERM: pilot-agent drains inbound listeners, exits on zero connections after %s", fmtD(spec.MinDrainDuration))
	default:
		return fmt.Sprintf("SIGTERM: pilot-agent drains inbound listeners, will SIGKILL Envoy at %s", fmtD(spec.TerminationDrainDuration))
	}
}

// drainRegime says who drains the pod's sidecar, and when (docs/decision-rule.md, "The two
// drain regimes"): what the per-client evidence can see depends on it, so each row says it.
func drainRegime(spec SidecarSpec, strat Strategy) string {
	switch {
	case spec.Mesh == mesh.Linkerd:
		return "no drain regime: Linkerd has no drain call; the proxy stops accepting at its SIGTERM"
	case spec.Mesh == MeshNone:
		return "no sidecar: nothing drains; the app's own SIGTERM handling closes its connections"
	case spec.holds() && strat.Kind == StrategyMeshdrain:
		return "drain regime (b): the sidecar's drain is deferred by meshdrain hold until meshdrain's --drain-at end"
	case spec.holds():
		return "drain regime (b) without meshdrain: meshdrain hold drains the sidecar (pilot-agent /drain) once the app's hook is over"
	case spec.DeferDrain && strat.Kind == StrategyMeshdrain:
		return "drain regime (b): the sidecar's drain is deferred until meshdrain's --drain-at end"
	case spec.DeferDrain:
		return "the sidecar's drain at the deletion is turned off and no meshdrain drains it: nothing drains before the app exits"
	case spec.MeshdrainDrainAtEnd && strat.Kind == StrategyMeshdrain:
		return "drain regime (a), though meshdrain runs --drain-at end: the sidecar still drains at the deletion"
	case spec.Mode == SidecarNative:
		return "drain regime (a): the sidecar drains at the deletion (the native sidecar's preStop)"
	default:
		return "drain regime (a): the sidecar drains at the deletion (pilot-agent, at its SIGTERM)"
	}
}

// terminate is the kubelet from t0 until the app and the sidecar have both exited: each
// container's end is answered as Kubernetes does, and the grace period's SIGKILL ends
// whatever is left. A hook still running once both have exited is killed and waited for, so
// that no process of this run outlives it.
func (p *podRun) terminate(ctx context.Context) error {
	graceTimer := time.NewTimer(p.sc.scale(p.grace))
	defer graceTimer.Stop()
	hookDone, appDone, sideDone := p.hook.done, p.app.Done(), p.side.Done()
	var holdDone chan struct{}
	if p.hold != nil {
		holdDone = p.hold.done
	}
	if p.sc.meshless() {
		// No sidecar: the pod is gone when the app is.
		p.sideExited, sideDone = true, nil
	}
	for !(p.appExited && p.sideExited) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-hookDone:
			hookDone = nil
			p.preStopReturned(time.Now())
		case <-appDone:
			appDone = nil
			p.appHasExited()
		case <-sideDone:
			sideDone = nil
			p.sidecarHasExited(time.Now())
		case <-holdDone:
			holdDone = nil
			p.holdHasReturned(time.Now())
		case <-graceTimer.C:
			p.gracePeriodOver(time.Now())
		}
	}
	p.podGone(time.Now())
	if hookDone != nil {
		p.hook.kill()
		<-hookDone
	}
	if holdDone != nil {
		p.hold.kill()
		<-holdDone
		p.recordHold()
	}
	return nil
}

// startHold runs istio-proxy's preStop, meshdrain hold, at t0: it is told the app's real
// port and pilot-agent's /drain on the emulator's status port.
func (p *podRun) startHold(ctx context.Context) error {
	status, ok := p.side.(interface{ StatusURL() string })
	if !ok || status.StatusURL() == "" {
		return fmt.Errorf("sidecar %s runs meshdrain hold but has no pilot-agent status port", p.spec.Name)
	}
	h, err := startHold(ctx, p.sc, holdArgs(p.sc, p.spec, p.spec.holdChannel, status.StatusURL()+"/drain", listenerPort(p.app.Addr())))
	if err != nil {
		return err
	}
	p.hold = h
	return nil
}

// holdHasReturned is the end of the proxy's preStop: a classic proxy gets its SIGTERM now, a
// native one once the app has exited too (KEP-753: preStop, then its turn, then SIGTERM).
func (p *podRun) holdHasReturned(now time.Time) {
	p.holdReturned = true
	ev := p.recordHold()
	ev.ReturnedS = p.clock.at(now)
	p.log(now, "meshdrain hold", "returned: reason=%s (prestop %s) after %.2fs, drain called %t, exit %d", ev.Reason, ev.Prestop, ev.ElapsedPodS, ev.DrainCalled, ev.ExitCode)
	if p.sideExited || p.graceOver {
		return
	}
	switch {
	case p.spec.Mode != SidecarNative:
		p.side.Terminate()
		p.log(now, "kubelet", "the proxy's preStop returned: SIGTERM to pilot-agent")
	case p.appExited:
		p.side.AppExited()
		p.log(now, "kubelet", "the proxy's preStop returned and the app has exited: SIGTERM to the native sidecar")
	}
}

// recordHold puts hold's final event into the result.
func (p *podRun) recordHold() *HoldEvent {
	ev := p.hold.event
	if ev == nil {
		ev = &HoldEvent{Reason: "(no final event)"}
	}
	p.res.Hold = ev
	if p.hold.err != nil && !errors.Is(p.hold.err, errPreStopKilled) {
		p.res.HoldError = p.hold.err.Error()
	}
	return ev
}

// preStopReturned records how the hook ended and sends the app its SIGTERM: the kubelet
// signals a container only after its preStop hook returns.
func (p *podRun) preStopReturned(now time.Time) {
	if ev := p.hook.event; ev != nil {
		p.res.Meshdrain = ev
		p.log(now, "meshdrain", "drain finished: reason=%s after %.2fs, exit %d%s", ev.Reason, ev.ElapsedPodS, ev.ExitCode, ev.statedRisk())
	}
	if p.hook.err != nil {
		p.res.PreStopError = p.hook.err.Error()
	}
	if p.appExited {
		return // killed at the grace period with the container
	}
	p.app.Terminate()
	p.appStopped = true
	p.res.AppStopS = p.clock.at(now)
	p.log(now, "kubelet", "preStop returned: SIGTERM to the app (%s shutdown)", p.sc.AppShutdown)
}

// appHasExited records the app's exit. A native sidecar (an init container with
// restartPolicy Always) is terminated only once the regular containers have exited.
func (p *podRun) appHasExited() {
	p.appExited = true
	exitedAt := p.app.ExitedAt()
	p.res.AppExitS = p.clock.at(exitedAt)
	p.log(exitedAt, "app", "exited")
	if p.spec.Mode == SidecarNative && !p.sideExited && (p.hold == nil || p.holdReturned) {
		p.side.AppExited()
		p.log(time.Now(), "kubelet", "app exited: SIGTERM to the native sidecar, %s exits", p.proxy)
	}
}

// sidecarHasExited records the sidecar's exit. A classic Istio sidecar that exits before the
// grace period was SIGKILLed by pilot-agent at the end of terminationDrainDuration, and the
// result says so.
func (p *podRun) sidecarHasExited(now time.Time) {
	p.sideExited = true
	p.res.SidecarExit = p.clock.at(now)
	switch {
	case p.spec.holds() && !p.graceOver && p.side.ExitReason() != envoysim.ExitTerminationDrainDuration:
		p.log(now, p.proxy, "Envoy exited (%s)", p.side.ExitReason())
	case p.killedWithTheGracePeriod() && !p.graceOver:
		// pilot-agent's timer fired a hair before the kubelet's: the same kill.
		p.killedTogether(now)
	case p.spec.Mesh != mesh.Linkerd && p.spec.Mode == SidecarClassic && !p.graceOver:
		p.res.Killed = true
		p.res.KilledDetail = append(p.res.KilledDetail, fmt.Sprintf("envoy by pilot-agent at %.1fs", p.clock.at(now)))
		p.log(now, "pilot-agent", "terminationDrainDuration over: SIGKILL to Envoy")
	case p.spec.Mesh == mesh.Linkerd:
		p.log(now, p.proxy, "proxy exited (%s)", p.side.ExitReason())
	default:
		p.log(now, p.proxy, "Envoy exited (%s)", p.side.ExitReason())
	}
}

// gracePeriodOver is the kubelet's SIGKILL to every container still running, the preStop
// hook's included.
func (p *podRun) gracePeriodOver(now time.Time) {
	p.graceOver = true
	p.res.Killed = true
	p.log(now, "kubelet", "grace period %s over: SIGKILL", fmtD(p.grace))
	p.hook.kill()
	if p.hold != nil {
		p.hold.kill()
	}
	if !p.appExited {
		p.app.Kill()
		p.res.KilledDetail = append(p.res.KilledDetail, fmt.Sprintf("app by kubelet at %.1fs", p.clock.at(now)))
	}
	if !p.sideExited {
		p.side.Kill()
		if p.killedWithTheGracePeriod() {
			p.killedTogether(now)
		} else {
			p.res.KilledDetail = append(p.res.KilledDetail, fmt.Sprintf("%s by kubelet at %.1fs", p.proxy, p.clock.at(now)))
		}
	}
}

// killedWithTheGracePeriod is a classic Istio sidecar whose terminationDrainDuration ends
// with the grace period, as plan sets it: pilot-agent's kill of Envoy and the kubelet's
// SIGKILL are due at the same moment. In a pod the kubelet's comes first by milliseconds
// (pilot-agent starts its wait only once it has the SIGTERM and has asked Envoy to drain);
// here whichever timer fires first. Either way the row says what plan's timeline says.
func (p *podRun) killedWithTheGracePeriod() bool {
	return p.spec.Mesh != mesh.Linkerd && p.spec.Mode == SidecarClassic && p.spec.TerminationDrainDuration == p.grace
}

// killedTogether records the sidecar's end at a grace period that terminationDrainDuration
// ends with (killedWithTheGracePeriod).
func (p *podRun) killedTogether(now time.Time) {
	p.res.Killed = true
	p.res.KilledDetail = append(p.res.KilledDetail, fmt.Sprintf("%s by kubelet and pilot-agent at %.1fs", p.proxy, p.clock.at(now)))
	p.log(now, "pilot-agent", "terminationDrainDuration %s over, with the grace period: SIGKILL to Envoy", fmtD(p.spec.TerminationDrainDuration))
}

// podGone records the end of the last container. An app that never got its SIGTERM (the
// grace period ended its preStop) stopped serving when it exited.
func (p *podRun) podGone(now time.Time) {
	if !p.appStopped && p.res.AppStopS == 0 {
		p.res.AppStopS = p.res.AppExitS
	}
	p.res.PodGoneS = p.clock.at(now)
	p.log(now, "kubelet", "pod gone")
}

// collect writes into the result what the clients and the sidecar's access log saw, once
// every client has stopped, and orders the timeline.
func (p *podRun) collect() {
	tally := p.countClientFailures()
	p.countSidecarErrors()
	p.log(p.clock.t0.Add(p.sc.scale(lastLag(p.plans))), "clients", "last client stops sending to the pod")
	seen := observedTiming{lateSend: tally.lateSend, lateRemoval: tally.lateRemoval, adminTimeouts: p.hook.adminTimeouts()}
	if agent, ok := p.side.(agentDrainer); ok {
		at, err := agent.AgentDrain()
		seen.agentDrainErr, seen.agentDrained = err, !at.IsZero()
		if seen.agentDrained {
			seen.agentDrainS = p.clock.at(at)
		}
	}
	p.res.Lateness = lateness(p.res, p.sc, seen)
	p.res.Warnings = timingWarnings(p.res, p.strat, p.spec, p.sc.Poll)
	sort.SliceStable(p.res.Timeline, func(i, j int) bool { return p.res.Timeline[i].AtS < p.res.Timeline[j].AtS })
}

// countClientFailures is what the calling applications saw: their requests, their failures
// after retries, and the requests a retry on another replica saved. It returns the tally,
// which also says how late the clients ran.
func (p *podRun) countClientFailures() clientTally {
	tally := p.clients.tally()
	p.res.Requests = tally.requests
	p.res.ClientFailures, p.res.FailuresByKind = tally.failures()
	p.res.Retried = tally.outcomes[outcomeRetriedRefused] + tally.outcomes[outcomeRetried503]
	if len(tally.failedAt) > 0 {
		first, last := p.clock.at(tally.failedAt[0]), p.clock.at(tally.failedAt[len(tally.failedAt)-1])
		p.res.FirstFailureS, p.res.LastFailureS = &first, &last
		p.log(tally.failedAt[0], "clients", "%d client-visible failures between %.2fs and %.2fs", p.res.ClientFailures, first, last)
	}
	return tally
}

// countSidecarErrors is the pod sidecar's own 5xx, by Envoy response flag: what the
// server-side access log shows, which is all an operator without client-side data has.
func (p *podRun) countSidecarErrors() {
	errs := p.side.Errors()
	for _, e := range errs {
		p.res.Sidecar5xx++
		switch {
		case strings.Contains(e.Flags, "UF"):
			p.res.SidecarUF++
		case strings.Contains(e.Flags, "UC"):
			p.res.SidecarUC++
		}
	}
	if len(errs) > 0 {
		p.log(errs[0].At, p.proxy, "%d sidecar 5xx (UF %d, UC %d) between %.2fs and %.2fs",
			p.res.Sidecar5xx, p.res.SidecarUF, p.res.SidecarUC, p.clock.at(errs[0].At), p.clock.at(errs[len(errs)-1].At))
	}
}

// proxyName is the sidecar container's name in the timeline.
func proxyName(spec SidecarSpec) string {
	switch spec.Mesh {
	case mesh.Linkerd:
		return "linkerd-proxy"
	case MeshNone:
		return "no sidecar"
	}
	return "istio-proxy"
}

// sleepUntil waits until at, or returns ctx's error.
func sleepUntil(ctx context.Context, at time.Time) error {
	t := time.NewTimer(time.Until(at))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// listenerPort is the port of an inbound listener's host:port, 0 when there is none.
func listenerPort(addr string) int {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return 0
	}
	n, _ := strconv.Atoi(port)
	return n
}
