package cli

import (
	"context"
	"fmt"
	"os"
	"runtime/debug"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.uber.org/zap"

	"github.com/meshdrain/meshdrain/pkg/clock"
	"github.com/meshdrain/meshdrain/pkg/hook/drain"
	"github.com/meshdrain/meshdrain/pkg/hook/hold"
	"github.com/meshdrain/meshdrain/pkg/hook/risk"
	"github.com/meshdrain/meshdrain/pkg/localhttp"
	"github.com/meshdrain/meshdrain/pkg/mesh"
	"github.com/meshdrain/meshdrain/pkg/mesh/appmetrics"
	"github.com/meshdrain/meshdrain/pkg/mesh/backends"
	"github.com/meshdrain/meshdrain/pkg/mesh/envoy"
	"github.com/meshdrain/meshdrain/pkg/mesh/kernel"
	"github.com/meshdrain/meshdrain/pkg/mesh/linkerd"
)

type prestopOptions struct {
	mesh             mesh.Mesh
	admin            string
	allowRemote      bool
	ports            []int
	clusters         []string
	httpPrefixes     []string
	gracePeriod      time.Duration
	appDrain         time.Duration
	deadline         time.Duration
	quiet            time.Duration
	minWait          time.Duration
	streamsWait      time.Duration
	clientPeriod     time.Duration
	rpsPerClient     float64
	edsLagBound      time.Duration
	lagDist          string
	risk             float64
	settledQuiet     time.Duration
	drainAt          string
	clientEvidence   string
	listenerPorts    []int
	ignoreSources    []string
	appMetrics       string
	appRequests      string
	strictActive     bool
	poll             time.Duration
	connectTimeout   time.Duration
	latencyAllowance time.Duration
	fallbackWait     time.Duration
	drainMode        string
	holdChannel      string
	signal           string
	pid              int
	pidFile          string
	shutdownURL      string
	exec             string
	execArgs         []string
	dryRun           bool
	hookOutput
	deadlineSet    bool
	minWaitSet     bool
	appRequestsSet bool
	// offline: the configuration is checked away from the pod (plan, on the preStop it
	// writes), so what the flags name in the pod (the process to signal, its pid file, the
	// program to run) is not looked at.
	offline bool

	// waitPastBoundOpeners: --mesh none waits for the clients taken for callers that address
	// the pod directly, as for any client opening past --eds-lag-bound.
	waitPastBoundOpeners bool
}

func defaultPrestopOptions() prestopOptions {
	return prestopOptions{
		mesh:             defaultPrestopMesh,
		gracePeriod:      drain.DefaultGracePeriod,
		appDrain:         drain.DefaultAppDrain,
		quiet:            drain.DefaultQuiet,
		minWait:          drain.DefaultMinWait,
		streamsWait:      drain.DefaultStreamsWait,
		poll:             drain.DefaultPoll,
		connectTimeout:   drain.DefaultConnectTimeout,
		latencyAllowance: drain.DefaultLatencyAllowance,
		fallbackWait:     drain.DefaultFallbackWait,
		clientEvidence:   clientEvidenceAuto,
		drainAt:          drainAtStart,
		drainMode:        string(mesh.DrainGraceful),
		appRequests:      appmetrics.DefaultCounter,
		holdChannel:      hold.DefaultChannel,
		risk:             risk.DefaultLevel,
		hookOutput:       hookOutput{logFormat: "json"},
	}
}

// prestopFlags registers prestop's flags on fs. The command parses its own flag set (see
// newPrestopCommand), so the same registration serves the help text and the parsing.
func prestopFlags(f *pflag.FlagSet, o *prestopOptions) {
	f.StringVar((*string)(&o.mesh), "mesh", string(o.mesh), "the sidecar: istio or envoy (Envoy's admin API, drained with /drain_listeners), linkerd (a Linkerd proxy: no drain call), auto (ask the admin port at start, within --connect-timeout), or none (no sidecar: the kernel is the sidecar; the pod's own socket table and TCP counters on the app's --port, no drain call)")
	f.StringVar(&o.admin, "admin", "", "the sidecar's admin API (default per mesh: "+envoy.DefaultURL+"; linkerd "+linkerd.DefaultAdminURL+"; auto tries "+linkerd.DefaultAdminURL+" then "+envoy.DefaultURL+"); also http://[::1]:PORT, http://localhost:PORT or unix:/path/admin.sock")
	f.BoolVar(&o.allowRemote, "allow-remote", false, "let --admin, --shutdown-url and --app-metrics name a host other than the pod's loopback")
	f.IntSliceVar(&o.ports, "port", nil, "inbound target port to watch (repeatable; default: every inbound port found); with --mesh none, required: the app's own listening ports")
	f.StringSliceVar(&o.ignoreSources, "ignore-source", nil, "--mesh none: a source that is never a client, as a CIDR, an IP or $(NAME), an environment variable read by meshdrain itself (repeatable; plan writes $(HOST_IP), the node's address from status.hostIP, for the kubelet's probes)")
	f.StringVar(&o.appMetrics, "app-metrics", "", "--mesh none: the app's own Prometheus metrics on the loopback (e.g. http://127.0.0.1:9090/metrics): before --eds-lag-bound, the requests its --app-requests counter counts beyond what the kernel showed are activity too (docs/meshless.md)")
	f.StringVar(&o.appRequests, "app-requests", o.appRequests, "--mesh none with --app-metrics: the app's request counter, with label matchers as in PromQL to leave probes and scrapes out, e.g. 'http_server_requests_seconds_count{uri!~\"/actuator.*\"}'")
	f.BoolVar(&o.waitPastBoundOpeners, "wait-past-bound-openers", false, "--mesh none: also wait for a client that keeps opening connections past --eds-lag-bound at the period it had before it (a monitor or scraper addressing the pod directly, which never learns): by default it is named (clients_addressing_pod) and does not hold the app")
	f.StringSliceVar(&o.clusters, "cluster", nil, "generic Envoy: inbound cluster name to watch, e.g. local_app (repeatable)")
	f.StringSliceVar(&o.httpPrefixes, "http-prefix", nil, "generic Envoy: inbound HTTP stat prefix to watch, e.g. public_listener (repeatable)")
	secondsVar(f, &o.gracePeriod, "grace-period", o.gracePeriod, "the pod's terminationGracePeriodSeconds")
	f.DurationVar(&o.appDrain, "app-drain", o.appDrain, "time the app needs after SIGTERM to finish its in-flight work")
	f.DurationVar(&o.deadline, "deadline", 0, "give up waiting after this long (default grace-period - app-drain - 1s)")
	f.DurationVar(&o.quiet, "quiet", o.quiet, "how long the inbound request counter must stand still (at least two polls, less than the deadline)")
	f.DurationVar(&o.minWait, "min-wait", o.minWait, "wait at least this long whatever happens: the endpoint propagation time, within which a silent client may still send (at most the deadline; the default is cut to the deadline)")
	f.DurationVar(&o.streamsWait, "streams-wait", o.streamsWait, "once the clients have stopped, how long requests may stay open (streams, WebSockets) before the app may stop anyway (reason quiet-streams)")
	f.DurationVar(&o.clientPeriod, "client-period", 0, "clients that send on a schedule send at least this often: the window then ignores the traffic's own pauses (--quiet must be at least this + --poll; meshdrain plan --client-period writes both)")
	f.Float64Var(&o.rpsPerClient, "rps-per-client", 0, "one client's request rate, requests a second (meshdrain plan --rps-per-client writes it): a client that sent during the drain without showing a pooled connection, so that its close says nothing, has stopped once silent for the pause its arrivals exceed once in 10,000 (9.2 / rate, at least --quiet); --client-period does the same with --quiet")
	f.DurationVar(&o.edsLagBound, "eds-lag-bound", 0, "how late the last client applies the endpoint removal, from the deletion (plan writes its last-client --eds-lag): past it, one --quiet of silence is enough and idle connections still open do not hold the app")
	f.StringVar(&o.lagDist, "lag-dist", "", "the fleet's lag distribution, SHARE:LAG,... from the preStop's start (plan --lag-from writes it, e.g. 0:400ms,0.5:1.2s,0.99:3.5s,1:6s): the wait ends once the probability that some client still routes here is at most --risk, and --min-wait defaults to 0")
	f.Float64Var(&o.risk, "risk", o.risk, "with --lag-dist: the risk the stop may take, 0 < P <= 0.5; the final event states the figure at the stop (risk)")
	f.DurationVar(&o.settledQuiet, "settled-quiet", 0, "the silence asked for once no client may still be on its way (past --eds-lag-bound, or every client left): the ordinary quiet window, not a --quiet raised for sparse clients (default 1s, at least two polls)")
	f.StringVar(&o.drainAt, "drain-at", o.drainAt, "start: call /drain_listeners when the hook starts; end: when the clients have let go, just before the app stops (for a sidecar whose own drain at the deletion is turned off: docs/decision-rule.md)")
	f.StringVar(&o.clientEvidence, "client-evidence", o.clientEvidence, "auto: read the pod's socket table to see which clients have let go (Envoy sidecars); off: silence alone decides")
	f.IntSliceVar(&o.listenerPorts, "inbound-listener-port", nil, "the sidecar's inbound listener port(s) whose connections are the clients' (default: the listener its stats name, Istio's 15006)")
	f.BoolVar(&o.strictActive, "strict-active", false, "wait (up to the deadline) for every open inbound request to end, ignoring --streams-wait")
	f.DurationVar(&o.poll, "poll", o.poll, "interval between two stats requests (at least 20ms)")
	f.DurationVar(&o.connectTimeout, "connect-timeout", o.connectTimeout, "give up on an unreachable admin API after this long (also bounds each admin call)")
	f.DurationVar(&o.latencyAllowance, "latency-allowance", o.latencyAllowance, "added to --quiet when only completed-request stats exist (they lag arrivals by the latency)")
	f.DurationVar(&o.fallbackWait, "fallback-wait", o.fallbackWait, "fixed wait when the sidecar exposes no inbound stats or the configuration is wrong (capped by the grace period)")
	f.StringVar(&o.drainMode, "drain-mode", o.drainMode, "Envoy: graceful (POST /drain_listeners?inboundonly&graceful), immediate (?inboundonly) or none; a Linkerd proxy gets no drain call whatever this says")
	f.StringVar(&o.holdChannel, "hold-channel", o.holdChannel, "tell meshdrain hold (the proxy's preStop) when this hook starts and ends, on this channel: @NAME (an abstract unix socket the pod's containers share) or /PATH (empty: tell nobody)")
	f.StringVar(&o.signal, "signal", "", "when drained, send this signal (TERM, SIGTERM or 15; never KILL or STOP) to --pid or --pidfile")
	f.IntVar(&o.pid, "pid", 0, "process to signal (with --signal); checked at start, and signalled only if it is still that process")
	f.StringVar(&o.pidFile, "pidfile", "", "file holding the process to signal (with --signal): read at start, and again when drained (it must name the same process)")
	f.StringVar(&o.shutdownURL, "shutdown-url", "", "when drained, POST to this URL on the loopback (e.g. http://127.0.0.1:8080/actuator/shutdown) or a unix socket (unix:/run/app.sock:/actuator/shutdown)")
	f.StringVar(&o.exec, "exec", "", "when drained, run this program (no shell; in its own process group); its arguments follow --")
	f.BoolVar(&o.dryRun, "dry-run", false, "watch and report only: no drain call, no action")
	o.hookOutput.register(f, prestopOutputHelp)
}

var prestopOutputHelp = hookOutputHelp{logs: "kubectl logs",
	verbose:  "also log each poll's failures at debug level",
	validate: "check the configuration and everything the hook needs (variables, pid file, program, log file, URLs), then exit 0 or 2 at once"}

func newPrestopCommand(s streams) *cobra.Command {
	o := defaultPrestopOptions()
	cmd := &cobra.Command{Use: "prestop [flags] [-- EXEC-ARGS...]", Short: prestopShort, Long: prestopLong(), Example: prestopExample}
	load := func(ctx context.Context, args, environ []string) hookSetup {
		limitPrestopMemory()
		return loadPrestop(ctx, args, environ)
	}
	return newHookCommand(s, cmd, func(f *pflag.FlagSet) { prestopFlags(f, &o) }, load)
}

const prestopShort = "Run as the app container's preStop hook: return once clients have stopped sending"

// prestopExample is prestop's help examples.
const prestopExample = `  # In the pod spec (logs go to the container's stdout, visible in kubectl logs):
  lifecycle:
    preStop:
      exec:
        command: ["/meshdrain/meshdrain", "prestop", "--grace-period=52s", "--app-drain=5s",
                  "--log-file=/proc/1/fd/1"]

  # Check a hook's configuration inside the pod, without draining anything:
  kubectl exec deploy/web -c web -- /meshdrain/meshdrain prestop --validate --grace-period=52s --signal TERM --pid 1

  # Watch a live sidecar by hand without draining it or touching the app:
  meshdrain prestop --dry-run --log-format console --port 8080

  # A Linkerd pod (as plan --mesh linkerd writes it):
  /meshdrain/meshdrain prestop --mesh=linkerd --admin=http://127.0.0.1:4191 --grace-period=52s --app-drain=5s --log-file=/proc/1/fd/1

  # A pod without a sidecar (plain Service, ingress, IP-mode load balancer, Istio ambient):
  # the kernel is the sidecar; env HOST_IP from fieldRef status.hostIP leaves the kubelet's
  # probes out ($(HOST_IP) is read by meshdrain itself if the kubelet did not expand it):
  /meshdrain/meshdrain prestop --mesh=none --port=8080 --ignore-source=$(HOST_IP) --eds-lag-bound=10s --grace-period=52s --app-drain=5s --log-file=/proc/1/fd/1

  # A generic Envoy (Consul-style names), signalling the app itself:
  meshdrain prestop --admin http://127.0.0.1:19000 --cluster local_app --http-prefix public_listener \
    --signal TERM --pidfile /var/run/app.pid

  # Run a command when drained (no shell involved):
  meshdrain prestop --exec /app/bin/stop -- --graceful`

// prestopMemoryLimit is prestop's soft memory limit (Go runtime memory, not RSS): a drain
// needs a few MiB; the stats cap is 2 MiB.
const prestopMemoryLimit = 16 << 20

// prestopLong is the help text; its exit-code table is printed from drain.ExitCodes, so the
// help cannot disagree with the code (TestPrestopHelpMatchesTheExitCodes).
func prestopLong() string {
	var b strings.Builder
	b.WriteString(`prestop is meant to be the app container's preStop hook. It:

  1. reads the sidecar's inbound stats: Envoy's admin API (filtered server-side), or with
     --mesh linkerd a Linkerd proxy's /metrics on 127.0.0.1:4191,
  2. Envoy only: POSTs /drain_listeners?inboundonly&graceful so clients are told to reconnect
     elsewhere (a Linkerd proxy has no drain endpoint: no call is made, and the final line
     says so),
  3. waits until the inbound new-request counter has not moved for a quiet window and no
     inbound request is active: the clients' sidecars have stopped routing to this pod. The
     window is at least --quiet, longer when the traffic's own pauses are longer (twice the
     longest pause seen, or the pause its rate makes a 1-in-10,000 event; with
     --client-period, a schedule the clients keep, the pauses are not counted), and the wait
     lasts at least --min-wait. Requests still open --streams-wait after the window (streams,
     WebSockets) are left to the app's own shutdown (reason quiet-streams) unless
     --strict-active,
  4. then returns (the kubelet sends SIGTERM to the app), or signals / calls / runs what you
     configure, always by --deadline (default: grace-period - app-drain - 1s); the actions'
     own timeout is cut so that they end before the grace period.

--lag-dist SHARE:LAG,... (plan --lag-from writes it): the wait may end once the probability
that some client still routes here is at most --risk (default 0.001); --min-wait then defaults
to 0, and the final event states the figure at the stop (risk, risk_from).

--mesh none is a pod without a sidecar: the kernel is the sidecar. It watches the app's own
listening ports (--port, required) in the pod's socket table and /proc/net/snmp: every
connection accepted (PassiveOpens counts even those opened and closed between two reads; one
nothing names is an unknown client's) and the data received on open connections, per client
address; --ignore-source leaves the kubelet's probes out. Past --eds-lag-bound (for kube-proxy,
its sync bound), a client still sending on a connection opened before it is routed per
connection and will never learn: it is named (clients_never_learn) and does not hold the app,
whose graceful shutdown must close it; one opening new connections past it is named too
(clients_opening_past_bound) and holds the app, unless it keeps the period it opened at before
the bound (at least three opens past it, the first across it): that is a caller addressing
the pod directly (a monitor, a scraper), named in clients_addressing_pod, whose activity past
the bound no longer counts (--wait-past-bound-openers waits for it). There is no drain call. It is refused in a hostNetwork pod,
whose socket table and counters are the node's.

--mesh istio (the default) and envoy read Envoy; linkerd reads a Linkerd proxy; auto asks the
admin port at start which sidecar it is (--admin, else 4191 then 15000), within
--connect-timeout: no admin port at all ends no-sidecar, one that answers as neither is a
start error. A hook whose sidecar is known should name it: detecting costs requests at the
worst moment.

It fails safe: any start error (a bad flag or MESHDRAIN_* value, a --pidfile, --pid or --exec
that does not check out, a remote --admin, an admin port --mesh auto cannot identify) is logged, the app is held for --fallback-wait
(capped by the grace period; --min-wait if longer), and the exit code is 2. An unusable
--log-file does not stop the drain: it logs to stderr and exits 2 at the end. --admin and
--shutdown-url must be the pod's loopback (127.0.0.0/8, [::1], localhost) or a unix socket
unless --allow-remote is given; credentials in URLs are never logged.

The last log line is {"msg":"drain finished","reason":...}. Exit codes:

`)
	b.WriteString(exitCodeTable(drain.ExitCodes.Lines()))
	b.WriteString(`
Every flag can also be set as MESHDRAIN_<FLAG> (e.g. MESHDRAIN_GRACE_PERIOD=45s); lists are
comma-separated; an explicit flag wins; the "drain started" event says where each setting
came from, and an unknown MESHDRAIN_* variable is a warning (an error with --validate).
--exec takes one program; its arguments follow --.`)
	return b.String()
}

// limitPrestopMemory sets prestop's soft memory limit. The hook shares the app container's
// memory limit: a soft limit makes the garbage collector work harder before the process
// grows, e.g. while it discards an admin answer that is over its cap. GOMEMLIMIT still wins.
func limitPrestopMemory() {
	if _, set := os.LookupEnv("GOMEMLIMIT"); !set {
		debug.SetMemoryLimit(prestopMemoryLimit)
	}
}

func (setup *prestopSetup) output() hookOutput { return setup.opts.hookOutput }

// run is the drain, or its fail-safe path on a start problem.
func (setup *prestopSetup) run(ctx context.Context, s streams, start time.Time) error {
	o := setup.opts
	logger, closeLog, logFileErr := o.logger("prestop", s, setup.warnings)
	defer closeLog()
	report := startHoldReport(setup, start)
	failSafe := func(problems []error) error {
		return endPrestop(report, drain.FailSafe(ctx, drain.FailSafeConfig{Problems: problems, Hold: setup.hold, Start: start, Logger: logger}))
	}
	if len(setup.problems) > 0 {
		return failSafe(setup.problems)
	}
	cfg := setup.cfg
	if err := degradedLog(logger, "drain", logFileErr); err != nil {
		cfg.Degraded = err
	}
	if o.minWait > cfg.MinWait {
		logger.Warn("the deadline comes before the default --min-wait: the grace period does not cover endpoint propagation, and a silent client may still send after the app stops",
			zap.Duration("deadline", cfg.Deadline), zap.Duration("min_wait", cfg.MinWait), zap.Duration("default_min_wait", o.minWait))
	}
	if cfg.Deadline+o.appDrain > o.gracePeriod {
		logger.Warn("deadline + app drain exceed the grace period: the app may be SIGKILLed mid-request",
			zap.Duration("deadline", cfg.Deadline), zap.Duration("app_drain", o.appDrain), zap.Duration("grace_period", o.gracePeriod))
	}
	for i, a := range cfg.Actions {
		if exec, ok := a.(drain.ExecAction); ok {
			exec.Stdout, exec.Stderr = s.err, s.err
			cfg.Actions[i] = exec
		}
	}
	sidecar := setup.sidecar
	if o.mesh == mesh.Auto {
		var problems []error
		sidecar, problems = detectForDrain(ctx, logger, setup, &cfg, start)
		if len(problems) > 0 {
			return failSafe(problems)
		}
	}
	if hook, ok := sidecar.(*linkerd.HookSidecar); ok {
		hook.Log = logger
	}
	cfg.Clock = clock.Real{}
	cfg.Logger = logger
	cfg.Start = start
	return endPrestop(report, drain.Run(ctx, cfg, sidecar))
}

// startHoldReport starts telling meshdrain hold, the proxy's preStop, that this hook runs
// and when it decides at the latest (docs/hold.md): nil when there is nobody to tell (no
// --hold-channel, one that does not check out) or nothing to tell (a dry run watches only).
func startHoldReport(setup *prestopSetup, start time.Time) *hold.Reporter {
	o := setup.opts
	if o.dryRun || o.holdChannel == "" || hold.CheckChannel(o.holdChannel) != nil {
		return nil
	}
	latest := setup.cfg.Deadline
	if len(setup.problems) > 0 {
		latest = setup.hold
	}
	retry := o.poll
	if retry < drain.MinPoll {
		retry = drain.DefaultPoll
	}
	return hold.StartReporting(o.holdChannel, start.Add(latest), retry, clock.Real{})
}

// endPrestop tells meshdrain hold that this hook is over, after its final event, and turns
// the outcome into the exit code.
func endPrestop(report *hold.Reporter, res drain.Result) error {
	report.Done(string(res.Reason), res.ExitCode())
	return hookExit(res.ExitCode())
}

// validation is what prestop --validate prints.
func (setup *prestopSetup) validation() hookValidation {
	return hookValidation{hook: "prestop", start: setup.hookStart, settings: setup.cfg.Settings, plan: setup.plan,
		failSafe: fmt.Sprintf("hold the app for %v", setup.hold)}
}

// plan is what a prestop would do, as --validate prints it.
func (setup *prestopSetup) plan() []string {
	cfg, o := setup.cfg, setup.opts
	lines := setup.meshLines()
	actions := "none (the kubelet sends SIGTERM when prestop returns)"
	if len(cfg.Actions) > 0 {
		names := make([]string, len(cfg.Actions))
		for i, a := range cfg.Actions {
			names[i] = a.String()
		}
		actions = strings.Join(names, "; ")
	}
	holdReport := "none (--hold-channel is empty)"
	switch {
	case o.holdChannel != "" && o.dryRun:
		holdReport = "none (a dry run)"
	case o.holdChannel != "":
		holdReport = "reports to meshdrain hold on " + o.holdChannel + " (if the proxy runs one)"
	}
	lines = append(lines,
		fmt.Sprintf("deadline  %v (grace period %v, actions end by %v)", cfg.Deadline, cfg.GracePeriod, cfg.GracePeriod-drain.DefaultActionMargin),
		fmt.Sprintf("wait      quiet %v, poll %v, min-wait %v, fallback %v", cfg.Quiet, cfg.Poll, cfg.MinWait, cfg.FallbackWait),
		"actions   "+actions,
		"hold      "+holdReport)
	if !cfg.Lag.IsZero() {
		lines = append(lines, fmt.Sprintf("risk      stop once the risk figure is at most %v, from --lag-dist %s", cfg.Risk, cfg.Lag))
	}
	if o.drainAt == drainAtEnd {
		// The pod's spec, where the injector merged the override or not, is not visible here.
		lines = append(lines, "override  whether the injector merged istio-proxy's meshdrain hold cannot be seen from this container; "+
			"from a machine with kubectl: kubectl get pod POD -o yaml | meshdrain check --pod-spec -")
	}
	return lines
}

// meshLines are --validate's lines about the mesh: what the drain reads, and its drain call.
func (setup *prestopSetup) meshLines() []string {
	switch o := setup.opts; o.mesh {
	case mesh.Auto:
		return []string{fmt.Sprintf("mesh      auto: asks %s at start, within --connect-timeout %v", strings.Join(redactAll(setup.candidates), ", then "), o.connectTimeout)}
	case mesh.None:
		lines := []string{fmt.Sprintf("mesh      none: reads the pod's socket table and /proc/net/snmp on --port %v, no drain call (%s)", o.ports, kernel.NoDrainCallReason)}
		if len(o.ignoreSources) > 0 {
			lines = append(lines, "ignore    "+strings.Join(o.ignoreSources, ", "))
		}
		if o.appMetrics != "" {
			lines = append(lines, fmt.Sprintf("app       %s from %s, before --eds-lag-bound", o.appRequests, localhttp.Redact(o.appMetrics)))
		}
		return lines
	case mesh.Linkerd:
		return []string{"mesh      linkerd: reads /metrics, no drain call (" + linkerd.NoDrainCallReason + ")", "admin     " + setup.adminURL}
	}
	return []string{fmt.Sprintf("mesh      %s: reads Envoy's /stats, drain call %s", setup.opts.mesh, setup.cfg.DrainMode), "admin     " + setup.adminURL}
}

func redactAll(urls []string) []string {
	out := make([]string, len(urls))
	for i, u := range urls {
		out[i] = localhttp.Redact(u)
	}
	return out
}

// detectForDrain is --mesh auto at run time: it asks the candidates which sidecar answers
// (backends.DetectUntil) and builds that sidecar's drain. An admin port that answers as
// neither sidecar, or keeps failing, is a start problem (the fail-safe path); no admin port
// at all is the drain's no-sidecar, as for a chosen mesh.
func detectForDrain(ctx context.Context, logger *zap.Logger, setup *prestopSetup, cfg *drain.Config, start time.Time) (drain.Sidecar, []error) {
	o := setup.opts
	limit := start.Add(min(o.connectTimeout, cfg.Deadline))
	found := backends.DetectUntil(ctx, setup.candidates, o.sidecarOptions(cfg), o.poll, start, limit)
	switch {
	case found.Mesh != "":
		chosen := mesh.Istio
		if found.Mesh == mesh.Linkerd {
			chosen = mesh.Linkerd
		}
		logger.Info("sidecar detected", zap.String("mesh", string(found.Mesh)), zap.String("admin", localhttp.Redact(found.URL)),
			zap.Int64("took_ms", found.Took.Milliseconds()))
		sidecar, warnings, problems := o.sidecarFor(chosen, found.URL, setup.drainModeSet, cfg)
		for _, w := range warnings {
			logger.Warn(w)
		}
		return sidecar, problems
	case found.Unreachable:
		logger.Warn("--mesh auto: no sidecar admin port answered", zap.Strings("candidates", redactAll(setup.candidates)),
			zap.String("error", found.Err.Error()), zap.Int64("took_ms", found.Took.Milliseconds()))
		return backends.Undetected{}, nil
	}
	return nil, []error{fmt.Errorf("--mesh auto: cannot tell which sidecar answers (pass --mesh istio, envoy or linkerd, and --admin): %w", found.Err)}
}

// redactedValue is a flag's value as it may be logged.
func redactedValue(name, value string) string {
	switch name {
	case "admin", "shutdown-url", "app-metrics":
		return localhttp.Redact(value)
	}
	return value
}

// Values of --client-evidence and --drain-at.
const (
	drainAtStart = "start"
	drainAtEnd   = "end"

	clientEvidenceAuto = "auto"
	clientEvidenceOff  = "off"
)
