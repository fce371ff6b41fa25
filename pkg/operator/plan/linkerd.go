package plan

import (
	"errors"
	"fmt"
	"time"

	"github.com/meshdrain/meshdrain/pkg/mesh"
	"github.com/meshdrain/meshdrain/pkg/mesh/linkerd"
)

// Meshes are the meshes plan writes a configuration for, for flag help and completion: none
// and ambient are pods without a sidecar (meshless.go).
var Meshes = []mesh.Mesh{mesh.Istio, mesh.Linkerd, mesh.None, Ambient}

// Linkerd annotations (pkg/mesh/linkerd/FIDELITY.md §6).
const (
	// LinkerdInjectAnnotation asks the proxy injector for a proxy ("enabled"); on a
	// namespace it applies to every pod in it.
	LinkerdInjectAnnotation = "linkerd.io/inject"
	// LinkerdNativeSidecarAnnotation chooses the injection per pod. Native is the default
	// since Linkerd 2.20, so "false" is what keeps a pod classic there (linkerd/website,
	// "Native sidecars"); Linkerd 2.19 spelled it config.beta.linkerd.io/..., earlier
	// releases config.alpha.linkerd.io/... (and defaulted to classic).
	LinkerdNativeSidecarAnnotation = "config.linkerd.io/proxy-enable-native-sidecar"
	// LinkerdWaitBeforeExitAnnotation renders a classic proxy's `preStop: sleep N`
	// (charts/partials/templates/_proxy.tpl). With a native sidecar the injector refuses it:
	// "proxy.nativeSidecar and waitBeforeExitSeconds cannot be used simultaneously"
	// (linkerd2#12164), although docs/facts.md §4b calls it ignored.
	LinkerdWaitBeforeExitAnnotation = "config.alpha.linkerd.io/proxy-wait-before-exit-seconds"
	// LinkerdShutdownGracePeriod is LINKERD2_PROXY_SHUTDOWN_GRACE_PERIOD's default: after
	// SIGTERM the proxy waits this long at most for its connections to close.
	LinkerdShutdownGracePeriod = 2 * time.Minute
)

// linkerdNativeKeys are the spellings of the native-sidecar annotation, newest first.
var linkerdNativeKeys = []string{
	LinkerdNativeSidecarAnnotation,
	"config.beta.linkerd.io/proxy-enable-native-sidecar",
	"config.alpha.linkerd.io/proxy-enable-native-sidecar",
}

// LinkerdAdminURL is where meshdrain reads the Linkerd proxy from inside the app container.
const LinkerdAdminURL = linkerd.DefaultAdminURL

// recommendLinkerd adds what a Linkerd proxy needs to the mesh-independent plan. The proxy
// has no drain call and no drain time: it serves normally until SIGTERM, and then stops
// accepting in both directions at once, admin port included (FIDELITY.md §5). So the only
// question is when SIGTERM comes: after the app has exited (native), or when the classic
// proxy's preStop sleep ends.
func (p *Plan) recommendLinkerd() {
	in := p.Input
	switch in.Sidecar {
	case Classic:
		// The app's own outbound calls go through the proxy until the app has exited, so
		// the sleep covers the app's drain too, not only meshdrain's deadline.
		p.WaitBeforeExit = ceilSecond(p.AppExitWorst)
		p.SidecarExitWorst = p.GracePeriod
		why := fmt.Sprintf("ceil(app exits by %s) (SIGTERM comes when this preStop sleep ends, and the proxy then stops accepting in both directions; the grace period leaves it %s more to shut down)",
			fmtD(p.AppExitWorst), fmtD(p.GracePeriod-p.WaitBeforeExit))
		if own := in.KeepLonger.WaitBeforeExit; own > p.WaitBeforeExit {
			p.WaitBeforeExit = own
			why = fmt.Sprintf("the workload's own, kept: longer than ceil(app exits by %s)", fmtD(p.AppExitWorst))
			if own >= p.GracePeriod {
				why += fmt.Sprintf("; the kubelet's SIGKILL at t0+%s ends the sleep first", fmtD(p.GracePeriod))
			}
		}
		p.Arithmetic = append(p.Arithmetic, Line{"proxy-wait-before-exit-seconds", p.WaitBeforeExit, why})
	case Native:
		p.SidecarExitWorst = p.GracePeriod
	}
	if in.Sidecar == Native && in.CurrentWaitBeforeExit > 0 {
		p.Warnings = append(p.Warnings, fmt.Sprintf(
			"the pod sets %s (%s) with a native sidecar: Linkerd's injector refuses that combination (\"proxy.nativeSidecar and waitBeforeExitSeconds cannot be used simultaneously\", linkerd2#12164), "+
				"so the pod may not be created at all, and a native proxy has no preStop to sleep in anyway; remove the annotation (meshdrain's preStop is what holds the app)",
			LinkerdWaitBeforeExitAnnotation, fmtD(in.CurrentWaitBeforeExit)))
	}
	if in.Sidecar == Classic {
		p.Warnings = append(p.Warnings, fmt.Sprintf("with Linkerd's default proxy-wait-before-exit-seconds 0, a classic proxy gets SIGTERM at t0 and stops accepting at once, "+
			"inbound and outbound: clients not yet told that the pod is gone get refused connections, the app's own calls fail, and meshdrain finds the admin port closed "+
			"whatever the app's preStop does"))
		p.Warnings = append(p.Warnings, fmt.Sprintf("a classic proxy sleeps its full proxy-wait-before-exit-seconds: the old pod stays Terminating until t0+%s "+
			"even when the app exits at about t0+%s (native sidecars end it sooner)", fmtD(p.WaitBeforeExit), fmtD(p.usualFinish()+p.AppDrain)))
	}
}

// linkerdAnnotations are the pod annotations a Linkerd plan sets: none for a native sidecar
// (the proxy's metrics need no opt-in), the sleep for a classic one, with the injection
// pinned to classic so that Linkerd >= 2.20 does not make it native and refuse the sleep.
func (p Plan) linkerdAnnotations() []Annotation {
	if p.Input.Sidecar != Classic {
		return nil
	}
	return []Annotation{
		{LinkerdNativeSidecarAnnotation, "false"},
		{LinkerdWaitBeforeExitAnnotation, fmt.Sprint(int(p.WaitBeforeExit / time.Second))},
	}
}

// linkerdTimelineStart is what happens at t0 besides meshdrain's own start.
func linkerdTimelineStart(p Plan) []Step {
	t0 := Step{Who: "kubelet", What: "pod deleted. Endpoint removal starts, asynchronously (EndpointSlice → Linkerd's destination controller → every client proxy). " +
		"At the same moment the kubelet runs the app container's preStop (meshdrain)"}
	var proxy Step
	switch p.Input.Sidecar {
	case Native:
		t0.What += "; linkerd-proxy, a native sidecar, has no preStop and gets SIGTERM only after the app has exited"
		proxy = Step{Who: "linkerd-proxy", What: "keeps serving as before: Linkerd has no drain call, and the proxy stops accepting only at SIGTERM"}
	default:
		t0.What += fmt.Sprintf(" and linkerd-proxy's preStop, sleep %s (%s): the containers of a classic pod stop in no particular order",
			fmtD(p.WaitBeforeExit), LinkerdWaitBeforeExitAnnotation)
		proxy = Step{Who: "linkerd-proxy", What: fmt.Sprintf("keeps serving during its preStop sleep (%s): Linkerd has no drain call, and the proxy stops accepting only at SIGTERM",
			fmtD(p.WaitBeforeExit))}
	}
	return []Step{t0, proxy, {Who: "meshdrain", What: fmt.Sprintf(
		"makes no drain call (a Linkerd proxy has none); reads the proxy's /metrics every %s: request_total per target port, "+
			"and request_total − response_total as the requests in flight", fmtD(p.Input.Poll))}}
}

// linkerdTimelineEnd is the proxy's own end.
func linkerdTimelineEnd(p Plan) []Step {
	if p.Input.Sidecar == Native {
		return []Step{{At: p.AppExitExpected, Worst: p.AppExitWorst, Who: "kubelet", What: fmt.Sprintf(
			"the app has exited: sends SIGTERM to linkerd-proxy, which stops accepting, closes its now idle connections and exits "+
				"(its own bound is the shutdown grace period, %s)", fmtD(LinkerdShutdownGracePeriod))}}
	}
	return []Step{{At: p.WaitBeforeExit, Who: "linkerd-proxy", What: fmt.Sprintf(
		"its preStop sleep ends: SIGTERM. It stops accepting in both directions and closes its connections gracefully, "+
			"no earlier than the app's latest exit (t0+%s), so no request of the app's is in flight through it", fmtD(p.AppExitWorst))}}
}

// writeSettings prints the pod annotations and the proxy setting of a Linkerd plan.
func (linkerdPlan) writeSettings(ew *errWriter, p Plan) {
	writeAnnotations(ew, p, "none needed: the proxy's request and connection metrics are on by default")
	if p.Input.Sidecar == Native {
		ew.printf("  sidecar:                       none needed: the kubelet stops linkerd-proxy after the app has exited\n")
		ew.printf("                                 (native is Linkerd's default since 2.20, Kubernetes >= 1.29; %s: \"true\" asks for it per pod)\n",
			LinkerdNativeSidecarAnnotation)
		ew.printf("                                 do not set %s: the injector refuses it with a native sidecar (linkerd2#12164)\n",
			LinkerdWaitBeforeExitAnnotation)
		return
	}
	ew.printf("  sidecar:                       proxy-wait-before-exit-seconds %d: the proxy's preStop sleep outlives the app (Linkerd's default 0 does not)\n",
		int(p.WaitBeforeExit/time.Second))
	ew.printf("                                 %s: \"false\" keeps the proxy classic on Linkerd >= 2.20, whose injector refuses the sleep with a native sidecar\n",
		LinkerdNativeSidecarAnnotation)
}

// linkerdPlan is the plan of a pod with a Linkerd proxy: no drain call and no drain time, so
// what matters is when the proxy's SIGTERM comes (after the app's exit for a native sidecar,
// when a classic proxy's preStop sleep ends).
type linkerdPlan struct{}

func (linkerdPlan) sidecar() bool        { return true }
func (linkerdPlan) fillsAutoImage() bool { return false }

func (linkerdPlan) refuses(flag string, _ mesh.Mesh) string {
	switch flag {
	case "drain-duration":
		return "--drain-duration is Istio's proxyConfig drainDuration: a Linkerd proxy has no drain time (it stops accepting at SIGTERM)"
	case "defer-sidecar-drain":
		return "--defer-sidecar-drain is Istio's: a Linkerd proxy has no drain call to defer (it stops accepting at SIGTERM)"
	}
	return sidecarRefuses(flag)
}

func (linkerdPlan) normalize(in *Input) []error {
	in.DeferSidecarDrain = false // no drain call to defer
	if in.Sidecar == "" {
		in.Sidecar = Native // Linkerd's default since 2.20
	}
	if in.Sidecar == ExitOnZero {
		return []error{errors.New("sidecar exit-on-zero is Istio's pilot-agent mode (EXIT_ON_ZERO_ACTIVE_CONNECTIONS); a Linkerd proxy is native or classic")}
	}
	return nil
}

func (linkerdPlan) fromWorkload(in *Input, w *Workload, given func(string) bool, lowerGrace bool) ([]string, error) {
	if sc, _ := w.LinkerdSidecar(); sc != "" && !given("sidecar") {
		in.Sidecar = sc
	}
	wait, err := w.WaitBeforeExit()
	if err != nil {
		return nil, err
	}
	in.CurrentWaitBeforeExit = wait
	if !lowerGrace {
		in.KeepLonger.WaitBeforeExit = wait
	}
	return nil, nil
}

func (linkerdPlan) recommend(p *Plan) {
	p.recommendLinkerd()
	p.Warnings = append(append(currentGraceWarnings(*p), implausibleInputs(p.Input)...), p.Warnings...)
}

func (linkerdPlan) timeline(p Plan) []Step {
	steps := append(linkerdTimelineStart(p), clientSteps(p, "the proxy")...)
	return append(append(steps, linkerdTimelineEnd(p)...), killStep(p))
}

func (linkerdPlan) name(p Plan) string { return string(p.Input.Sidecar) + " linkerd-proxy" }

func (linkerdPlan) prestopArgs(Plan) []string {
	return []string{"--mesh=" + string(mesh.Linkerd), "--admin=" + LinkerdAdminURL}
}

func (linkerdPlan) ownsFlag(_ Plan, it prestopToken) bool {
	switch it.name {
	case "mesh":
		return true // a Linkerd plan writes its own
	case "drain-at":
		return false // a Linkerd proxy has no drain: the user's stays, as prestop ignores it
	}
	return false
}

func (linkerdPlan) annotations(p Plan) []Annotation { return p.linkerdAnnotations() }

func (linkerdPlan) keptGraceNote(p Plan, cur time.Duration) string {
	if p.Input.Sidecar != Classic {
		return ""
	}
	return fmt.Sprintf("; without --lower-grace-period plan keeps it, with proxy-wait-before-exit-seconds %d (not %d), since meshdrain's deadline becomes %s",
		int((cur-KillMargin)/time.Second), int(p.WaitBeforeExit/time.Second), fmtD(cur-p.AppDrain-KillMargin))
}

func (linkerdPlan) derive(*Edit, string) ([]string, error) { return nil, nil }

func (linkerdPlan) writeJSON(p Plan, _ string, _ *Edit, out *jsonPlan) {
	out.Mesh = mesh.Linkerd
	if p.Input.CurrentWaitBeforeExit > 0 {
		out.Inputs["current_proxy_wait_before_exit"] = fmtD(p.Input.CurrentWaitBeforeExit)
	}
}

func (linkerdPlan) rolloutCheck(p Plan, e *Edit) []string {
	var after []string
	if p.WaitBeforeExit > 0 {
		after = []string{"--proxy-wait-before-exit=" + fmtD(p.WaitBeforeExit)}
	}
	return checkCommand(p, e, []string{"--mesh=" + string(mesh.Linkerd)}, after)
}
