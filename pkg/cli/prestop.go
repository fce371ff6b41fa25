package cli

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/meshdrain/meshdrain/pkg/clock"
	"github.com/meshdrain/meshdrain/pkg/drain"
	"github.com/meshdrain/meshdrain/pkg/envoyadmin"
	"github.com/meshdrain/meshdrain/pkg/inbound"
)

type prestopOptions struct {
	admin            string
	ports            []int
	clusters         []string
	httpPrefixes     []string
	gracePeriod      time.Duration
	appDrain         time.Duration
	deadline         time.Duration
	quiet            time.Duration
	minWait          time.Duration
	streamsWait      time.Duration
	strictActive     bool
	poll             time.Duration
	connectTimeout   time.Duration
	latencyAllowance time.Duration
	fallbackWait     time.Duration
	drainMode        string
	signal           string
	pid              int
	pidFile          string
	shutdownURL      string
	exec             string
	execArgs         []string
	dryRun           bool
	logFormat        string
	logFile          string
	verbose          bool
	deadlineSet      bool
}

func defaultPrestopOptions() prestopOptions {
	return prestopOptions{
		admin:            envoyadmin.DefaultURL,
		gracePeriod:      30 * time.Second,
		appDrain:         5 * time.Second,
		quiet:            time.Second,
		minWait:          drain.DefaultMinWait,
		streamsWait:      drain.DefaultStreamsWait,
		poll:             200 * time.Millisecond,
		connectTimeout:   2 * time.Second,
		latencyAllowance: time.Second,
		fallbackWait:     5 * time.Second,
		drainMode:        string(envoyadmin.DrainGraceful),
		logFormat:        "json",
	}
}

func newPrestopCommand(s streams) *cobra.Command {
	o := defaultPrestopOptions()
	cmd := &cobra.Command{
		Use:   "prestop [flags] [-- EXEC-ARGS...]",
		Short: "Run as the app container's preStop hook: return once clients have stopped sending",
		Long: `prestop is meant to be the app container's preStop hook. It:

  1. reads the sidecar's inbound stats from Envoy's admin API (filtered server-side),
  2. POSTs /drain_listeners?inboundonly&graceful so clients are told to reconnect elsewhere,
  3. waits until the inbound new-request counter has not moved for a quiet window and no
     inbound request is active: the clients' sidecars have stopped routing to this pod. The
     window is at least --quiet, longer when the traffic's own pauses are longer (twice the
     longest pause seen, or the pause its rate makes a 1-in-10,000 event), and the wait lasts
     at least --min-wait. Requests still open --streams-wait after the window (streams,
     WebSockets) are left to the app's own shutdown (reason quiet-streams) unless
     --strict-active,
  4. then returns (the kubelet sends SIGTERM to the app), or signals / calls / runs what you
     configure, always by --deadline (default: grace-period - app-drain - 1s).

The last log line is {"msg":"drain finished","reason":...}. Exit codes: 0 quiet, quiet-streams, sidecar-gone
(Envoy was killed: it forwards nothing any more) or no-sidecar (admin port never reached);
3 deadline; 4 no-signal (Istio emits no inbound stats by default: the log names the annotation
to add; meshdrain then waits --fallback-wait); 1 the wait ended but an action (--signal,
--shutdown-url, --exec) failed; 130 interrupted; 2 bad flags.

Every flag can also be set as MESHDRAIN_<FLAG> (e.g. MESHDRAIN_GRACE_PERIOD=45s); lists are
comma-separated. An explicit flag wins. --exec takes one program; its arguments follow --.`,
		Example: `  # In the pod spec (logs go to the container's stdout, visible in kubectl logs):
  lifecycle:
    preStop:
      exec:
        command: ["/meshdrain/meshdrain", "prestop", "--grace-period=30s", "--app-drain=5s",
                  "--log-file=/proc/1/fd/1"]

  # Watch a live sidecar by hand without draining it or touching the app:
  meshdrain prestop --dry-run --log-format console --port 8080

  # A generic Envoy (Consul-style names), signalling the app itself:
  meshdrain prestop --admin http://127.0.0.1:19000 --cluster local_app --http-prefix public_listener \
    --signal TERM --pidfile /var/run/app.pid

  # Run a command when drained (no shell involved):
  meshdrain prestop --exec /app/bin/stop -- --graceful`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := bindEnv(cmd, os.LookupEnv); err != nil {
				return err
			}
			if len(args) > 0 {
				if o.exec == "" {
					return usageError("unexpected arguments %q: arguments after -- belong to --exec", args)
				}
				o.execArgs = args
			}
			o.deadlineSet = cmd.Flags().Changed("deadline") || envSet("MESHDRAIN_DEADLINE")
			return runPrestop(cmd.Context(), s, o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.admin, "admin", o.admin, "Envoy admin API base URL")
	f.IntSliceVar(&o.ports, "port", nil, "inbound target port to watch (repeatable; default: every inbound port found)")
	f.StringSliceVar(&o.clusters, "cluster", nil, "generic Envoy: inbound cluster name to watch, e.g. local_app (repeatable)")
	f.StringSliceVar(&o.httpPrefixes, "http-prefix", nil, "generic Envoy: inbound HTTP stat prefix to watch, e.g. public_listener (repeatable)")
	f.DurationVar(&o.gracePeriod, "grace-period", o.gracePeriod, "the pod's terminationGracePeriodSeconds")
	f.DurationVar(&o.appDrain, "app-drain", o.appDrain, "time the app needs after SIGTERM to finish its in-flight work")
	f.DurationVar(&o.deadline, "deadline", 0, "give up waiting after this long (default grace-period - app-drain - 1s)")
	f.DurationVar(&o.quiet, "quiet", o.quiet, "how long the inbound request counter must stand still")
	f.DurationVar(&o.minWait, "min-wait", o.minWait, "wait at least this long whatever the counters say: the endpoint propagation time, within which a silent client may still send")
	f.DurationVar(&o.streamsWait, "streams-wait", o.streamsWait, "once the clients have stopped, how long requests may stay open (streams, WebSockets) before the app may stop anyway (reason quiet-streams)")
	f.BoolVar(&o.strictActive, "strict-active", false, "wait (up to the deadline) for every open inbound request to end, ignoring --streams-wait")
	f.DurationVar(&o.poll, "poll", o.poll, "interval between two stats requests")
	f.DurationVar(&o.connectTimeout, "connect-timeout", o.connectTimeout, "give up on an unreachable admin API after this long (also bounds each admin call)")
	f.DurationVar(&o.latencyAllowance, "latency-allowance", o.latencyAllowance, "added to --quiet when only completed-request stats exist (they lag arrivals by the latency)")
	f.DurationVar(&o.fallbackWait, "fallback-wait", o.fallbackWait, "fixed wait when the sidecar exposes no inbound stats (capped by the deadline)")
	f.StringVar(&o.drainMode, "drain-mode", o.drainMode, "graceful (POST /drain_listeners?inboundonly&graceful), immediate (?inboundonly) or none")
	f.StringVar(&o.signal, "signal", "", "when drained, send this signal (TERM, SIGTERM or 15) to --pid or --pidfile")
	f.IntVar(&o.pid, "pid", 0, "process to signal (with --signal)")
	f.StringVar(&o.pidFile, "pidfile", "", "file holding the process to signal (with --signal), read when drained")
	f.StringVar(&o.shutdownURL, "shutdown-url", "", "when drained, POST to this URL (e.g. http://127.0.0.1:8080/actuator/shutdown)")
	f.StringVar(&o.exec, "exec", "", "when drained, run this program (no shell); its arguments follow --")
	f.BoolVar(&o.dryRun, "dry-run", false, "watch and report only: no drain call, no action")
	f.StringVar(&o.logFormat, "log-format", o.logFormat, "json or console")
	f.StringVar(&o.logFile, "log-file", "", "write logs here instead of stderr; /proc/1/fd/1 makes them visible in kubectl logs")
	f.BoolVarP(&o.verbose, "verbose", "v", false, "also log each poll's failures at debug level")
	return cmd
}

func envSet(name string) bool { _, ok := os.LookupEnv(name); return ok }

// validate checks flag combinations and derives the deadline.
func (o *prestopOptions) validate() (drain.Config, error) {
	var cfg drain.Config
	mode, err := envoyadmin.ParseDrainMode(o.drainMode)
	if err != nil {
		return cfg, usageError("--drain-mode: %v", err)
	}
	for name, d := range map[string]time.Duration{"--grace-period": o.gracePeriod, "--quiet": o.quiet, "--poll": o.poll, "--connect-timeout": o.connectTimeout} {
		if d <= 0 {
			return cfg, usageError("%s must be positive, got %v", name, d)
		}
	}
	for name, d := range map[string]time.Duration{"--app-drain": o.appDrain, "--min-wait": o.minWait, "--streams-wait": o.streamsWait, "--latency-allowance": o.latencyAllowance, "--fallback-wait": o.fallbackWait} {
		if d < 0 {
			return cfg, usageError("%s must not be negative, got %v", name, d)
		}
	}
	deadline := o.deadline
	if !o.deadlineSet {
		deadline = drain.DefaultDeadline(o.gracePeriod, o.appDrain)
		if deadline <= 0 {
			return cfg, usageError("--grace-period %v leaves no time to wait after --app-drain %v and 1s of margin; raise the grace period or set --deadline", o.gracePeriod, o.appDrain)
		}
	} else if deadline <= 0 || deadline > o.gracePeriod {
		return cfg, usageError("--deadline %v must be positive and within --grace-period %v", deadline, o.gracePeriod)
	}
	for _, p := range o.ports {
		if p < 1 || p > 65535 {
			return cfg, usageError("--port %d: not a port number", p)
		}
	}
	if len(o.ports) > 0 && (len(o.clusters) > 0 || len(o.httpPrefixes) > 0) {
		return cfg, usageError("--port selects Istio inbound ports; --cluster and --http-prefix name a generic Envoy's stats: use one or the other")
	}
	actions, err := o.actions()
	if err != nil {
		return cfg, err
	}
	return drain.Config{
		Selector:         inbound.Selector{Ports: o.ports, Clusters: o.clusters, HTTPPrefixes: o.httpPrefixes},
		DrainMode:        mode,
		Deadline:         deadline,
		Quiet:            o.quiet,
		LatencyAllowance: o.latencyAllowance,
		MinWait:          min(o.minWait, deadline),
		StreamsWait:      o.streamsWaitOrStrict(),
		Poll:             o.poll,
		ConnectTimeout:   o.connectTimeout,
		FallbackWait:     o.fallbackWait,
		DryRun:           o.dryRun,
		Actions:          actions,
		ActionTimeout:    max(o.appDrain, 2*time.Second),
	}, nil
}

// streamsWaitOrStrict is the drain's StreamsWait: zero keeps the strict rule.
func (o *prestopOptions) streamsWaitOrStrict() time.Duration {
	if o.strictActive {
		return 0
	}
	return o.streamsWait
}

func (o *prestopOptions) actions() ([]drain.Action, error) {
	var actions []drain.Action
	switch {
	case o.signal != "":
		sig, err := drain.ParseSignal(o.signal)
		if err != nil {
			return nil, usageError("--signal: %v", err)
		}
		if (o.pid > 0) == (o.pidFile != "") {
			return nil, usageError("--signal needs exactly one of --pid or --pidfile")
		}
		actions = append(actions, drain.SignalAction{Signal: sig, PID: o.pid, PIDFile: o.pidFile})
	case o.pid != 0 || o.pidFile != "":
		return nil, usageError("--pid and --pidfile need --signal")
	}
	if o.pid < 0 {
		return nil, usageError("--pid %d: not a process id", o.pid)
	}
	if o.shutdownURL != "" {
		action := drain.ShutdownURLAction{URL: o.shutdownURL}
		if err := action.Validate(); err != nil {
			return nil, usageError("--shutdown-url: %v", err)
		}
		actions = append(actions, action)
	}
	if o.exec != "" {
		actions = append(actions, drain.ExecAction{Argv: append([]string{o.exec}, o.execArgs...)})
	}
	return actions, nil
}

func runPrestop(ctx context.Context, s streams, o prestopOptions) error {
	cfg, err := o.validate()
	if err != nil {
		return err
	}
	level := zapcore.InfoLevel
	if o.verbose {
		level = zapcore.DebugLevel
	}
	logger, closeLog, err := newLogger(o.logFormat, o.logFile, s.err, level)
	if err != nil {
		return err
	}
	defer closeLog()
	logger = logger.With(zap.String("component", "prestop"))
	if o.minWait > cfg.Deadline {
		logger.Warn("the deadline comes before --min-wait: the grace period does not cover endpoint propagation, and the wait can only end at the deadline",
			zap.Duration("deadline", cfg.Deadline), zap.Duration("min_wait", o.minWait))
	}
	if cfg.Deadline+o.appDrain > o.gracePeriod {
		logger.Warn("deadline + app drain exceed the grace period: the app may be SIGKILLed mid-request",
			zap.Duration("deadline", cfg.Deadline), zap.Duration("app_drain", o.appDrain), zap.Duration("grace_period", o.gracePeriod))
	}
	// Each admin request may take up to --connect-timeout: filtering still walks every stat
	// of a large sidecar on Envoy's main thread.
	client, err := envoyadmin.New(o.admin, envoyadmin.Options{RequestTimeout: o.connectTimeout})
	if err != nil {
		return usageError("--admin: %v", err)
	}
	for i, a := range cfg.Actions {
		if exec, ok := a.(drain.ExecAction); ok {
			exec.Stdout, exec.Stderr = s.err, s.err
			cfg.Actions[i] = exec
		}
	}
	cfg.Clock = clock.Real{}
	cfg.Logger = logger
	res := drain.Run(ctx, cfg, client)
	switch code := res.ExitCode(); {
	case code == 0:
		return nil
	case res.Reason.ExitCode() == 0:
		return &ExitError{Code: code, Err: fmt.Errorf("drained (%s) but the action failed: %w", res.Reason, res.ActionErr)}
	default:
		return &ExitError{Code: code}
	}
}
