// Package linkerdsim is an emulator of a Linkerd proxy (linkerd2-proxy) as meshdrain and its
// users can observe it from inside the pod: an inbound HTTP/1.1 proxy in front of the app
// that counts like the real proxy, an admin port with /metrics (the real metric names and
// labels), /ready, /live and /shutdown, and the proxy's termination: on SIGTERM it stops
// accepting at once (inbound and admin), lets each open HTTP connection finish the request
// in hand and close, and exits when none is left or when its shutdown grace period ends.
// When that SIGTERM comes depends on the injection: a native sidecar gets it only after the
// app containers have exited; a classic one at the pod's deletion, or after its
// proxy-wait-before-exit-seconds preStop sleep.
//
// It exists for the same reason as package envoysim: no real proxy can run in meshdrain's
// tests or a user's CI, and a mock that only answers /metrics would hide the races meshdrain
// is built for. pkg/mesh/linkerd/FIDELITY.md lists what is modelled, from which source, and what
// is not. Its shape follows envoysim's (Config, Start, Terminate, AppExited, Kill, Done) so
// that pkg/sim/podsim can drive either behind one small interface.
package linkerdsim

import (
	"errors"
	"fmt"
	"net"
	"time"

	"go.uber.org/zap"

	"github.com/meshdrain/meshdrain/pkg/clock"
)

// Injection is how the proxy was injected, which decides when it gets SIGTERM.
type Injection string

// Injection modes (charts/partials/templates/_proxy.tpl).
const (
	// InjectionNative is a native sidecar (an init container with restartPolicy: Always),
	// Linkerd's default since 2.20: the kubelet sends it SIGTERM only once every app
	// container has exited. It has no preStop.
	InjectionNative Injection = "native"
	// InjectionClassic is a regular container: SIGTERM at the pod's deletion, or after its
	// preStop `sleep proxy-wait-before-exit-seconds`.
	InjectionClassic Injection = "classic"
)

// DefaultShutdownGracePeriod is LINKERD2_PROXY_SHUTDOWN_GRACE_PERIOD's default
// (linkerd/app/src/env.rs DEFAULT_SHUTDOWN_GRACE_PERIOD, linkerd2-proxy#1815).
const DefaultShutdownGracePeriod = 2 * time.Minute

// InboundPort is one of the app's ports: the target port clients address (as it appears in
// the metrics' target_port) and where the emulated inbound listener really listens.
type InboundPort struct {
	// Port is the target port as the metrics name it.
	Port int
	// ListenAddr is where the emulated inbound listener listens; default "127.0.0.1:0".
	ListenAddr string
	// AppAddr is the app's host:port the proxy forwards to.
	AppAddr string
}

// Config describes one emulated proxy. Zero values take the defaults documented per field.
type Config struct {
	Injection Injection // default InjectionNative
	// WaitBeforeExit is config.alpha.linkerd.io/proxy-wait-before-exit-seconds: the classic
	// proxy's preStop sleep. The chart refuses it with a native sidecar, and so does Start.
	WaitBeforeExit time.Duration
	// ShutdownGracePeriod bounds the graceful shutdown (default 2m).
	ShutdownGracePeriod time.Duration
	// ShutdownEndpoint enables POST /shutdown (LINKERD2_PROXY_SHUTDOWN_ENDPOINT_ENABLED).
	ShutdownEndpoint bool
	AdminAddr        string // default "127.0.0.1:0"
	Inbound          []InboundPort
	// PodIP is the address written in target_addr/target_ip labels; it is only a label.
	// Default "127.0.0.1".
	PodIP string
	// ClientID is the clients' mTLS identity in the tls labels; empty means plaintext
	// clients (tls="no_identity",no_tls_reason="no_tls_from_remote").
	ClientID string
	// ProbePaths are the paths of the kubelet's HTTP probes on the app's ports: requests to
	// them are counted on the probe route (route_name="probe"), as the policy controller's
	// default probe route does.
	ProbePaths []string
	// ProxyVersion is proxy_build_info's version label; default "v2.340.0-linkerdsim".
	ProxyVersion string
	// Clock runs the preStop sleep and the shutdown grace period (default the wall clock),
	// so tests run a two-minute grace period in no time.
	Clock  clock.Clock
	Logger *zap.Logger
}

const defaultLoopback = "127.0.0.1:0"

// withDefaults returns cfg with every zero field set, or an error naming the first invalid
// field.
func (cfg Config) withDefaults() (Config, error) {
	if cfg.Injection == "" {
		cfg.Injection = InjectionNative
	}
	switch cfg.Injection {
	case InjectionNative, InjectionClassic:
	default:
		return cfg, fmt.Errorf("unknown injection %q (want native or classic)", cfg.Injection)
	}
	if cfg.WaitBeforeExit < 0 || cfg.ShutdownGracePeriod < 0 {
		return cfg, errors.New("durations must not be negative")
	}
	if cfg.Injection == InjectionNative && cfg.WaitBeforeExit > 0 {
		// The injector fails the same way (linkerd2#12164).
		return cfg, errors.New("proxy.nativeSidecar and waitBeforeExitSeconds cannot be used simultaneously")
	}
	if cfg.ShutdownGracePeriod == 0 {
		cfg.ShutdownGracePeriod = DefaultShutdownGracePeriod
	}
	if cfg.AdminAddr == "" {
		cfg.AdminAddr = defaultLoopback
	}
	if cfg.PodIP == "" {
		cfg.PodIP = "127.0.0.1"
	}
	if net.ParseIP(cfg.PodIP) == nil {
		return cfg, fmt.Errorf("pod IP %q is not an IP address", cfg.PodIP)
	}
	if cfg.ProxyVersion == "" {
		cfg.ProxyVersion = "v2.340.0-linkerdsim"
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	seen := map[int]bool{}
	for i := range cfg.Inbound {
		in := &cfg.Inbound[i]
		if in.Port <= 0 || in.Port > 65535 {
			return cfg, fmt.Errorf("inbound port %d out of range", in.Port)
		}
		if seen[in.Port] {
			return cfg, fmt.Errorf("inbound port %d given twice", in.Port)
		}
		seen[in.Port] = true
		if in.AppAddr == "" {
			return cfg, fmt.Errorf("inbound port %d has no app address", in.Port)
		}
		if in.ListenAddr == "" {
			in.ListenAddr = defaultLoopback
		}
	}
	return cfg, nil
}
