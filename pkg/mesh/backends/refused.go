package backends

import (
	"fmt"

	"github.com/meshdrain/meshdrain/pkg/mesh"
)

// Given are the flags, beside --admin and the selector's, that some mesh refuses. A command
// sets the ones it has (prestop, status and check share most, not all), so that each refusal
// is written once, here, whichever command meets it.
type Given struct {
	// InboundListenerPorts: --inbound-listener-port (prestop, status), an Envoy sidecar's.
	InboundListenerPorts bool
	// DrainAtEnd: prestop's --drain-at end, which defers a sidecar's drain call.
	DrainAtEnd bool
	// RegimeB: check's --drain-at end, which judges whether an Envoy sidecar drains on its
	// own before meshdrain's call.
	RegimeB bool
	// DrainMode is prestop's --drain-mode when given (""): only Envoy gets a drain call.
	DrainMode mesh.DrainMode
	// AppMetrics: prestop's --app-metrics, the app's own counter beside the kernel.
	AppMetrics bool
	// TerminationDrainDuration and ProxyWaitBeforeExit: check's settings of a classic
	// Istio sidecar and of a classic Linkerd proxy.
	TerminationDrainDuration, ProxyWaitBeforeExit bool
}

// Refused are the problems of the flags o.Mesh refuses, and the warnings of those it only
// ignores, each naming its flag and what to use instead.
func Refused(o Options) (problems []error, warnings []string) {
	refuse := func(format string, args ...any) { problems = append(problems, fmt.Errorf(format, args...)) }
	sel, g := o.Selector, o.Given
	generic := len(sel.Clusters) > 0 || len(sel.HTTPPrefixes) > 0
	if err := sel.Validate(); err != nil {
		refuse("--%v", err)
	}
	if len(sel.Ports) > 0 && generic {
		refuse("--port selects Istio inbound ports; --cluster and --http-prefix name a generic Envoy's stats: use one or the other")
	}
	if g.AppMetrics && o.Mesh != mesh.None {
		refuse("--app-metrics reads the app's own request counter beside the kernel, with --mesh none; a sidecar's stats already count every request")
	}
	switch o.Mesh {
	case mesh.None:
		for _, f := range []struct {
			flag  string
			given bool
		}{{"admin", o.AdminURL != ""}, {"cluster", len(sel.Clusters) > 0}, {"http-prefix", len(sel.HTTPPrefixes) > 0}, {"inbound-listener-port", g.InboundListenerPorts}} {
			if f.given {
				refuse("--%s names a sidecar's setting; --mesh none has no sidecar: watch the app's own ports with --port", f.flag)
			}
		}
		if g.DrainAtEnd {
			refuse("--drain-at end defers a sidecar's drain call; --mesh none has no sidecar and makes none")
		}
		if g.DrainMode != "" && g.DrainMode != mesh.DrainNone {
			warnings = append(warnings, fmt.Sprintf("--drain-mode %s has no effect with --mesh none: there is no sidecar, and meshdrain makes no drain call", g.DrainMode))
		}
	case mesh.Linkerd:
		if generic {
			refuse("--cluster and --http-prefix name Envoy stats; a Linkerd proxy counts per target port: use --port")
		}
		if g.RegimeB {
			refuse("--drain-at end defers an Envoy sidecar's drain (regime b); a Linkerd proxy gets no drain call")
		}
		if g.TerminationDrainDuration {
			refuse("--termination-drain-duration is Istio's pilot-agent setting; a classic Linkerd proxy has --proxy-wait-before-exit")
		}
		if g.DrainMode != "" && g.DrainMode != mesh.DrainNone {
			warnings = append(warnings, fmt.Sprintf("--drain-mode %s has no effect on a Linkerd proxy: it has no drain endpoint, and meshdrain makes no drain call", g.DrainMode))
		}
	case mesh.Istio, mesh.Envoy:
		if g.ProxyWaitBeforeExit {
			refuse("--proxy-wait-before-exit is a Linkerd proxy's setting; a classic Istio sidecar has --termination-drain-duration")
		}
	}
	return problems, warnings
}
