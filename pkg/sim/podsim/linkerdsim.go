package podsim

import (
	"github.com/meshdrain/meshdrain/pkg/mesh"
	"github.com/meshdrain/meshdrain/pkg/sim/linkerdsim"
)

// startLinkerdSidecar runs the linkerdsim emulator as the pod's linkerd-proxy. Unlike Istio,
// Linkerd exports the inbound request and connection metrics meshdrain reads by default, so
// the proxy is the same whatever the strategy.
func startLinkerdSidecar(sc Scenario, spec SidecarSpec, _ Strategy, appAddr string) (sidecar, error) {
	injection := linkerdsim.InjectionNative
	if spec.Mode == SidecarClassic {
		injection = linkerdsim.InjectionClassic
	}
	s, err := linkerdsim.Start(linkerdsim.Config{
		Injection:      injection,
		WaitBeforeExit: sc.scale(spec.WaitBeforeExit),
		// The proxy's own bound (120 s by default) never ends a run: the grace period,
		// at most a few tens of seconds here, comes first.
		ShutdownGracePeriod: sc.scale(linkerdsim.DefaultShutdownGracePeriod),
		Inbound:             []linkerdsim.InboundPort{{Port: sc.Port, AppAddr: appAddr}},
	})
	if err != nil {
		return nil, err
	}
	return linkerdEmulated{s}, nil
}

// linkerdEmulated adapts *linkerdsim.Sidecar to the kubelet's view.
type linkerdEmulated struct{ *linkerdsim.Sidecar }

// Errors are the requests the proxy answered for the app (502 with l5d-proxy-error) or cut.
// They are reported in the same two classes as Envoy's flags, so that one table serves both
// meshes: UF when the app refused the connection, UC when the connection to it was reset.
func (l linkerdEmulated) Errors() []sidecarError {
	var out []sidecarError
	for _, entry := range l.AccessLog() {
		if entry.ProxyError == "" {
			continue
		}
		flags := "UC"
		if entry.AppRefused {
			flags = "UF"
		}
		out = append(out, sidecarError{At: entry.Start, Code: entry.Code, Flags: flags})
	}
	return out
}

// startSidecarFor starts the proxy of spec's mesh.
func startSidecarFor(sc Scenario, spec SidecarSpec, strat Strategy, appAddr string) (sidecar, error) {
	if spec.Mesh == mesh.Linkerd {
		return startLinkerdSidecar(sc, spec, strat, appAddr)
	}
	return startEmulatedSidecar(sc, spec, strat, appAddr)
}
