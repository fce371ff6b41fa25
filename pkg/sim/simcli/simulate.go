package simcli

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/meshdrain/meshdrain/pkg/mesh"
	"github.com/meshdrain/meshdrain/pkg/operator/output"
	"github.com/meshdrain/meshdrain/pkg/sim/loopback"
	"github.com/meshdrain/meshdrain/pkg/sim/podsim"
)

type simulateOptions struct {
	mesh             mesh.Mesh
	waitBeforeExit   time.Duration
	traffic          string
	strategies       []string
	sidecars         []string
	terminationDrain time.Duration
	drainDuration    time.Duration
	minDrainDuration time.Duration
	qps              float64
	clients          int
	threads          int
	p99              time.Duration
	appShutdown      string
	clientConns      string
	clientIdle       time.Duration
	edsLag           string
	retries          int
	routeTimeout     time.Duration
	gracePeriod      time.Duration
	warmup           time.Duration
	appDrain         time.Duration
	quiet            time.Duration
	minWait          time.Duration
	streamsWait      time.Duration
	poll             time.Duration
	timeScale        float64
	seed             uint64
	meshdrainBin     string
	output           string
	maxFailures      int
	timelines        bool
	svgDir           string
	ownNetns         bool
	appMetrics       bool
}

// defaultSVGDir is where simulate draws its runs unless told otherwise: beside where it was
// started, as make build puts bin/, so that the pictures of the run just made are easy to find.
const defaultSVGDir = "simulate-svg"

func defaultSimulateOptions() simulateOptions {
	sc := podsim.UserScenario()
	var strategies []string
	for _, s := range podsim.DefaultStrategies() {
		strategies = append(strategies, s.String())
	}
	return simulateOptions{
		mesh:             mesh.Istio,
		traffic:          "steady",
		strategies:       strategies,
		sidecars:         []string{"istio-default", "recommended"},
		terminationDrain: 5 * time.Second,
		drainDuration:    45 * time.Second,
		minDrainDuration: 5 * time.Second,
		qps:              sc.QPS,
		clients:          sc.Clients,
		threads:          sc.Threads,
		p99:              sc.P99,
		appShutdown:      string(sc.AppShutdown),
		edsLag:           sc.EDSLag.String(),
		retries:          sc.Retries,
		routeTimeout:     sc.RouteTimeout,
		gracePeriod:      sc.GracePeriod,
		warmup:           sc.Warmup,
		appDrain:         sc.AppDrain,
		quiet:            sc.Quiet,
		minWait:          sc.MinWait,
		streamsWait:      sc.StreamsWait,
		poll:             sc.Poll,
		timeScale:        sc.TimeScale,
		seed:             sc.Seed,
		output:           output.Text,
		maxFailures:      -1,
		svgDir:           defaultSVGDir,
		ownNetns:         true,
	}
}

// simulateLong is simulate's help.
const simulateLong = `simulate deletes a simulated pod while its clients are sending, and measures what each preStop
strategy does to their requests. Everything is real and on loopback: an app with a bounded
worker pool, its Envoy sidecar (an emulator with pilot-agent's termination modes), client
sidecars that keep sending until their own endpoint-propagation (EDS) lag has passed and
retry like Istio (connect-failure and 503 on another replica, not a request cut in flight),
and a kubelet that runs the preStop, sends SIGTERM and SIGKILLs at the grace period. The
meshdrain strategy runs this very binary as the preStop.

With no flags it replays the user's rollout (800 QPS, P99 450ms, 200 threads, grace period
30s, Istio 1.19 classic sidecar) for none, sleep:5s, sleep:15s and meshdrain, under Istio's
defaults and under the configuration 'meshdrain plan' recommends. Every duration is
multiplied by --time-scale; the same --seed replays the same requests for every strategy.

The text output starts with its point, one line per sidecar setting (meshdrain against the
earliest sleep that was clean), then the table; --timelines adds each run's events. Each run
is also drawn as an SVG timeline (the app serving, the sidecar alive, the window in which the
clients still send, the failures, the moment the app was told to stop) into --svg DIR, with an
index.html that shows them together; simulate prints where.

--sidecar takes istio-default, recommended (what 'meshdrain plan' writes by default: regime
(b), istio-proxy's preStop the real 'meshdrain hold', classic), recommended-native (the same,
native), regime-a (plan --defer-sidecar-drain=false), or classic | exit-on-zero | native with
the Istio knobs given by --termination-drain-duration, --drain-duration, --min-drain-duration.

--mesh linkerd replays the same pod in a Linkerd mesh: its proxy is the linkerd2-proxy
emulator (no drain call; it stops accepting only at SIGTERM), its clients retry nothing, and
meshdrain runs with --mesh linkerd. --sidecar then takes linkerd-default (a native sidecar,
Linkerd's default since 2.20, and the scenario's grace period), recommended (the grace period
and deadline of 'meshdrain plan --mesh linkerd'), native, or classic (a classic proxy whose
preStop sleeps --wait-before-exit); the default is linkerd-default,recommended.

--mesh none replays a pod without a sidecar: its clients connect straight to the app, each
node's kube-proxy syncs the removal at its own lag (--eds-lag is then one node's lag), and the
clients are of four kinds: per-request clients (half close first, half ask Connection: close),
keep-alive clients routed per connection that never learn (they send until the app closes
their connection), ingress-like pools routed per request that learn and then leave their
idle connections open, and the kubelet's readiness probes from the node's address. Losses are
counted as the client sees them: connection refused, connection reset, or the ingress's 502.
--app-shutdown immediate is an abrupt app (it closes its listener and every connection, and
exits). meshdrain runs the preStop 'meshdrain plan --mesh none' writes for this world and
--grace-period ('prestop --mesh=none --port=P --ignore-source=$(HOST_IP) ...', HOST_IP the
probes' address; with --app-metrics, the app also serves its request counter and meshdrain
reads it). --traffic then
takes mixed (the default), per-request, keep-alive, ingress or no-traffic; --sidecar is
no-sidecar.

--traffic changes the reference scenario's traffic: steady (the default), bursts,
client-bursts, sparse, late-client, no-traffic, clients-500, clients-2000, long-requests,
streams, tcp, grpc (make bench runs them all); flags given explicitly still win. The oracle
strategy stops the app the moment the last request that will ever reach the pod has been
answered: the best any preStop could do.

Exit codes: 0; 1 when --max-failures is set and a run lost more requests; 2 bad flags.`

// simulateExample are simulate's examples.
const simulateExample = `  # The user's rollout, every strategy, Istio defaults vs the recommended sidecar:
  meshdrain-sim simulate

  # CI smoke check: fail when meshdrain with the recommended sidecar loses a request
  # (keep the default --time-scale 0.25: below it timer lateness distorts the result).
  meshdrain-sim simulate --strategy meshdrain --sidecar recommended --max-failures 0

  # The same rollout in a Linkerd mesh:
  meshdrain-sim simulate --mesh linkerd

  # A pod without a sidecar behind kube-proxy and an ingress, and an abrupt app:
  meshdrain-sim simulate --mesh none --strategy none,sleep:10s,meshdrain
  meshdrain-sim simulate --mesh none --app-shutdown immediate

  # Raw failures without Istio's retries, as JSON:
  meshdrain-sim simulate --retries 0 -o json

  # Every run's events, and its pictures somewhere else:
  meshdrain-sim simulate --timelines --svg /tmp/rollout`

func newSimulateCommand(s streams) *cobra.Command {
	o := defaultSimulateOptions()
	cmd := &cobra.Command{
		Use:     "simulate",
		Short:   "Replay a pod's termination on this machine and compare preStop strategies",
		Long:    simulateLong,
		Example: simulateExample,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.applyTraffic(cmd); err != nil {
				return err
			}
			if err := o.applyMesh(cmd); err != nil {
				return err
			}
			opts, err := o.build()
			if err != nil {
				return err
			}
			if ran, err := o.inOwnNetns(cmd, s); ran || err != nil {
				return err
			}
			return runSimulate(cmd, s, o, opts)
		},
	}
	o.addFlags(cmd.Flags())
	return cmd
}

// addFlags registers simulate's flags on f, bound to o.
func (o *simulateOptions) addFlags(f *pflag.FlagSet) {
	f.StringVar((*string)(&o.mesh), "mesh", string(o.mesh), "the service mesh: istio (an Envoy sidecar run by pilot-agent), linkerd (a linkerd2-proxy sidecar) or none (no sidecar: clients reach the app through kube-proxy or an ingress)")
	f.DurationVar(&o.waitBeforeExit, "wait-before-exit", 0, "config.alpha.linkerd.io/proxy-wait-before-exit-seconds, for --mesh linkerd --sidecar classic")
	f.StringVar(&o.traffic, "traffic", o.traffic, "traffic shape: steady, bursts, client-bursts, sparse, late-client, no-traffic, clients-500, clients-2000, long-requests, streams, tcp, grpc; with --mesh none: mixed (default), per-request, keep-alive, ingress, no-traffic")
	f.StringSliceVar(&o.strategies, "strategy", o.strategies, "preStop strategies to compare: none, sleep:<duration>, meshdrain, oracle")
	f.StringSliceVar(&o.sidecars, "sidecar", o.sidecars, "sidecar configurations: istio-default, recommended (what meshdrain plan writes: regime b, istio-proxy's preStop meshdrain hold, classic), recommended-native (the same, native), regime-a (plan --defer-sidecar-drain=false), classic, exit-on-zero, native; with --mesh linkerd: linkerd-default, recommended, native, classic (default linkerd-default,recommended); with --mesh none: no-sidecar")
	f.DurationVar(&o.terminationDrain, "termination-drain-duration", o.terminationDrain, "Istio terminationDrainDuration, for --sidecar classic")
	f.DurationVar(&o.drainDuration, "drain-duration", o.drainDuration, "Istio drainDuration (Envoy --drain-time-s), for --sidecar classic, exit-on-zero, native")
	f.DurationVar(&o.minDrainDuration, "min-drain-duration", o.minDrainDuration, "Istio MINIMUM_DRAIN_DURATION, for --sidecar exit-on-zero")
	f.Float64Var(&o.qps, "qps", o.qps, "requests per second the clients send to the pod together (open loop)")
	f.IntVar(&o.clients, "clients", o.clients, "client sidecars, each with its own connections and EDS lag")
	f.IntVar(&o.threads, "threads", o.threads, "the app's worker pool (Tomcat maxThreads)")
	f.DurationVar(&o.p99, "p99", o.p99, "the app's P99 latency (median P99/4.5, lognormal)")
	f.StringVar(&o.appShutdown, "app-shutdown", o.appShutdown, "the app on SIGTERM: graceful (finish in-flight requests) or immediate")
	f.StringVar(&o.clientConns, "client-conns", "", "how each client holds its connections to the pod: pool (Envoy's keep-alive pool, drained at the client's EDS update; HTTP's default), per-request (TCP's default), persistent-session (the endpoint kept DRAINING: no drain) or no-sidecar (a keep-alive pool that ignores the removal)")
	f.DurationVar(&o.clientIdle, "client-idle-timeout", 0, "close a client's connection idle this long (default Envoy's 1h; 60s for no-sidecar)")
	f.StringVar(&o.edsLag, "eds-lag", o.edsLag, "time until each client stops sending to the pod: a duration or p50=D,p99=D (lognormal); with --mesh none, one node's kube-proxy lag")
	f.IntVar(&o.retries, "retries", o.retries, "client retries (Istio default 2); 0 shows raw failures")
	f.DurationVar(&o.routeTimeout, "route-timeout", o.routeTimeout, "client route timeout (0: none, Istio's default)")
	f.DurationVar(&o.gracePeriod, "grace-period", o.gracePeriod, "terminationGracePeriodSeconds")
	f.DurationVar(&o.warmup, "warmup", o.warmup, "steady traffic before the pod is deleted")
	f.DurationVar(&o.appDrain, "app-drain", o.appDrain, "meshdrain --app-drain")
	f.DurationVar(&o.quiet, "quiet", o.quiet, "meshdrain --quiet")
	f.DurationVar(&o.minWait, "min-wait", o.minWait, "meshdrain --min-wait")
	f.DurationVar(&o.streamsWait, "streams-wait", o.streamsWait, "meshdrain --streams-wait")
	f.DurationVar(&o.poll, "poll", o.poll, "meshdrain --poll")
	f.Float64Var(&o.timeScale, "time-scale", o.timeScale, "multiply every duration by this (0 < scale <= 1); the real request rate is --qps / --time-scale")
	f.Uint64Var(&o.seed, "seed", o.seed, "random seed: the same seed replays the same requests and lags")
	f.StringVar(&o.meshdrainBin, "meshdrain-bin", "", "meshdrain binary run as the preStop (default: the meshdrain beside this executable, as make build puts them in bin/)")
	f.StringVarP(&o.output, "output", "o", o.output, "output format: text (the table), json or yaml")
	f.IntVar(&o.maxFailures, "max-failures", o.maxFailures, "exit 1 when a run has more client failures than this (-1: never)")
	f.BoolVar(&o.timelines, "timelines", o.timelines, "print each run's timeline after the table (text output)")
	f.BoolVar(&o.appMetrics, "app-metrics", false, "with --mesh none: the app also serves its request counter at /metrics, and meshdrain reads it beside the kernel (prestop --app-metrics)")
	f.BoolVar(&o.ownNetns, "own-netns", o.ownNetns, "with --mesh none: run in a network namespace of its own (a new user and network namespace), so that the kernel counters the preStop reads are the simulated pod's alone; where the kernel allows none, the run says so and uses this machine's")
	f.StringVar(&o.svgDir, "svg", o.svgDir, "directory to draw each run into as an SVG timeline, with an index.html (\"\": none; with -o json or yaml only when given)")
}

// applyTraffic takes the numbers of the --traffic preset for every flag not given.
func (o *simulateOptions) applyTraffic(cmd *cobra.Command) error {
	changed := cmd.Flags().Changed
	if o.mesh == podsim.MeshNone && !changed("traffic") {
		o.traffic = podsim.MeshlessScenario().Traffic
	}
	traffic, base, err := podsim.TrafficFor(o.mesh, o.traffic)
	if err != nil {
		return usageError("--traffic: %v", err)
	}
	preset := traffic.Apply(base)
	if !changed("qps") {
		o.qps = preset.QPS
	}
	if !changed("clients") {
		o.clients = preset.Clients
	}
	if !changed("threads") {
		o.threads = preset.Threads
	}
	if !changed("p99") {
		o.p99 = preset.P99
	}
	if !changed("eds-lag") {
		o.edsLag = preset.EDSLag.String()
	}
	if !changed("app-drain") {
		o.appDrain = preset.AppDrain
	}
	if !changed("retries") {
		o.retries = preset.Retries
	}
	return nil
}

// applyMesh checks --mesh and gives a Linkerd run its own default sidecars.
func (o *simulateOptions) applyMesh(cmd *cobra.Command) error {
	switch o.mesh {
	case mesh.Istio:
		if cmd.Flags().Changed("wait-before-exit") {
			return usageError("--wait-before-exit is a Linkerd proxy's setting: it needs --mesh linkerd")
		}
	case mesh.Linkerd:
		if !cmd.Flags().Changed("sidecar") {
			o.sidecars = []string{"linkerd-default", "recommended"}
		}
		// --retries is Istio's retry budget: Linkerd clients retry no status by default, and
		// a refused connection is always sent elsewhere by their balancer.
		for _, name := range []string{"termination-drain-duration", "drain-duration", "min-drain-duration", "retries"} {
			if cmd.Flags().Changed(name) {
				return usageError("--%s is an Istio setting; a Linkerd proxy has none (--mesh linkerd)", name)
			}
		}
	case podsim.MeshNone:
		if !cmd.Flags().Changed("sidecar") {
			o.sidecars = []string{noSidecar}
		}
		for _, name := range []string{"termination-drain-duration", "drain-duration", "min-drain-duration", "wait-before-exit", "client-conns", "client-idle-timeout", "route-timeout"} {
			if cmd.Flags().Changed(name) {
				return usageError("--%s is a sidecar's or a mesh client's setting; a pod without a sidecar has none (--mesh none)", name)
			}
		}
	default:
		return usageError("--mesh %q: want istio, linkerd or none", o.mesh)
	}
	if o.appMetrics && o.mesh != podsim.MeshNone {
		return usageError("--app-metrics: the app's own counter is read with --mesh none; a sidecar counts every request already")
	}
	if o.waitBeforeExit < 0 || o.waitBeforeExit%time.Second != 0 {
		return usageError("--wait-before-exit %s: want a whole number of seconds >= 0, as the annotation takes", o.waitBeforeExit)
	}
	return nil
}

// build turns the flags into the runs to make.
func (o simulateOptions) build() (podsim.Options, error) {
	var opts podsim.Options
	if o.output == "table" { // the name before -o was text|json|yaml everywhere
		o.output = output.Text
	}
	if _, err := output.Parse(o.output); err != nil {
		return opts, usageError("-o: %v", err)
	}
	lag, err := podsim.ParseDist(o.edsLag)
	if err != nil {
		return opts, usageError("--eds-lag: %v", err)
	}
	traffic, base, err := podsim.TrafficFor(o.mesh, o.traffic)
	if err != nil {
		return opts, usageError("--traffic: %v", err)
	}
	// The traffic's shape comes from its preset; every number a flag names, from the flag.
	sc := traffic.Apply(base)
	sc.QPS, sc.Clients, sc.Threads, sc.P99 = o.qps, o.clients, o.threads, o.p99
	sc.AppShutdown, sc.EDSLag, sc.Retries = podsim.AppShutdown(o.appShutdown), lag, o.retries
	if o.clientConns != "" {
		sc.ClientConns = podsim.ClientConns(o.clientConns)
	}
	sc.ClientIdleTimeout = o.clientIdle
	sc.RouteTimeout, sc.GracePeriod, sc.Warmup = o.routeTimeout, o.gracePeriod, o.warmup
	sc.AppDrain, sc.Quiet, sc.MinWait, sc.StreamsWait, sc.Poll = o.appDrain, o.quiet, o.minWait, o.streamsWait, o.poll
	sc.TimeScale, sc.Seed, sc.MeshdrainBinary = o.timeScale, o.seed, o.meshdrainBin
	sc.Mesh = mesh.Mesh(o.mesh)
	if sc.Mesh == podsim.MeshNone && sc.Clients != sc.Meshless.PerRequest+sc.Meshless.Holders+sc.Meshless.Ingress {
		// --clients with --mesh none: the traffic's kinds, each in its share.
		sc.Meshless = sc.Meshless.WithClients(sc.Clients)
	}
	sc.Meshless.AppMetrics = o.appMetrics
	if err := sc.Validate(); err != nil {
		return opts, usageError("%v", err)
	}
	opts.Scenario = sc
	for _, name := range o.strategies {
		strat, err := podsim.ParseStrategy(name)
		if err != nil {
			return opts, usageError("--strategy: %v", err)
		}
		opts.Strategies = append(opts.Strategies, strat)
	}
	switch sc.Mesh {
	case podsim.MeshNone:
		opts, err = o.meshlessPods(sc, opts)
	case mesh.Linkerd:
		opts, err = o.linkerdSidecars(sc, opts)
	default:
		opts, err = o.istioSidecars(sc, opts)
	}
	if err != nil {
		return opts, err
	}
	// Last: a flag mistake is worth saying before a missing binary.
	for _, strat := range opts.Strategies {
		if strat.Kind == podsim.StrategyMeshdrain && opts.Scenario.MeshdrainBinary == "" {
			bin, err := meshdrainBeside()
			if err != nil {
				return opts, usageError("--meshdrain-bin: %v", err)
			}
			opts.Scenario.MeshdrainBinary = bin
		}
	}
	return opts, nil
}

// istioRoutes are the sidecars `meshdrain plan` writes: its default, regime (b), classic and
// native, and the opt-out, regime (a).
var istioRoutes = map[string]func(podsim.Scenario) (podsim.SidecarSpec, error){
	"recommended":        podsim.RecommendedSidecar,
	"recommended-native": podsim.RecommendedNativeSidecar,
	"regime-a":           podsim.RegimeASidecar,
}

// istioSidecars adds the --sidecar configurations of an Istio run.
func (o simulateOptions) istioSidecars(sc podsim.Scenario, opts podsim.Options) (podsim.Options, error) {
	for _, name := range o.sidecars {
		switch strings.TrimSpace(name) {
		case "istio-default":
			opts.Sidecars = append(opts.Sidecars, podsim.IstioDefaultSidecar())
		case "recommended", "recommended-native", "regime-a":
			spec, err := istioRoutes[strings.TrimSpace(name)](sc)
			if err != nil {
				return opts, usageError("--sidecar %s: %v", strings.TrimSpace(name), err)
			}
			opts.Sidecars = append(opts.Sidecars, spec)
		case string(podsim.SidecarClassic), string(podsim.SidecarExitOnZero), string(podsim.SidecarNative):
			opts.Sidecars = append(opts.Sidecars, podsim.ModeSidecar(podsim.SidecarMode(strings.TrimSpace(name)), o.terminationDrain, o.drainDuration, o.minDrainDuration))
		default:
			return opts, usageError("--sidecar %q: want istio-default, recommended, recommended-native, regime-a, classic, exit-on-zero or native", name)
		}
	}
	return opts, nil
}

// linkerdSidecars adds the --sidecar configurations of a Linkerd run.
func (o simulateOptions) linkerdSidecars(sc podsim.Scenario, opts podsim.Options) (podsim.Options, error) {
	for _, name := range o.sidecars {
		switch strings.TrimSpace(name) {
		case "linkerd-default", string(podsim.SidecarNative):
			opts.Sidecars = append(opts.Sidecars, podsim.LinkerdDefaultSidecar())
		case "recommended":
			spec, err := podsim.RecommendedSidecar(sc)
			if err != nil {
				return opts, usageError("--sidecar recommended: %v", err)
			}
			opts.Sidecars = append(opts.Sidecars, spec)
		case string(podsim.SidecarClassic):
			opts.Sidecars = append(opts.Sidecars, podsim.LinkerdClassicSidecar(o.waitBeforeExit))
		default:
			return opts, usageError("--sidecar %q with --mesh linkerd: want linkerd-default, recommended, native or classic", name)
		}
	}
	return opts, nil
}

// OwnNetnsReexec is set by the meshdrain-sim binary: simulate --mesh none may then run itself
// again in a network namespace of its own. A test that calls Main in its own process leaves it
// unset, so that it never re-executes the test binary.
var OwnNetnsReexec bool

// inOwnNetns runs this very simulation again in a network namespace of its own, for a pod
// without a sidecar: meshdrain prestop --mesh none reads the namespace's TCP counters and
// socket table, and in this machine's namespace every other program's accepts would count as
// the pod's clients'. It returns whether it ran the simulation. In the child it brings lo up
// and returns false, so that the simulation runs there.
func (o simulateOptions) inOwnNetns(cmd *cobra.Command, s streams) (bool, error) {
	if o.mesh != podsim.MeshNone || !o.ownNetns {
		return false, nil
	}
	if loopback.InOwnNetns() {
		if err := loopback.Up(); err != nil {
			return false, fmt.Errorf("--own-netns: %w", err)
		}
		return false, nil
	}
	if !OwnNetnsReexec {
		return false, nil
	}
	if err := loopback.CanOwnNetns(); err != nil {
		fmt.Fprintf(s.err, "simulate: %v; running in this machine's network namespace: the preStop counts every connection this machine accepts meanwhile (--own-netns=false says so quietly)\n", err)
		return false, nil
	}
	child, err := loopback.OwnNetnsCommand(childArgs(cmd)...)
	if err != nil {
		return false, fmt.Errorf("--own-netns: %w", err)
	}
	child.Stdout, child.Stderr = s.out, s.err
	if err := child.Run(); err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return true, &ExitError{Code: exit.ExitCode(), Err: errors.New("simulate in its own network namespace failed (its own message is above)")}
		}
		return true, fmt.Errorf("--own-netns: %w", err)
	}
	return true, nil
}

// childArgs are the command line of cmd as given: its path and the flags set.
func childArgs(cmd *cobra.Command) []string {
	args := strings.Fields(cmd.CommandPath())[1:]
	cmd.Flags().Visit(func(f *pflag.Flag) {
		value := f.Value.String()
		if slice, ok := f.Value.(pflag.SliceValue); ok {
			value = strings.Join(slice.GetSlice(), ",")
		}
		args = append(args, "--"+f.Name+"="+value)
	})
	return args
}

// noSidecar is --sidecar's value for a pod without a sidecar (--mesh none).
const noSidecar = "no-sidecar"

// meshlessPods adds the pod of a --mesh none run: it has no sidecar to configure, only
// meshdrain's flags (podsim.MeshlessPod).
func (o simulateOptions) meshlessPods(sc podsim.Scenario, opts podsim.Options) (podsim.Options, error) {
	for _, name := range o.sidecars {
		if strings.TrimSpace(name) != noSidecar {
			return opts, usageError("--sidecar %q with --mesh none: want %s (the pod has no sidecar)", name, noSidecar)
		}
	}
	spec, err := podsim.MeshlessPod(sc)
	if err != nil {
		return opts, usageError("--mesh none: %v", err)
	}
	opts.Sidecars = append(opts.Sidecars, spec)
	for _, strat := range opts.Strategies {
		if strat.Kind == podsim.StrategyOracle {
			return opts, usageError("--strategy oracle: not with --mesh none (which requests reach a pod without a sidecar depends on the strategy)")
		}
	}
	return opts, nil
}

// runSimulate runs the simulation, prints the report, and applies --max-failures.
func runSimulate(cmd *cobra.Command, s streams, o simulateOptions, opts podsim.Options) error {
	opts.Progress = func(r podsim.Result) {
		fmt.Fprintf(s.err, "simulate: %s / %s: %d requests, %d sidecar 5xx, %d client failures, app stopped at %.2fs, pod gone at %.2fs\n",
			r.Strategy, r.Sidecar, r.Requests, r.Sidecar5xx, r.ClientFailures, r.AppStopS, r.PodGoneS)
	}
	started := time.Now()
	results, err := podsim.Run(cmd.Context(), opts)
	if err != nil {
		if cmd.Context().Err() != nil {
			return &ExitError{Code: ExitSignaled, Err: fmt.Errorf("simulate interrupted: %w", err)}
		}
		return fmt.Errorf("simulate: %w", err)
	}
	report := podsim.NewReport(opts.Scenario, opts.Sidecars, results, time.Since(started))
	switch o.output {
	case output.JSON:
		err = report.WriteJSON(s.out)
	case output.YAML:
		err = output.WriteYAML(s.out, report)
	default:
		err = report.WriteTable(s.out, podsim.TableOptions{Timelines: o.timelines})
	}
	if err != nil {
		return err
	}
	text := o.output != output.JSON && o.output != output.YAML
	if o.svgDir != "" && (text || cmd.Flags().Changed("svg")) {
		index, files, err := report.WriteSVGs(o.svgDir)
		if err != nil {
			return fmt.Errorf("--svg %s: %w", o.svgDir, err)
		}
		// Where the pictures are goes after the table, or to stderr so that JSON stays JSON.
		where := s.out
		if !text {
			where = s.err
		}
		fmt.Fprintf(where, "\nDrawn: %d SVG timelines in %s; open %s in a browser.\n", len(files), o.svgDir, index)
	}
	if o.maxFailures >= 0 {
		var over []string
		for _, r := range results {
			if r.ClientFailures > o.maxFailures {
				over = append(over, fmt.Sprintf("%s/%s lost %d", r.Strategy, r.Sidecar, r.ClientFailures))
			}
		}
		if len(over) > 0 {
			return &ExitError{Code: ExitFailure, Err: fmt.Errorf("more than %d client failures: %s", o.maxFailures, strings.Join(over, ", "))}
		}
	}
	return nil
}

// meshdrainBeside is the meshdrain binary in this executable's directory: make build puts
// both binaries in bin/, and the preStop must be the binary that goes into pods, not a copy
// of the test world.
func meshdrainBeside() (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("find this executable: %w", err)
	}
	bin := filepath.Join(filepath.Dir(exe), "meshdrain")
	if _, err := os.Stat(bin); err != nil {
		return "", fmt.Errorf("no meshdrain binary beside %s (make build builds both; or pass --meshdrain-bin PATH): %w", exe, err)
	}
	return bin, nil
}
