package plan

import (
	"fmt"
	"strings"
	"time"

	"github.com/meshdrain/meshdrain/pkg/hook/drain"
	"github.com/meshdrain/meshdrain/pkg/hook/hold"
	"github.com/meshdrain/meshdrain/pkg/mesh"
)

// istioPlan is the plan of a pod with Istio's Envoy sidecar: its drain settings
// (proxy.istio.io/config), the statistics it must emit, and in regime (b) the istio-proxy
// override whose preStop is meshdrain hold.
type istioPlan struct{}

func (istioPlan) sidecar() bool        { return true }
func (istioPlan) fillsAutoImage() bool { return true }

func (istioPlan) refuses(flag string, _ mesh.Mesh) string { return sidecarRefuses(flag) }

func (istioPlan) normalize(in *Input) []error {
	if in.Sidecar == "" {
		in.Sidecar = Classic
	}
	return nil
}

func (istioPlan) fromWorkload(in *Input, w *Workload, given func(string) bool, lowerGrace bool) ([]string, error) {
	if sc, _ := w.Sidecar(); sc != "" && !given("sidecar") {
		in.Sidecar = sc
	}
	if !given("drain-duration") {
		d, err := w.DrainDuration()
		if err != nil {
			return nil, err
		}
		if d > 0 {
			in.DrainDuration = d
		}
	}
	if !lowerGrace {
		own, err := durations(w.TerminationDrainDuration, w.MinimumDrainDuration)
		if err != nil {
			return nil, err
		}
		in.KeepLonger.TerminationDrainDuration, in.KeepLonger.MinimumDrainDuration = own[0], own[1]
	}
	return nil, nil
}

func (istioPlan) name(p Plan) string { return string(p.Input.Sidecar) }

// recommend adds the sidecar's settings: what keeps Envoy alive until the app has exited, and
// in regime (b) hold's bound.
func (istioPlan) recommend(p *Plan) {
	in := p.Input
	if p.defers() {
		p.HoldBound = hold.Bound(p.GracePeriod, p.AppDrain, 0)
		p.Arithmetic = append(p.Arithmetic, Line{"meshdrain hold returns by (worst)", p.HoldBound,
			fmt.Sprintf("deadline %s + app-drain %s, within grace %s − %s (hold's bound: the proxy's SIGTERM comes when it returns, classic; after the app's exit, native)",
				fmtD(p.Deadline), fmtD(in.AppDrain), fmtD(p.GracePeriod), fmtD(KillMargin))})
	}
	switch in.Sidecar {
	case Classic:
		p.TerminationDrainDuration = p.sufficientTerminationDrain()
		sum := fmt.Sprintf("app exits by %s + %s margin", fmtD(p.AppExitWorst), fmtD(KillMargin))
		why := sum + fmt.Sprintf(" (Istio's default %s kills Envoy under the app)", fmtD(IstioTerminationDrainDuration))
		if p.defers() {
			sum = fmt.Sprintf("app-drain %s + %s margin", fmtD(in.AppDrain), fmtD(KillMargin))
			why = "ceil(" + sum + "): only the fallback's bound (hold's drain call makes pilot-agent exit at once at its SIGTERM; " +
				"without that call pilot-agent drains then, once the app has let go, and waits this long)"
		}
		if own := in.KeepLonger.TerminationDrainDuration; own > p.TerminationDrainDuration {
			p.TerminationDrainDuration = own
			why = "the workload's own, kept: longer than " + sum
		}
		p.SidecarExitWorst = p.TerminationDrainDuration
		if p.defers() {
			p.SidecarExitWorst = p.HoldBound
		}
		p.Arithmetic = append(p.Arithmetic, Line{"terminationDrainDuration", p.TerminationDrainDuration, why})
	case ExitOnZero:
		p.ExitOnZeroActiveConnections = true
		p.MinimumDrainDuration = ceilSecond(p.Deadline)
		why := fmt.Sprintf("ceil(meshdrain deadline %s) (≥ expected finish %s: Envoy keeps accepting while meshdrain may still wait)",
			fmtD(p.Deadline), fmtD(p.ExpectedFinish))
		if own := in.KeepLonger.MinimumDrainDuration; own > p.MinimumDrainDuration {
			p.MinimumDrainDuration = own
			why = fmt.Sprintf("the workload's own, kept: longer than ceil(meshdrain deadline %s)", fmtD(p.Deadline))
		}
		p.SidecarExitWorst = p.GracePeriod
		if p.defers() {
			p.SidecarExitWorst = p.HoldBound // hold's drain call: pilot-agent exits at its SIGTERM
		}
		p.Arithmetic = append(p.Arithmetic, Line{"MINIMUM_DRAIN_DURATION", p.MinimumDrainDuration, why})
	case Native:
		p.SidecarExitWorst = p.GracePeriod
		if p.defers() {
			p.SidecarExitWorst = p.HoldBound
		}
	}
	if in.DrainDuration < p.AppExitWorst {
		p.DrainDuration = ceilSecond(p.AppExitWorst)
		where := ""
		if p.defers() {
			// In regime (b) the drain starts at meshdrain's decision; only a sidecar that drains
			// at the deletion anyway (the override not applied) starts it at t0.
			where = "where the sidecar drains at the deletion anyway, "
		}
		p.Warnings = append(p.Warnings, fmt.Sprintf(
			"drainDuration %s < app exit %s: %sEnvoy's inbound listeners stop accepting at t0 + %s while clients may still send; set proxyConfig drainDuration ≥ %s",
			fmtD(in.DrainDuration), fmtD(p.AppExitWorst), where, fmtD(in.DrainDuration), fmtD(ceilSecond(p.AppExitWorst))))
	}
	p.Warnings = append(p.Warnings, currentGraceWarnings(*p)...)
	p.Warnings = append(p.Warnings, implausibleInputs(in)...)
	if p.defers() {
		p.Warnings = append(p.Warnings, p.deferredNotes()...)
	} else {
		p.Warnings = append(p.Warnings, RegimeANote)
	}
	if in.Sidecar == Classic && !p.defers() {
		p.Warnings = append(p.Warnings, fmt.Sprintf("with Istio's default terminationDrainDuration %s, Envoy is killed at t0 + %s whatever the app's preStop does: "+
			"requests still in flight through it then are cut (503 UC at the caller, not retried) and later clients are refused; "+
			"that is the tail that 'preStop: sleep 15' could not remove", fmtD(IstioTerminationDrainDuration), fmtD(IstioTerminationDrainDuration)))
		p.Warnings = append(p.Warnings, fmt.Sprintf("a classic sidecar lives its full terminationDrainDuration: the old pod stays Terminating until t0+%s "+
			"even when the app exits at about t0+%s (exit-on-zero or native sidecars end it sooner)", fmtD(p.TerminationDrainDuration), fmtD(p.usualFinish()+p.AppDrain)))
	}
}

// defers: the plan is regime (b), Istio's drain deferred until meshdrain decides.
func (p Plan) defers() bool { return p.Input.DeferSidecarDrain && p.Input.Mesh == mesh.Istio }

// DefersSidecarDrain is true when the plan writes regime (b): the istio-proxy override that
// runs `meshdrain hold`, and prestop's --drain-at end.
func (p Plan) DefersSidecarDrain() bool { return p.defers() }

// sufficientTerminationDrain is the terminationDrainDuration a classic sidecar needs. In
// regime (a) pilot-agent kills Envoy that long after the deletion, so it must outlive the
// app's latest exit. In regime (b) its SIGTERM comes when hold returns, once the app has let
// go, and hold's drain call makes it exit at once: the setting only bounds the fallback where
// that call failed, and the app's own drain plus a margin covers what can still be running.
func (p Plan) sufficientTerminationDrain() time.Duration {
	if p.defers() {
		return ceilSecond(p.AppDrain + KillMargin)
	}
	return p.AppExitWorst + KillMargin
}

// RegimeANote is what a plan that leaves Istio's drain at the deletion gives up, in one line.
const RegimeANote = "regime (a), --defer-sidecar-drain=false: the sidecar drains at the deletion, so every response says Connection: close, " +
	"which erases the per-client evidence in dense shapes: meshdrain falls back to silence and stops later after the last client (seconds at 500 clients)"

// deferredNotes say what regime (b) does and what bounds it.
func (p Plan) deferredNotes() []string {
	notes := []string{fmt.Sprintf("regime (b): istio-proxy's preStop, meshdrain hold, keeps Istio from draining until meshdrain prestop has decided, "+
		"so no client is told to close before then and prestop sees each one let go; the override is an istio-proxy container in the pod spec "+
		"(image: auto), which Istio's injector merges into the proxy it injects, in both sidecar modes; the pod is gone once the app has let go "+
		"of the proxy (about t0+%s in the usual rollout), at the latest at hold's bound t0+%s",
		fmtD(p.usualFinish()+p.AppDrain), fmtD(p.HoldBound))}
	if p.Input.Sidecar == Classic {
		notes = append(notes, fmt.Sprintf("terminationDrainDuration %s only bounds the fallback: where the istio-proxy override is not applied "+
			"(an injector older than Istio 1.9), pilot-agent drains at the deletion and kills Envoy at t0+%s, "+
			"as Istio's default %s would; prestop's final event then says the drain was not deferred",
			fmtD(p.TerminationDrainDuration), fmtD(p.TerminationDrainDuration), fmtD(IstioTerminationDrainDuration)))
	}
	return notes
}

// ProxyConfig is the JSON for the proxy.istio.io/config annotation, or "" if the sidecar
// needs no per-pod setting (always, for Linkerd).
func (p Plan) ProxyConfig() string {
	if p.Input.Mesh != mesh.Istio {
		return ""
	}
	var fields []string
	if p.DrainDuration > 0 {
		fields = append(fields, fmt.Sprintf(`"drainDuration": "%s"`, fmtD(p.DrainDuration)))
	}
	switch {
	case p.TerminationDrainDuration > 0:
		fields = append(fields, fmt.Sprintf(`"terminationDrainDuration": "%s"`, fmtD(p.TerminationDrainDuration)))
	case p.ExitOnZeroActiveConnections:
		fields = append(fields, fmt.Sprintf(`"proxyMetadata": {"EXIT_ON_ZERO_ACTIVE_CONNECTIONS": "true", "MINIMUM_DRAIN_DURATION": "%s"}`, fmtD(p.MinimumDrainDuration)))
	}
	if len(fields) == 0 {
		return ""
	}
	return "{" + strings.Join(fields, ", ") + "}"
}

// writeSettings prints the pod annotations and the sidecar setting of an Istio plan.
func (istioPlan) writeSettings(ew *errWriter, p Plan) {
	in := p.Input
	writeAnnotations(ew, p, "none needed")
	switch {
	case in.Sidecar == Classic && p.defers():
		ew.printf("  sidecar:                       terminationDrainDuration %s: only the fallback's bound (hold's drain call ends the proxy at its SIGTERM)\n",
			fmtD(p.TerminationDrainDuration))
	case in.Sidecar == Native && p.defers():
		ew.printf("  sidecar:                       none needed: the kubelet stops istio-proxy after the app has exited and hold has returned\n")
		ew.printf("                                 (Kubernetes >= 1.29, Istio >= 1.21; Istio >= 1.27 injects them by default on kubelets >= 1.33)\n")
	case in.Sidecar == Classic:
		ew.printf("  sidecar:                       terminationDrainDuration %s: Envoy outlives the app (Istio's default %s does not)\n",
			fmtD(p.TerminationDrainDuration), fmtD(IstioTerminationDrainDuration))
	case in.Sidecar == ExitOnZero:
		ew.printf("  sidecar:                       EXIT_ON_ZERO_ACTIVE_CONNECTIONS=true, MINIMUM_DRAIN_DURATION=%s (terminationDrainDuration is then ignored)\n",
			fmtD(p.MinimumDrainDuration))
		ew.printf("                                 caveat: idle keep-alive and outbound connections hold Envoy until the grace period; no deadline of its own\n")
	case in.Sidecar == Native:
		ew.printf("  sidecar:                       none needed: the kubelet stops istio-proxy after the app has exited\n")
		ew.printf("                                 (Kubernetes >= 1.29, Istio >= 1.21; Istio >= 1.27 injects them by default on kubelets >= 1.33)\n")
	}
	if p.DrainDuration == 0 {
		ew.printf("  drainDuration:                 keep %s (≥ app exit %s: Envoy accepts until the app is gone); parentShutdownDuration is unused for termination\n",
			fmtD(in.DrainDuration), fmtD(p.AppExitWorst))
	}
}

func (istioPlan) annotations(p Plan) []Annotation {
	out := []Annotation{{StatsInclusionAnnotation, StatsInclusionPrefixes}}
	if cfg := p.ProxyConfig(); cfg != "" {
		out = append(out, Annotation{ProxyConfigAnnotation, cfg})
	}
	if p.Input.Sidecar == Native {
		out = append(out, Annotation{NativeSidecarAnnotation, "true"})
	}
	return out
}

func (istioPlan) prestopArgs(p Plan) []string {
	if p.defers() {
		// Regime (b): nothing drains before the decision, so prestop drains at it.
		return []string{"--drain-at=" + DrainAtEnd}
	}
	return nil
}

func (istioPlan) ownsFlag(p Plan, it prestopToken) bool {
	switch it.name {
	case "mesh":
		// An Istio plan removes another mesh's --mesh; a user's istio, envoy or auto stays.
		return it.value == string(mesh.Linkerd) || it.value == string(mesh.None)
	case "drain-at":
		// Regime (b) is the plan's: prestop drains at its decision. In regime (a) the
		// preStop's own --drain-at stays.
		return p.defers()
	}
	return false
}

func (istioPlan) keptGraceNote(p Plan, cur time.Duration) string {
	if p.Input.Sidecar != Classic {
		return ""
	}
	return fmt.Sprintf("; without --lower-grace-period plan keeps it, with terminationDrainDuration %s (not %s), since meshdrain's deadline becomes %s",
		fmtD(cur), fmtD(p.TerminationDrainDuration), fmtD(cur-p.AppDrain-KillMargin))
}

func (istioPlan) derive(e *Edit, binary string) ([]string, error) { return e.deriveProxy(binary) }

func (istioPlan) writeJSON(p Plan, binary string, _ *Edit, out *jsonPlan) {
	out.Inputs["drain_duration"] = fmtD(p.Input.DrainDuration)
	defers := p.defers()
	out.DeferSidecarDrain = &defers
	if defers {
		out.ProxyPrestopCommand = append([]string{binary}, p.HoldArgs()...)
	}
}

func (istioPlan) rolloutCheck(p Plan, e *Edit) []string {
	// In regime (b) terminationDrainDuration is not the proxy's life (hold is): check's rule
	// that it outlive the app's latest exit is regime (a)'s. check instead verifies that the
	// sidecar's own drain is deferred (the override applied).
	var after []string
	switch {
	case p.defers():
		after = []string{"--drain-at=end"}
	case p.TerminationDrainDuration > 0:
		after = []string{"--termination-drain-duration=" + fmtD(p.TerminationDrainDuration)}
	}
	return checkCommand(p, e, nil, after)
}

// timeline: in regime (a) the sidecar drains at t0 by its own kind's rules.
func (istioPlan) timeline(p Plan) []Step {
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
				What: fmt.Sprintf("hears prestop's decision and POSTs pilot-agent /drain: the proxy's next SIGTERM ends it at once; "+
					"then reads the socket table every %s until the app has let go of its ports and of the outbound port %d",
					fmtD(drain.DefaultPoll), hold.DefaultOutboundPort)}}, steps[i+1:]...)...)
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
