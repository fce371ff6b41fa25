package podsim

import (
	"time"
)

// sidecar is the part of the Envoy emulator the kubelet and the report use. It is an
// interface so that the kubelet's ordering can be unit-tested against a stand-in.
type sidecar interface {
	AdminURL() string
	InboundAddr(port int) string
	// Terminate is the kubelet's action at t0: SIGTERM to pilot-agent (classic,
	// exit-on-zero) or the native sidecar's preStop drain.
	Terminate()
	// AppExited tells a native sidecar that the app containers have exited.
	AppExited()
	Kill()
	Done() <-chan struct{}
	// ExitReason says why Envoy exited, for the timeline.
	ExitReason() string
	Close() error
	// Errors is the sidecar's access log reduced to what the report needs.
	Errors() []sidecarError
}

// sidecarError is one access-log line with a 5xx produced by the sidecar itself: UF (the app
// refused the connection) or UC (the upstream connection to the app was reset).
type sidecarError struct {
	At    time.Time
	Code  int
	Flags string
}

// startSidecarFunc starts a sidecar in front of appAddr for one run.
type startSidecarFunc func(sc Scenario, spec SidecarSpec, strat Strategy, appAddr string) (sidecar, error)

// agentDrainer is a sidecar whose agent drains it at the deletion (Istio's pilot-agent): it
// says when the agent's drain call was answered, or why it failed (envoysim's AgentDrain).
type agentDrainer interface {
	AgentDrain() (answered time.Time, err error)
}
