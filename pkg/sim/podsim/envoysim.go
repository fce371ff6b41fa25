package podsim

import (
	"strings"
	"time"

	"github.com/meshdrain/meshdrain/pkg/sim/envoysim"
)

// hcmDrainTimeout is the HTTP connection manager's drain_timeout, Envoy's default (whether
// Istio's inbound listeners set another is not checked): how long a drained HTTP/1.1
// connection waits for its client to close it.
const hcmDrainTimeout = 5 * time.Second

// startEmulatedSidecar runs the envoysim emulator configured as the pod's istio-proxy. The
// stat names are Istio < 1.23's (the user runs 1.19). Istio's default stats inclusion list
// hides the inbound stats meshdrain reads, so the pod opts in (the annotation meshdrain's
// README asks for) when the strategy is meshdrain; otherwise the sidecar keeps Istio's
// default list, as the user's pods do today.
func startEmulatedSidecar(sc Scenario, spec SidecarSpec, strat Strategy, appAddr string) (sidecar, error) {
	inclusion := envoysim.InclusionIstioDefault
	if strat.Kind == StrategyMeshdrain {
		inclusion = envoysim.InclusionAll
	}
	agent := map[SidecarMode]envoysim.AgentMode{
		SidecarClassic:    envoysim.AgentClassic,
		SidecarExitOnZero: envoysim.AgentExitOnZero,
		SidecarNative:     envoysim.AgentNative,
	}[spec.Mode]
	status := ""
	if spec.holds() {
		status = "127.0.0.1:0" // pilot-agent's status port, for hold's POST /drain
	}
	s, err := envoysim.Start(envoysim.Config{
		StatusAddr:               status,
		Profile:                  envoysim.ProfileIstioLegacy,
		Inclusion:                inclusion,
		Inbound:                  []envoysim.InboundPort{{Port: sc.Port, AppAddr: appAddr, Protocol: sc.Protocol}},
		DrainTime:                sc.scale(spec.DrainDuration),
		DrainStrategy:            envoysim.DrainImmediate,
		HCMDrainTimeout:          sc.scale(hcmDrainTimeout),
		Agent:                    agent,
		TerminationDrainDuration: sc.scale(spec.TerminationDrainDuration),
		MinimumDrainDuration:     sc.scale(spec.MinDrainDuration),
		ExitOnZeroPoll:           sc.scale(exitOnZeroPoll),
		AgentRequestTimeout:      sc.scale(2 * time.Second),
	})
	if err != nil {
		return nil, err
	}
	return emulated{s}, nil
}

// emulated adapts *envoysim.Sidecar to the kubelet's view.
type emulated struct{ *envoysim.Sidecar }

func (e emulated) Errors() []sidecarError {
	var out []sidecarError
	for _, entry := range e.AccessLog() {
		// A TCP proxy's connection has no code: its flags say what the sidecar did.
		tcp := entry.Code == 0 && entry.Method == ""
		if (entry.Code >= 500 || tcp) && (strings.Contains(entry.Flags, "UF") || strings.Contains(entry.Flags, "UC")) {
			out = append(out, sidecarError{At: entry.Start, Code: entry.Code, Flags: entry.Flags})
		}
	}
	return out
}
