// Package podsim replays one pod's termination on one machine: an app with a bounded worker
// pool, its Envoy sidecar (the envoysim emulator), client sidecars that keep sending until
// their own endpoint-propagation lag has passed and that retry like Istio, and a kubelet that
// runs the app's preStop, signals each container and SIGKILLs what is left at the grace
// period. Everything talks real HTTP on loopback, and the preStop "meshdrain" is the real
// binary, so that what a strategy does to traffic is measured rather than argued.
//
// It exists because the failure it shows (requests refused or cut while clients still send
// to a terminating pod) only appears from the interleaving of independent clocks: the
// clients' lags, the app's preStop, pilot-agent's termination timer and the kubelet's grace
// period. A model that runs them for real, at a reduced time scale, is the cheapest honest
// way to compare preStop strategies before touching production, and a CI smoke check.
package podsim

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/meshdrain/meshdrain/pkg/hook/drain"
	"github.com/meshdrain/meshdrain/pkg/mesh"
	"github.com/meshdrain/meshdrain/pkg/operator/plan"
)

// Scenario is the pod and its world. Every duration is in pod time, as the operator states
// it; Run multiplies them by TimeScale.
type Scenario struct {
	// QPS is the rate the clients together send to the pod (open loop: arrivals do not wait
	// for earlier responses, as independent callers do not).
	QPS float64
	// Clients is the number of client sidecars; each has its own keep-alive pool and its own
	// endpoint-propagation lag.
	Clients int
	// Threads is the app's worker pool (Tomcat maxThreads).
	Threads int
	// P99 is the app's 99th-percentile latency.
	P99 time.Duration
	// AppShutdown is what the app does on SIGTERM.
	AppShutdown AppShutdown
	// EDSLag is the distribution of the time from t0 until one client stops sending to the pod.
	EDSLag Dist
	// Retries is the client's retry budget (Istio default 2); 0 shows raw failures.
	Retries int
	// RouteTimeout is the client's route timeout; 0 means none, Istio's default.
	RouteTimeout time.Duration
	// GracePeriod is terminationGracePeriodSeconds.
	GracePeriod time.Duration
	// Warmup is the steady-state traffic before t0, so connections and the worker pool are
	// in use when the pod is deleted.
	Warmup time.Duration
	// Port is the app's target port, as the sidecar's stat names carry it.
	Port int
	// Traffic names the preset the scenario comes from (Traffics), for the output.
	Traffic string

	// Shape is the clients' arrival pattern (steady Poisson, synchronised or per-client
	// bursts); BurstPeriod is the time between two bursts of the burst shapes.
	Shape       Shape
	BurstPeriod time.Duration
	// LateClientLag and LateClientPeriod add one more client that sends one request every
	// LateClientPeriod and learns of the deletion only at LateClientLag (zero: none).
	LateClientLag, LateClientPeriod time.Duration
	// Streams is how many long-lived streams (WebSocket- or gRPC-stream-like requests that
	// end only when the app closes them) the clients hold open from the start.
	Streams int
	// Protocol is the port's protocol as the sidecar proxies it: "http" (an HTTP connection
	// manager) or "tcp" (a TCP proxy: no HTTP-level retries; by default one connection per
	// request, see ClientConns).
	Protocol string
	// ClientConns is how each client holds its connections to the pod: "pool" (a client
	// sidecar's Envoy pool, drained when it applies the removal; the default on HTTP ports),
	// "per-request" (a connection per request; the default on TCP ports), "persistent-session"
	// (the endpoint kept as DRAINING: no drain) or "no-sidecar" (a keep-alive pool that
	// ignores the removal). Each client dials from its own loopback address (127.0.X.Y), so the
	// pod's socket table tells them apart.
	ClientConns ClientConns
	// ClientIdleTimeout closes a client's connection idle this long; 0 means the default: 1h
	// (Envoy's upstream idle_timeout), 60s for no-sidecar clients.
	ClientIdleTimeout time.Duration
	// Mesh is the service mesh the pod and its clients are in: MeshIstio (the default) or
	// MeshLinkerd. It decides the pod's proxy (envoysim or linkerdsim) and the clients'
	// retry policy. MeshNone is a pod without a sidecar: the clients reach the app itself,
	// as Meshless says.
	Mesh mesh.Mesh
	// Meshless are the clients of a pod without a sidecar (Mesh MeshNone), by kind; EDSLag is
	// then one node's kube-proxy lag.
	Meshless MeshlessClients

	// PlanKnowsRate says that the operator tells `meshdrain plan` the rate of one client
	// (--rps-per-client QPS/Clients), as one would for a service whose clients are each
	// sparse; the recommended sidecar's --quiet then covers their pauses. A schedule
	// (BurstPeriod, LateClientPeriod) is always passed as --client-period.
	PlanKnowsRate bool

	// AppDrain, Quiet, MinWait, StreamsWait and Poll are meshdrain's --app-drain, --quiet,
	// --min-wait, --streams-wait and --poll.
	AppDrain, Quiet, MinWait, StreamsWait, Poll time.Duration

	// TimeScale multiplies every duration above (and the sidecar's); 1 is real time.
	TimeScale float64
	// Seed fixes the clients' arrivals, latencies and lags. The same draws are used for
	// every strategy, so differences between rows come from the strategy alone.
	Seed uint64
	// MeshdrainBinary is the meshdrain executable run as the "meshdrain" preStop.
	MeshdrainBinary string
}

// UserScenario is the reference scenario of docs/facts.md §5 (the user's report): 800 QPS,
// P99 450ms, 200 Tomcat threads, graceful Spring Boot shutdown, grace period 30s. The EDS
// lag (median 1.5s, P99 12s) is not in the report; it is chosen so that the report's pattern
// is plausible: most clients stop within 1-3s, about one in ten after 5s, a rare one after 15s.
func UserScenario() Scenario {
	return Scenario{
		QPS:         800,
		Clients:     50,
		Threads:     200,
		P99:         450 * time.Millisecond,
		AppShutdown: AppGraceful,
		EDSLag:      Dist{Median: 1500 * time.Millisecond, P99: 12 * time.Second},
		Retries:     2,
		GracePeriod: 30 * time.Second,
		Warmup:      2 * time.Second,
		Port:        8080,
		Traffic:     "steady",
		Shape:       ShapeSteady,
		Protocol:    ProtocolHTTP,
		AppDrain:    5 * time.Second,
		Quiet:       drain.DefaultQuiet,
		MinWait:     drain.DefaultMinWait,
		StreamsWait: drain.DefaultStreamsWait,
		Poll:        drain.DefaultPoll,
		TimeScale:   0.25,
		Seed:        1,
	}
}

// Validate reports every impossible setting at once.
func (sc Scenario) Validate() error {
	var errs []error
	if sc.QPS <= 0 {
		errs = append(errs, errors.New("qps must be > 0"))
	}
	if sc.Clients <= 0 {
		errs = append(errs, errors.New("clients must be > 0"))
	}
	if sc.Threads <= 0 {
		errs = append(errs, errors.New("threads must be > 0"))
	}
	if sc.P99 <= 0 {
		errs = append(errs, errors.New("p99 must be > 0"))
	}
	if sc.AppShutdown != AppGraceful && sc.AppShutdown != AppImmediate {
		errs = append(errs, fmt.Errorf("app shutdown %q is not graceful or immediate", sc.AppShutdown))
	}
	if sc.Retries < 0 {
		errs = append(errs, errors.New("retries must not be negative"))
	}
	if sc.GracePeriod <= 0 {
		errs = append(errs, errors.New("grace period must be > 0"))
	}
	if sc.TimeScale <= 0 || sc.TimeScale > 1 {
		errs = append(errs, fmt.Errorf("time scale %g must be in (0, 1]", sc.TimeScale))
	}
	if sc.Port <= 0 || sc.Port > 65535 {
		errs = append(errs, fmt.Errorf("port %d out of range", sc.Port))
	}
	if sc.Warmup < 0 || sc.RouteTimeout < 0 || sc.AppDrain < 0 || sc.Quiet <= 0 || sc.Poll <= 0 || sc.MinWait < 0 || sc.StreamsWait < 0 {
		errs = append(errs, errors.New("warmup, route timeout, app drain, min wait and streams wait must not be negative; quiet and poll must be > 0"))
	}
	switch sc.Shape {
	case ShapeSteady, "":
	case ShapeBursts, ShapeClientBursts:
		if sc.BurstPeriod <= 0 {
			errs = append(errs, fmt.Errorf("shape %s needs a burst period > 0", sc.Shape))
		}
	default:
		errs = append(errs, fmt.Errorf("shape %q is not steady, bursts or client-bursts", sc.Shape))
	}
	switch sc.Protocol {
	case "", ProtocolHTTP, ProtocolTCP:
	case ProtocolGRPC:
		if sc.ClientConns == ConnsPerRequest {
			errs = append(errs, errors.New("client conns per-request: a grpc port's clients multiplex one connection"))
		}
	default:
		errs = append(errs, fmt.Errorf("protocol %q is not http, grpc or tcp", sc.Protocol))
	}
	if sc.LateClientLag < 0 || sc.LateClientPeriod < 0 || (sc.LateClientLag > 0) != (sc.LateClientPeriod > 0) {
		errs = append(errs, errors.New("a late client needs both its lag and its period > 0"))
	}
	if sc.Streams < 0 {
		errs = append(errs, errors.New("streams must not be negative"))
	}
	switch sc.ClientConns {
	case "", ConnsPool, ConnsPerRequest, ConnsPersistentSession, ConnsNoSidecar:
	default:
		errs = append(errs, fmt.Errorf("client conns %q is not pool, per-request, persistent-session or no-sidecar", sc.ClientConns))
	}
	if sc.ClientIdleTimeout < 0 {
		errs = append(errs, errors.New("client idle timeout must not be negative"))
	}
	switch sc.Mesh {
	case "", mesh.Istio:
	case mesh.Linkerd:
		if sc.Protocol == ProtocolTCP || sc.Protocol == ProtocolGRPC {
			// linkerdsim proxies HTTP/1.1 only (pkg/mesh/linkerd/FIDELITY.md).
			errs = append(errs, fmt.Errorf("the Linkerd proxy emulator proxies HTTP/1.1 only: protocol %s needs mesh istio", sc.Protocol))
		}
	case MeshNone:
		errs = append(errs, sc.validateMeshless()...)
	default:
		errs = append(errs, fmt.Errorf("mesh %q is not istio, linkerd or none", sc.Mesh))
	}
	return errors.Join(errs...)
}

// linkerd says whether the scenario runs a Linkerd mesh.
func (sc Scenario) linkerd() bool { return sc.Mesh == mesh.Linkerd }

// meshless says whether the pod has no sidecar.
func (sc Scenario) meshless() bool { return sc.Mesh == MeshNone }

// scale turns a pod-time duration into the real duration the run waits.
func (sc Scenario) scale(d time.Duration) time.Duration {
	return time.Duration(float64(d) * sc.TimeScale)
}

// AppShutdown is the app's reaction to SIGTERM.
type AppShutdown string

const (
	// AppGraceful is Spring Boot's server.shutdown=graceful: stop accepting, finish the
	// requests in hand, exit.
	AppGraceful AppShutdown = "graceful"
	// AppImmediate closes every connection at once, cutting requests in flight.
	AppImmediate AppShutdown = "immediate"
)

// StrategyKind is the app container's preStop.
type StrategyKind string

const (
	// StrategyNone is no preStop: SIGTERM at t0.
	StrategyNone StrategyKind = "none"
	// StrategySleep is "preStop: sleep N".
	StrategySleep StrategyKind = "sleep"
	// StrategyMeshdrain is "preStop: meshdrain prestop ...".
	StrategyMeshdrain StrategyKind = "meshdrain"
	// StrategyOracle knows the future: its preStop returns the moment the last request that
	// will ever reach the pod has been answered. No real hook can do better; it is the
	// yardstick of the others.
	StrategyOracle StrategyKind = "oracle"
)

// Strategy is one preStop under test.
type Strategy struct {
	Kind  StrategyKind
	Sleep time.Duration // StrategySleep only
}

// String is the name used in the output: none, sleep:5s, meshdrain.
func (s Strategy) String() string {
	if s.Kind == StrategySleep {
		return "sleep:" + fmtD(s.Sleep)
	}
	return string(s.Kind)
}

// ParseStrategy reads none, sleep:<duration> or meshdrain.
func ParseStrategy(s string) (Strategy, error) {
	s = strings.TrimSpace(s)
	switch {
	case s == string(StrategyNone):
		return Strategy{Kind: StrategyNone}, nil
	case s == string(StrategyMeshdrain):
		return Strategy{Kind: StrategyMeshdrain}, nil
	case s == string(StrategyOracle):
		return Strategy{Kind: StrategyOracle}, nil
	case strings.HasPrefix(s, "sleep:"):
		d, err := time.ParseDuration(strings.TrimPrefix(s, "sleep:"))
		if err != nil || d < 0 {
			return Strategy{}, fmt.Errorf("strategy %q: want sleep:<duration>, e.g. sleep:5s", s)
		}
		return Strategy{Kind: StrategySleep, Sleep: d}, nil
	}
	return Strategy{}, fmt.Errorf("strategy %q is not none, sleep:<duration>, meshdrain or oracle", s)
}

// DefaultStrategies are the user's attempts (none, sleep 5, sleep 15) and meshdrain.
func DefaultStrategies() []Strategy {
	return []Strategy{
		{Kind: StrategyNone},
		{Kind: StrategySleep, Sleep: 5 * time.Second},
		{Kind: StrategySleep, Sleep: 15 * time.Second},
		{Kind: StrategyMeshdrain},
	}
}

// SidecarMode is how pilot-agent ends the sidecar (docs/facts.md §1).
type SidecarMode string

const (
	// SidecarClassic: drain at t0, SIGKILL Envoy terminationDrainDuration later.
	SidecarClassic SidecarMode = "classic"
	// SidecarExitOnZero: EXIT_ON_ZERO_ACTIVE_CONNECTIONS=true.
	SidecarExitOnZero SidecarMode = "exit-on-zero"
	// SidecarNative: native sidecar, exits once the app container has exited.
	SidecarNative SidecarMode = "native"
)

// SidecarSpec is one sidecar configuration under test, with the meshdrain flags that go
// with it when they differ from meshdrain's defaults.
type SidecarSpec struct {
	// Name is the label in the output: istio-default, recommended, or the mode.
	Name string
	Mode SidecarMode
	// TerminationDrainDuration, DrainDuration and MinDrainDuration are Istio's
	// proxyConfig.terminationDrainDuration, drainDuration and MINIMUM_DRAIN_DURATION.
	TerminationDrainDuration, DrainDuration, MinDrainDuration time.Duration
	// GracePeriod overrides the scenario's when the configuration needs a longer one.
	GracePeriod time.Duration
	// Mesh is the proxy this configuration is for; empty means MeshIstio.
	Mesh mesh.Mesh
	// WaitBeforeExit is a classic Linkerd proxy's config.alpha.linkerd.io/
	// proxy-wait-before-exit-seconds (its preStop sleep). Linkerd only.
	WaitBeforeExit time.Duration
	// MeshdrainDeadline and MeshdrainAppDrain are meshdrain's --deadline and --app-drain
	// for this configuration; zero leaves meshdrain's derivation from the grace period.
	MeshdrainDeadline, MeshdrainAppDrain time.Duration
	// MeshdrainQuiet and MeshdrainMinWait are the plan's --quiet and --min-wait; zero leaves
	// the scenario's. MeshdrainClientPeriod is the plan's --client-period (zero: none).
	MeshdrainQuiet, MeshdrainMinWait, MeshdrainClientPeriod time.Duration
	// MeshdrainLagBound is the plan's --eds-lag-bound (its last client's lag); zero: none.
	MeshdrainLagBound time.Duration
	// MeshdrainClientEvidence is meshdrain's --client-evidence (auto or off); empty leaves
	// meshdrain's default. Off replays the rule from before per-client evidence, silence
	// alone deciding, so that a run with the evidence can be set against it.
	MeshdrainClientEvidence string
	// DeferDrain is a native Istio sidecar whose injected preStop (the drain at the
	// deletion) is overridden with a no-op: nothing drains until meshdrain calls
	// /drain_listeners as it decides (--drain-at end). docs/decision-rule.md, regime (b).
	DeferDrain bool
	// MeshdrainDrainAtEnd gives meshdrain --drain-at end without deferring the sidecar's own
	// drain: a pod that asked for regime (b) and whose override is missing (a re-injected
	// preStop), which meshdrain must notice.
	MeshdrainDrainAtEnd bool
	// PlanPrestopArgs and PlanHoldArgs are the app's preStop (`meshdrain prestop ...`) and
	// istio-proxy's (`meshdrain hold ...`) exactly as `meshdrain plan` writes them, in pod
	// time; set where plan writes regime (b). The simulator runs them with every duration
	// scaled and its own plumbing added (prestopArgs, holdArgs), and the proxy's preStop is
	// then the real hold process: the proxy's SIGTERM waits for it.
	PlanPrestopArgs, PlanHoldArgs []string
	// holdChannel is, during a run, the pod's channel between prestop and hold ("" where the
	// proxy runs no hold).
	holdChannel string
	// Note explains where the numbers come from, for the output.
	Note string
}

// IstioDefaultSidecar is the user's sidecar today: Istio 1.19 classic injection with
// terminationDrainDuration 5s and drainDuration 45s.
func IstioDefaultSidecar() SidecarSpec {
	return SidecarSpec{
		Name:                     "istio-default",
		Mode:                     SidecarClassic,
		TerminationDrainDuration: 5 * time.Second,
		DrainDuration:            45 * time.Second,
		MinDrainDuration:         5 * time.Second,
		Note:                     "classic sidecar, terminationDrainDuration 5s, drainDuration 45s (Istio defaults)",
	}
}

// RecommendedSidecar is what `meshdrain plan` writes by default for sc, taken from plan
// itself (plan.Recommend) so that simulate replays exactly what plan tells the user to set:
// drain regime (b) on a classic sidecar. istio-proxy's preStop is `meshdrain hold` (plan's
// HoldArgs), which keeps pilot-agent's SIGTERM, and so Istio's drain, until the app's hook has
// decided and the app has let go; prestop drains at its decision (plan's PrestopArgs, with
// --drain-at=end); terminationDrainDuration is plan's fallback bound. The plan is given what
// the simulated world is: one client's lag distribution and the number of clients (the last
// of them is later than one client's P99), as `meshdrain plan --eds-lag p50=D,p99=D
// --clients N` takes them. The scenario's grace period is kept unless the plan needs more.
func RecommendedSidecar(sc Scenario) (SidecarSpec, error) {
	return recommendedIstio(sc, plan.Classic, true)
}

// RecommendedNativeSidecar is what `meshdrain plan --sidecar native` writes by default: regime
// (b) on a native sidecar, whose injected preStop (the drain at the deletion) is replaced by
// `meshdrain hold`; nothing drains until prestop's decision, and hold's call to pilot-agent's
// /drain makes the SIGTERM after the app's exit end the proxy at once.
func RecommendedNativeSidecar(sc Scenario) (SidecarSpec, error) {
	return recommendedIstio(sc, plan.Native, true)
}

// RegimeASidecar is `meshdrain plan --defer-sidecar-drain=false` (the opt-out, and plan's
// default route before regime (b)): a classic sidecar that drains at the deletion, whose
// terminationDrainDuration outlives meshdrain's deadline plus the app's drain.
func RegimeASidecar(sc Scenario) (SidecarSpec, error) {
	return recommendedIstio(sc, plan.Classic, false)
}

// PlanInput is the plan.Input that `meshdrain plan` is given for sc's world: its latency, its
// clients' lag distribution and number, their schedule, the app's drain, the grace period
// in force. The sidecar mode and the regime are the caller's.
func PlanInput(sc Scenario) plan.Input {
	in := plan.Input{
		P99:                sc.P99,
		EDSLag:             sc.quotedEDSLag(),
		Quiet:              sc.Quiet,
		Poll:               sc.Poll,
		AppDrain:           sc.AppDrain,
		Sidecar:            plan.Classic,
		CurrentGracePeriod: sc.GracePeriod,
		DrainDuration:      45 * time.Second,
		// `plan --grace-period` keeps a longer grace period in force (and derives the hook's
		// deadline from it) unless --lower-grace-period.
		KeepLonger: plan.Bounds{GracePeriod: sc.GracePeriod},
	}
	if !sc.EDSLag.Constant() {
		in.EDSLagMedian, in.Clients = sc.EDSLag.Median, sc.Clients
	}
	// A scenario without a minimum wait leaves plan its default 5 s: a longer deadline than
	// needed, never a shorter one.
	in.MinWait = sc.MinWait
	if sc.PlanKnowsRate {
		in.RPSPerClient = sc.QPS / float64(sc.Clients)
	}
	switch {
	case sc.LateClientPeriod > 0:
		in.ClientPeriod = sc.LateClientPeriod
	case sc.Shape == ShapeBursts || sc.Shape == ShapeClientBursts:
		in.ClientPeriod = sc.BurstPeriod
	}
	if sc.linkerd() {
		// Linkerd's default injection since 2.20: a native sidecar, which needs nothing
		// from the plan but the grace period and meshdrain's deadline.
		in.Mesh, in.Sidecar, in.DrainDuration = mesh.Linkerd, plan.Native, 0
	}
	return in
}

// recommendedIstio is plan's route for sc with the given Istio sidecar mode, in regime (b)
// (defer) or (a). With --mesh linkerd it is plan's Linkerd route, whatever the mode.
func recommendedIstio(sc Scenario, mode plan.Sidecar, deferDrain bool) (SidecarSpec, error) {
	in := PlanInput(sc)
	if !sc.linkerd() {
		in.Sidecar, in.DeferSidecarDrain = mode, deferDrain
	}
	p, err := plan.Recommend(in)
	if err != nil {
		return SidecarSpec{}, fmt.Errorf("recommended sidecar: %w", err)
	}
	if sc.linkerd() {
		return recommendedLinkerd(sc, p, in), nil
	}
	spec := planned(sc, p, in)
	spec.Mode = SidecarClassic
	spec.TerminationDrainDuration = p.TerminationDrainDuration
	spec.DrainDuration = max(45*time.Second, p.AppExitWorst)
	spec.MinDrainDuration = 5 * time.Second
	grace := spec.takeGracePeriod(sc, p)
	sidecar := fmt.Sprintf("classic sidecar, terminationDrainDuration %s", fmtD(spec.TerminationDrainDuration))
	if p.DefersSidecarDrain() {
		spec.PlanPrestopArgs, spec.PlanHoldArgs = p.PrestopArgs(), p.HoldArgs()
		sidecar = fmt.Sprintf("regime (b): istio-proxy preStop meshdrain hold, classic sidecar, terminationDrainDuration %s (the fallback's bound)", fmtD(spec.TerminationDrainDuration))
		if mode == plan.Native {
			spec.Name, spec.Mode = "recommended-native", SidecarNative
			sidecar = "regime (b): istio-proxy preStop meshdrain hold, native sidecar"
		}
	} else {
		spec.Name = "regime-a"
		sidecar = "regime (a), plan --defer-sidecar-drain=false: " + sidecar
	}
	spec.Note = fmt.Sprintf("%s; meshdrain --deadline %s --app-drain %s%s; %s. From meshdrain plan with eds-lag %s",
		sidecar, fmtD(p.Deadline), fmtD(p.AppDrain), quietNote(sc, p, in), grace, sc.EDSLag)
	if sc.LateClientLag > sc.EDSLag.P99 {
		spec.Note += fmt.Sprintf(" (the late client's %s quoted as its p99)", fmtD(sc.LateClientLag))
	}
	spec.Note += clientsNote(p, in)
	return spec, nil
}

// planned is the "recommended" sidecar's meshdrain flags as the plan gives them, whatever
// the mesh; the caller adds the sidecar's own settings.
func planned(sc Scenario, p plan.Plan, in plan.Input) SidecarSpec {
	return SidecarSpec{
		Name:                  "recommended",
		MeshdrainDeadline:     p.Deadline,
		MeshdrainAppDrain:     p.AppDrain,
		MeshdrainQuiet:        p.Quiet,
		MeshdrainMinWait:      sc.MinWait,
		MeshdrainClientPeriod: in.ClientPeriod,
		MeshdrainLagBound:     p.LastClientLag,
	}
}

// quietNote is the plan's --quiet when it differs from the scenario's, with what set it.
func quietNote(sc Scenario, p plan.Plan, in plan.Input) string {
	if p.Quiet == sc.Quiet {
		return ""
	}
	from := fmt.Sprintf("--client-period %s", fmtD(in.ClientPeriod))
	if in.RPSPerClient > 0 && p.Quiet != in.ClientPeriod+in.Poll {
		from = fmt.Sprintf("--rps-per-client %.3g", in.RPSPerClient)
	}
	note := fmt.Sprintf(" --quiet %s (plan %s)", fmtD(p.Quiet), from)
	if in.ClientPeriod > 0 {
		note += fmt.Sprintf(" --client-period %s", fmtD(in.ClientPeriod))
	}
	return note
}

// takeGracePeriod keeps the scenario's grace period unless the plan needs a longer one, and
// says which, for the note.
func (spec *SidecarSpec) takeGracePeriod(sc Scenario, p plan.Plan) string {
	if p.GracePeriod > sc.GracePeriod {
		spec.GracePeriod = p.GracePeriod
		return fmt.Sprintf("grace period raised from %s to %s (the plan needs it)", fmtD(sc.GracePeriod), fmtD(p.GracePeriod))
	}
	return fmt.Sprintf("grace period kept at %s (the plan needs %s)", fmtD(sc.GracePeriod), fmtD(p.SufficientGracePeriod))
}

// clientsNote is the --clients part of a recommended sidecar's note.
func clientsNote(p plan.Plan, in plan.Input) string {
	if in.Clients == 0 {
		return ""
	}
	return fmt.Sprintf(" --clients %d (the last client by %s in 99 deletions of 100)", in.Clients, fmtD(p.LastClientLag))
}

// recommendedLinkerd is the native Linkerd proxy with the grace period and meshdrain flags
// of `meshdrain plan --mesh linkerd`.
func recommendedLinkerd(sc Scenario, p plan.Plan, in plan.Input) SidecarSpec {
	spec := planned(sc, p, in)
	spec.Mesh, spec.Mode = mesh.Linkerd, SidecarNative
	grace := spec.takeGracePeriod(sc, p)
	spec.Note = fmt.Sprintf("native linkerd-proxy (SIGTERM after the app exits); meshdrain --mesh linkerd --deadline %s --app-drain %s; %s. From meshdrain plan --mesh linkerd with eds-lag %s",
		fmtD(p.Deadline), fmtD(p.AppDrain), grace, sc.EDSLag)
	spec.Note += clientsNote(p, in)
	return spec
}

// LinkerdDefaultSidecar is a Linkerd pod as injected by default since Linkerd 2.20: a native
// sidecar, the scenario's grace period, meshdrain's deadline derived from it.
func LinkerdDefaultSidecar() SidecarSpec {
	return SidecarSpec{
		Name: "linkerd-default",
		Mesh: mesh.Linkerd,
		Mode: SidecarNative,
		Note: "native linkerd-proxy (Linkerd >= 2.20 default): SIGTERM only after the app has exited; no drain call exists",
	}
}

// LinkerdClassicSidecar is a classic Linkerd proxy with the given
// proxy-wait-before-exit-seconds (0: Linkerd's default, SIGTERM at the deletion).
func LinkerdClassicSidecar(waitBeforeExit time.Duration) SidecarSpec {
	return SidecarSpec{
		Name:           "classic",
		Mesh:           mesh.Linkerd,
		Mode:           SidecarClassic,
		WaitBeforeExit: waitBeforeExit,
		Note: fmt.Sprintf("classic linkerd-proxy, proxy-wait-before-exit-seconds %s: SIGTERM when that preStop sleep ends, then it stops accepting in both directions",
			fmtD(waitBeforeExit)),
	}
}

// quotedEDSLag is the lag an operator would give plan: the lag distribution's P99, or the
// late client's lag when the scenario has one and it is later.
func (sc Scenario) quotedEDSLag() time.Duration {
	return max(sc.EDSLag.P99, sc.LateClientLag)
}

// ModeSidecar is a sidecar in the given mode with Istio's knobs as the user sets them.
func ModeSidecar(mode SidecarMode, terminationDrain, drain, minDrain time.Duration) SidecarSpec {
	spec := SidecarSpec{
		Name:                     string(mode),
		Mode:                     mode,
		TerminationDrainDuration: terminationDrain,
		DrainDuration:            drain,
		MinDrainDuration:         minDrain,
	}
	switch mode {
	case SidecarClassic:
		spec.Note = fmt.Sprintf("classic sidecar, terminationDrainDuration %s, drainDuration %s", fmtD(terminationDrain), fmtD(drain))
	case SidecarExitOnZero:
		spec.Note = fmt.Sprintf("EXIT_ON_ZERO_ACTIVE_CONNECTIONS, MINIMUM_DRAIN_DURATION %s, drainDuration %s", fmtD(minDrain), fmtD(drain))
	case SidecarNative:
		spec.Note = fmt.Sprintf("native sidecar (exits after the app), drainDuration %s", fmtD(drain))
	}
	return spec
}

// grace is the grace period that applies under spec.
func (sc Scenario) grace(spec SidecarSpec) time.Duration {
	if spec.GracePeriod > 0 {
		return spec.GracePeriod
	}
	return sc.GracePeriod
}
