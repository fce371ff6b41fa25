// Package envoysim is a faithful emulator of an Istio sidecar's Envoy, as far as meshdrain and
// its users can observe it: the admin API (drain_listeners, healthcheck, ready, server_info,
// stats in text/json/prometheus with the three stat naming variants), a real inbound HTTP/1.1
// proxy that counts like Envoy, Envoy's drain semantics, and pilot-agent's termination modes.
//
// It exists because no real Envoy can run in meshdrain's tests or in a user's CI smoke check,
// and a mock that only answers /stats would hide exactly the races meshdrain is built for
// (connections accepted during a graceful drain, refused after a listener stop, cut at the
// sidecar's exit). FIDELITY.md lists each modelled behaviour with its source and what is not
// modelled.
package envoysim

import (
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"
)

// Profile selects how stat names are written, because meshdrain must read all three variants
// found in the field (docs/facts.md §3).
type Profile string

// Stat naming profiles.
const (
	// ProfileEnvoy is plain Envoy with its default tag extraction (envoy_cluster_name, ...).
	ProfileEnvoy Profile = "envoy"
	// ProfileIstio is an Istio >= 1.23 sidecar: ";"-delimited tag values in text names and
	// un-prefixed Prometheus labels (cluster_name, http_conn_manager_prefix, listener_address).
	ProfileIstio Profile = "istio"
	// ProfileIstioLegacy is an Istio < 1.23 sidecar: the inbound HTTP prefix is not extracted,
	// so it stays in the Prometheus metric name.
	ProfileIstioLegacy Profile = "istio-legacy"
	// ProfileIstio116 is an Istio <= 1.16 sidecar: names as ProfileIstioLegacy, but
	// istio_requests_total comes from the telemetry v2 stats plugin, whose text name puts
	// every tag first and the metric last (reporter=.=destination;.;...;.;istio_requests_total).
	ProfileIstio116 Profile = "istio-1.16"
)

// Inclusion selects which stats the sidecar creates at all, because Istio by default keeps
// only a short inclusion list and the inbound stats meshdrain prefers are then absent.
type Inclusion string

// Inclusion settings.
const (
	// InclusionAll keeps every stat (plain Envoy, or a pod that opted in to inbound stats).
	InclusionAll Inclusion = "all"
	// InclusionIstioDefault keeps only Istio's default inclusion list (plus InclusionPrefixes).
	InclusionIstioDefault Inclusion = "istio-default"
)

// AgentMode selects what the process in front of Envoy does on termination, because that
// decides when the sidecar dies relative to the app (docs/facts.md §1).
type AgentMode string

// pilot-agent modes.
const (
	// AgentNone is a bare Envoy: Terminate is a SIGTERM to Envoy, which exits at once.
	AgentNone AgentMode = "none"
	// AgentClassic drains inboundonly&graceful and exits after TerminationDrainDuration.
	AgentClassic AgentMode = "classic"
	// AgentExitOnZero is EXIT_ON_ZERO_ACTIVE_CONNECTIONS: drain, sleep MinimumDrainDuration,
	// then exit once the listeners' downstream_cx_active sum is 0.
	AgentExitOnZero AgentMode = "exit-on-zero"
	// AgentNative is a native sidecar: Terminate is the proxy's preStop (drain with
	// skip_exit); Envoy exits only on AppExited.
	AgentNative AgentMode = "native"
)

// Drain strategies, as given to Envoy's --drain-strategy.
const (
	DrainImmediate = "immediate"
	DrainGradual   = "gradual"
)

// Inbound port protocols: what Envoy's filter chain for the port is.
const (
	// ProtocolHTTP is an HTTP connection manager and router (the default).
	ProtocolHTTP = "http"
	// ProtocolTCP is a TCP proxy: bytes are piped to the app, Envoy sees connections only.
	ProtocolTCP = "tcp"
	// ProtocolGRPC is an HTTP connection manager on an http2 or grpc port: its clients'
	// sidecars speak HTTP/2 to it, one multiplexed connection each, and its drain sends
	// GOAWAY (docs/facts.md §6b). The emulator still speaks HTTP/1.1 to the app.
	ProtocolGRPC = "grpc"
)

// InboundPort is one inbound port of the pod: the port clients address (as it appears in the
// stat names) and where the emulated listener really listens and forwards to.
type InboundPort struct {
	// Port is the target port as it appears in stat names: inbound|8080||, inbound_0.0.0.0_8080.
	Port int
	// Protocol is ProtocolHTTP (default), ProtocolGRPC or ProtocolTCP.
	Protocol string
	// ListenAddr is where the emulated inbound listener listens; default "127.0.0.1:0".
	ListenAddr string
	// AppAddr is the app's host:port the sidecar forwards to.
	AppAddr string

	// ClusterName, HTTPPrefix and ListenerAddress override the names used in stats. Empty means
	// the profile's default: Istio "inbound|<Port>||", "inbound_<bind>_<Port>", "0.0.0.0_15006";
	// plain Envoy "service_a" (b, c, ...), "ingress_http" (then "ingress_http_<Port>"),
	// "0.0.0.0_<Port>".
	ClusterName     string
	HTTPPrefix      string
	ListenerAddress string
	// TCPPrefix is a TCP port's tcp_proxy stat prefix. Empty: Istio uses the inbound cluster's
	// name, undelimited (tcp.inbound|5432||.downstream_cx_total); plain Envoy "ingress_tcp"
	// (then "ingress_tcp_<Port>").
	TCPPrefix string
}

// Config describes one emulated sidecar. Zero values take the defaults documented per field,
// which are those of an Istio sidecar.
type Config struct {
	Profile   Profile   // default ProfileIstio
	Inclusion Inclusion // default InclusionAll
	// InclusionPrefixes are extra stat name prefixes kept under InclusionIstioDefault, as the
	// sidecar.istio.io/statsInclusionPrefixes annotation does.
	InclusionPrefixes []string
	AdminAddr         string // default "127.0.0.1:0"
	// StatusAddr is where pilot-agent's status port (Istio's 15020) listens, with its POST
	// /drain (DrainNow); "" (the default): none. "127.0.0.1:0" picks a free port (StatusURL).
	StatusAddr string
	Inbound    []InboundPort
	// BindAddress is the address in Istio's inbound HTTP prefix, "0.0.0.0" (default) or a
	// pod IP; it only changes names.
	BindAddress   string
	DrainTime     time.Duration // Envoy --drain-time-s; default 45s (Istio drainDuration)
	DrainStrategy string        // "immediate" (Istio; default) or "gradual" (Envoy's own default)
	// NonGracefulDrainNotifies models Envoy's newest behaviour (runtime guard
	// envoy.reloadable_features.non_graceful_drain_notifies_connections): a drain without
	// graceful also drains existing connections, and skip_exit no longer needs graceful.
	// Default false: the behaviour of the Envoy releases Istio ships (docs/facts.md §2).
	NonGracefulDrainNotifies bool
	// HCMDrainTimeout is the HTTP connection manager's drain_timeout: once a response has
	// carried the drain's Connection: close, the HTTP/1.1 connection stays open this long for
	// its client to close it, then Envoy closes it. Default 5s, Envoy's.
	HCMDrainTimeout time.Duration

	Agent                    AgentMode     // default AgentClassic
	TerminationDrainDuration time.Duration // classic; default 5s
	MinimumDrainDuration     time.Duration // exit-on-zero; default 5s
	ExitOnZeroPoll           time.Duration // exit-on-zero poll; default 1s
	// ExitOnZeroDeadline bounds exit-on-zero as newer pilot-agents do (they reuse
	// terminationDrainDuration as a deadline). Zero: no deadline of its own (docs/facts.md §4).
	ExitOnZeroDeadline time.Duration
	// AgentRequestTimeout bounds pilot-agent's own admin calls; default 2s as pilot-agent.
	AgentRequestTimeout time.Duration

	ExtraClusters int
	Workers       int         // default 2
	AccessLog     io.Writer   // optional: one Envoy-style line per request
	Logger        *zap.Logger // optional

	// EnvoyVersion is reported by /server_info and server.version; default "1.31.0".
	EnvoyVersion string
	// StatsFlushInterval is Envoy's stats_flush_interval: server.uptime is refreshed only at
	// each flush (source/server/server.cc); default 5s.
	StatsFlushInterval time.Duration
}

const (
	defaultDrainTime                = 45 * time.Second
	defaultTerminationDrainDuration = 5 * time.Second
	defaultMinimumDrainDuration     = 5 * time.Second
	defaultExitOnZeroPoll           = time.Second
	defaultAgentRequestTimeout      = 2 * time.Second
	defaultWorkers                  = 2
	defaultStatsFlushInterval       = 5 * time.Second
	defaultHCMDrainTimeout          = 5 * time.Second
	defaultLoopback                 = "127.0.0.1:0"
)

// withDefaults returns cfg with every zero field set to its default, or an error naming the
// first invalid field.
func (cfg Config) withDefaults() (Config, error) {
	if err := cfg.defaultProfile(); err != nil {
		return cfg, err
	}
	if cfg.AdminAddr == "" {
		cfg.AdminAddr = defaultLoopback
	}
	if cfg.BindAddress == "" {
		cfg.BindAddress = "0.0.0.0"
	}
	if err := cfg.defaultDrain(); err != nil {
		return cfg, err
	}
	if err := cfg.defaultAgent(); err != nil {
		return cfg, err
	}
	if cfg.Workers <= 0 {
		cfg.Workers = defaultWorkers
	}
	if cfg.ExtraClusters < 0 {
		return cfg, errors.New("extra clusters must not be negative")
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.EnvoyVersion == "" {
		cfg.EnvoyVersion = "1.31.0"
	}
	if cfg.StatsFlushInterval <= 0 {
		cfg.StatsFlushInterval = defaultStatsFlushInterval
	}
	err := cfg.defaultInbound()
	return cfg, err
}

// defaultProfile sets and checks which Envoy is emulated: its profile and stats inclusion.
func (cfg *Config) defaultProfile() error {
	if cfg.Profile == "" {
		cfg.Profile = ProfileIstio
	}
	switch cfg.Profile {
	case ProfileEnvoy, ProfileIstio, ProfileIstioLegacy, ProfileIstio116:
	default:
		return fmt.Errorf("unknown profile %q (want envoy, istio, istio-legacy or istio-1.16)", cfg.Profile)
	}
	if cfg.Inclusion == "" {
		cfg.Inclusion = InclusionAll
	}
	switch cfg.Inclusion {
	case InclusionAll, InclusionIstioDefault:
	default:
		return fmt.Errorf("unknown inclusion %q (want all or istio-default)", cfg.Inclusion)
	}
	return nil
}

// defaultDrain sets and checks how Envoy drains its listeners.
func (cfg *Config) defaultDrain() error {
	if cfg.DrainTime == 0 {
		cfg.DrainTime = defaultDrainTime
	}
	if cfg.DrainTime < 0 {
		return errors.New("drain time must not be negative")
	}
	if cfg.DrainStrategy == "" {
		cfg.DrainStrategy = DrainImmediate
	}
	if cfg.DrainStrategy != DrainImmediate && cfg.DrainStrategy != DrainGradual {
		return fmt.Errorf("unknown drain strategy %q (want immediate or gradual)", cfg.DrainStrategy)
	}
	if cfg.HCMDrainTimeout == 0 {
		cfg.HCMDrainTimeout = defaultHCMDrainTimeout
	}
	if cfg.HCMDrainTimeout < 0 {
		return errors.New("HCM drain timeout must not be negative")
	}
	return nil
}

// defaultAgent sets and checks the pilot-agent in front of Envoy and its timers.
func (cfg *Config) defaultAgent() error {
	if cfg.Agent == "" {
		cfg.Agent = AgentClassic
	}
	switch cfg.Agent {
	case AgentNone, AgentClassic, AgentExitOnZero, AgentNative:
	default:
		return fmt.Errorf("unknown agent mode %q (want none, classic, exit-on-zero or native)", cfg.Agent)
	}
	if cfg.TerminationDrainDuration == 0 {
		cfg.TerminationDrainDuration = defaultTerminationDrainDuration
	}
	if cfg.MinimumDrainDuration == 0 {
		cfg.MinimumDrainDuration = defaultMinimumDrainDuration
	}
	if cfg.ExitOnZeroPoll <= 0 {
		cfg.ExitOnZeroPoll = defaultExitOnZeroPoll
	}
	if cfg.AgentRequestTimeout <= 0 {
		cfg.AgentRequestTimeout = defaultAgentRequestTimeout
	}
	return nil
}

// defaultInbound checks the inbound ports and sets their listen address and protocol.
func (cfg *Config) defaultInbound() error {
	seen := map[int]bool{}
	for i := range cfg.Inbound {
		in := &cfg.Inbound[i]
		if in.Port <= 0 || in.Port > 65535 {
			return fmt.Errorf("inbound port %d out of range", in.Port)
		}
		if seen[in.Port] {
			return fmt.Errorf("inbound port %d given twice", in.Port)
		}
		seen[in.Port] = true
		if in.AppAddr == "" {
			return fmt.Errorf("inbound port %d has no app address", in.Port)
		}
		if in.ListenAddr == "" {
			in.ListenAddr = defaultLoopback
		}
		switch in.Protocol {
		case "":
			in.Protocol = ProtocolHTTP
		case ProtocolHTTP, ProtocolTCP, ProtocolGRPC:
		default:
			return fmt.Errorf("inbound port %d: unknown protocol %q (want http, grpc or tcp)", in.Port, in.Protocol)
		}
	}
	return nil
}

// istio reports whether the profile is one of Istio's.
func (p Profile) istio() bool {
	return p == ProfileIstio || p == ProfileIstioLegacy || p == ProfileIstio116
}

// ParseInboundPort reads the command line form of an inbound port, "PORT=APP" or
// "PORT=LISTEN>APP" (e.g. "8080=127.0.0.1:15006>127.0.0.1:8080"), with "PORT/tcp" for a TCP
// proxy port and "PORT/grpc" for an HTTP/2 port, so that every front end writes ports the same way.
func ParseInboundPort(spec string) (InboundPort, error) {
	portText, rest, ok := strings.Cut(spec, "=")
	if !ok || rest == "" {
		return InboundPort{}, fmt.Errorf("inbound %q: want PORT[/tcp|/grpc]=APP_ADDR or PORT[/tcp|/grpc]=LISTEN_ADDR>APP_ADDR", spec)
	}
	portText, protocol, _ := strings.Cut(portText, "/")
	if protocol != "" && protocol != ProtocolTCP && protocol != ProtocolHTTP && protocol != ProtocolGRPC {
		return InboundPort{}, fmt.Errorf("inbound %q: protocol %q is not http, grpc or tcp", spec, protocol)
	}
	port, err := strconv.Atoi(portText)
	if err != nil || port <= 0 || port > 65535 {
		return InboundPort{}, fmt.Errorf("inbound %q: bad port %q", spec, portText)
	}
	in := InboundPort{Port: port, AppAddr: rest, Protocol: protocol}
	if listen, app, ok := strings.Cut(rest, ">"); ok {
		in.ListenAddr, in.AppAddr = listen, app
	}
	for _, addr := range []string{in.ListenAddr, in.AppAddr} {
		if addr == "" {
			continue
		}
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return InboundPort{}, fmt.Errorf("inbound %q: %w", spec, err)
		}
	}
	return in, nil
}
