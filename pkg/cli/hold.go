package cli

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/meshdrain/meshdrain/pkg/clock"
	"github.com/meshdrain/meshdrain/pkg/hook/drain"
	"github.com/meshdrain/meshdrain/pkg/hook/hold"
	"github.com/meshdrain/meshdrain/pkg/sockets"
)

func newHoldCommand(s streams) *cobra.Command {
	o := defaultHoldOptions()
	cmd := &cobra.Command{Use: "hold [flags]", Short: holdShort, Long: holdLong(), Example: holdExample}
	load := func(_ context.Context, args, environ []string) hookSetup { return loadHold(args, environ) }
	return newHookCommand(s, cmd, func(f *pflag.FlagSet) { holdFlags(f, &o) }, load)
}

// holdOptions are `meshdrain hold`'s inputs. The timing flags are prestop's, with prestop's
// defaults: hold must end by the same hook deadline.
type holdOptions struct {
	gracePeriod    time.Duration
	appDrain       time.Duration
	deadline       time.Duration
	prestopWait    time.Duration
	poll           time.Duration
	connectTimeout time.Duration
	channel        string
	ports          []int
	outboundPort   int
	proxyUID       int
	drainURL       string
	hookOutput
}

// ownUser is --proxy-uid's default: hold runs as the proxy's user.
const ownUser = -1

func defaultHoldOptions() holdOptions {
	return holdOptions{
		gracePeriod:    drain.DefaultGracePeriod,
		appDrain:       drain.DefaultAppDrain,
		prestopWait:    hold.DefaultPrestopWait,
		poll:           drain.DefaultPoll,
		connectTimeout: drain.DefaultConnectTimeout,
		channel:        hold.DefaultChannel,
		outboundPort:   hold.DefaultOutboundPort,
		proxyUID:       ownUser,
		drainURL:       hold.DefaultDrainURL,
		hookOutput:     hookOutput{logFormat: "json"},
	}
}

func holdFlags(f *pflag.FlagSet, o *holdOptions) {
	secondsVar(f, &o.gracePeriod, "grace-period", o.gracePeriod, "the pod's terminationGracePeriodSeconds (as given to prestop)")
	f.DurationVar(&o.appDrain, "app-drain", o.appDrain, "time the app needs after SIGTERM to finish its in-flight work (as given to prestop): where the app cannot be seen, the proxy is kept that long after the app was told to stop; an app seen listening is watched until it lets go, within the bound")
	f.DurationVar(&o.deadline, "deadline", 0, "the app hook's deadline, as given to prestop (default grace-period - app-drain - 1s)")
	f.DurationVar(&o.prestopWait, "prestop-wait", o.prestopWait, "how long to wait for a prestop to report before taking the app as having none (or as gone)")
	f.StringVar(&o.channel, "channel", o.channel, "where prestop reports: @NAME, an abstract unix socket the pod's containers share, or /PATH, a socket file on a shared volume (prestop's --hold-channel)")
	f.IntSliceVar(&o.ports, "port", nil, "the app's port, watched until the app lets go of it (repeatable; default: the TCP ports in "+hold.PodPortsVariable+", the pod's containerPorts as Istio's injector sets them)")
	f.IntVar(&o.outboundPort, "outbound-port", o.outboundPort, "the proxy's outbound capture port: an established connection there is the app still calling out through the proxy (0: not watched)")
	f.IntVar(&o.proxyUID, "proxy-uid", o.proxyUID, "the proxy's user, whose sockets on the app's ports are not the app's (Istio TPROXY) (default: the user hold runs as)")
	f.StringVar(&o.drainURL, "drain-url", o.drainURL, "POSTed once the app's hook is over: pilot-agent's /drain drains Envoy's inbound listeners and makes its SIGTERM end the proxy at once (empty: no call; loopback only)")
	f.DurationVar(&o.connectTimeout, "connect-timeout", o.connectTimeout, "bounds the --drain-url call")
	f.DurationVar(&o.poll, "poll", o.poll, "interval between two reads of the socket table (at least 20ms)")
	o.hookOutput.register(f, holdOutputHelp)
}

var holdOutputHelp = hookOutputHelp{logs: "kubectl logs -c istio-proxy",
	verbose:  "also log failed socket-table reads at debug level",
	validate: "check the configuration and the log file, print what the hold would do, and exit 0 or 2 at once"}

const holdShort = "Run as the proxy container's preStop hook: keep the proxy until the app's prestop has decided and the app has let go"

// holdExample is hold's help examples; a test validates every command line in it.
const holdExample = `  # In the pod spec: an istio-proxy container that Istio's injector merges into the proxy it
  # injects (in initContainers too, for native sidecars); the meshdrain volume is the one
  # meshdrain install fills, and the app's prestop reports to @meshdrain-hold by default:
  containers:
    - name: istio-proxy
      image: auto
      volumeMounts:
        - { name: meshdrain, mountPath: /meshdrain, readOnly: true }
      lifecycle:
        preStop:
          exec:
            command: ["/meshdrain/meshdrain", "hold", "--grace-period=52s", "--app-drain=5s",
                      "--log-file=/proc/1/fd/1"]

  # Check a hold's configuration in the pod, without holding anything:
  kubectl exec deploy/web -c istio-proxy -- /meshdrain/meshdrain hold --validate --grace-period=52s --app-drain=5s

  # Try it by hand next to a prestop: watch port 8080, no drain call, people's logs:
  meshdrain hold --grace-period 20s --app-drain 2s --port 8080 --drain-url= --log-format console`

// holdLong is the help text; its exit-code table is printed from hold.ExitCodes.
func holdLong() string {
	var b strings.Builder
	b.WriteString(`hold is meant to be the preStop hook of the pod's proxy container (istio-proxy), run
from the volume meshdrain install fills: no shell, any proxy image. It defers Istio's own
drain at the deletion until the app container's meshdrain prestop has decided (regime b,
docs/decision-rule.md), with one manifest for classic and native sidecars. It:

  1. listens on --channel, where every prestop of the pod reports "running" (with its
     deadline) when it starts and "done" when it ends (prestop's --hold-channel),
  2. once they are done (or none reported within --prestop-wait and the app is not
     listening; or a prestop's deadline passed), POSTs --drain-url: pilot-agent's /drain
     drains Envoy's inbound listeners and makes the proxy's SIGTERM end it at once,
  3. returns once the app has let go of the proxy: no listener or connection of its own on
     its ports (--port; by default the pod's declared containerPorts), and no outbound
     connection through --outbound-port, in two reads in a row. While the app, once seen
     listening, still holds them, it serves: the proxy is kept, up to the bound. Where the
     app cannot be seen (no port known, no socket table, a port it never listened on): at
     --app-drain after it was told to stop (its prestop ended, or its listener went away).

A classic proxy gets its SIGTERM when hold returns, so it outlives the app's last requests
and calls; a native one gets it only after the app has exited, and then ends at once. hold
never returns later than the app hook's deadline plus --app-drain, within the grace period:
give it prestop's --grace-period, --app-drain and --deadline. A configuration it cannot use
is logged and the proxy is kept until that bound, without a drain call (exit 2).

The last log line is {"msg":"hold finished","reason":...}. Exit codes:

`)
	b.WriteString(exitCodeTable(hold.ExitCodes.Lines()))
	b.WriteString(`
Every flag can also be set as MESHDRAIN_<FLAG> (e.g. MESHDRAIN_GRACE_PERIOD=45s); lists are
comma-separated; an explicit flag wins; an unknown MESHDRAIN_* variable is a warning (an
error with --validate). More: docs/hold.md.`)
	return b.String()
}

// holdSetup is hold's configuration as loaded and checked at start.
type holdSetup struct {
	opts holdOptions
	cfg  hold.Config
	// portsFrom says where the app's ports came from.
	portsFrom string
	hookStart
	// bound is how long the fail-safe path keeps the proxy: hold.Bound of whatever parsed.
	bound time.Duration
}

// loadHold parses hold's arguments and environment and checks everything, collecting every
// problem rather than stopping at the first.
func loadHold(args, environ []string) *holdSetup {
	setup := &holdSetup{opts: defaultHoldOptions()}
	o := &setup.opts
	line := parseHookCommandLine("hold", args, environ, &o.help, func(fs *pflag.FlagSet) { holdFlags(fs, o) })
	setup.bound = salvageProxyHold(args, line.lookup)
	if o.help {
		return setup
	}
	sources := line.complete("hold", o.validate, &setup.hookStart)
	if line.parseErr != nil {
		return setup
	}
	if rest := line.flags.Args(); len(rest) > 0 {
		setup.problems = append(setup.problems, usageError("unexpected arguments %q: hold takes flags only", rest))
	}
	setup.check(sources, line.lookup)
	line.flags.VisitAll(func(f *pflag.Flag) {
		if flagsNotFromEnv[f.Name] {
			return
		}
		value, source := f.Value.String(), sources[f.Name]
		if f.Name == "port" && source == sourceDefault {
			value, source = fmt.Sprint(setup.cfg.App.Ports), setup.portsFrom
		}
		setup.cfg.Settings = append(setup.cfg.Settings, drain.Setting{Name: f.Name, Value: value, Source: source})
	})
	return setup
}

// check checks the options and builds the hold's configuration.
func (setup *holdSetup) check(sources map[string]string, lookup func(string) (string, bool)) {
	o := &setup.opts
	add := func(format string, args ...any) { setup.problems = append(setup.problems, usageError(format, args...)) }
	deadline := time.Duration(0)
	if sources["deadline"] != sourceDefault {
		deadline = o.deadline
		if deadline <= 0 {
			add("--deadline %v must be positive and within --grace-period %v", deadline, o.gracePeriod)
		}
	}
	for _, err := range drain.DeadlineProblems(o.gracePeriod, o.appDrain, max(deadline, 0)) {
		add("%v", err)
	}
	if o.prestopWait < 0 {
		add("--prestop-wait must not be negative, got %v", o.prestopWait)
	}
	if o.poll < drain.MinPoll {
		add("--poll %v is below %v: reading the socket table faster costs CPU without seeing the app leave sooner", o.poll, drain.MinPoll)
	}
	if o.connectTimeout <= 0 {
		add("--connect-timeout must be positive, got %v", o.connectTimeout)
	}
	if err := hold.CheckChannel(o.channel); err != nil {
		add("--channel: %v", err)
	}
	if _, err := encoderFor(o.logFormat); err != nil {
		add("%v", err)
	}
	if o.validate && o.logFile != "" {
		if err := checkLogFile(o.logFile); err != nil {
			setup.problems = append(setup.problems, fmt.Errorf("--log-file: %w", err))
		}
	}
	ports, err := setup.appPorts(sources, lookup)
	if err != nil {
		add("%v", err)
	}
	if o.outboundPort < 0 || o.outboundPort > 65535 {
		add("--outbound-port %d: not a port number (0: not watched)", o.outboundPort)
	}
	uid := o.proxyUID
	switch {
	case uid == ownUser:
		uid = os.Getuid()
	case uid < 0:
		add("--proxy-uid %d: not a user id", uid)
	}
	var drainCall drain.Action
	if o.drainURL != "" {
		action, err := drain.NewShutdownURLAction(o.drainURL, false)
		if err != nil {
			add("--drain-url: %v", err)
		} else {
			drainCall = action
		}
	}
	setup.cfg = hold.Config{
		GracePeriod: o.gracePeriod, AppDrain: o.appDrain, Deadline: max(deadline, 0),
		PrestopWait: o.prestopWait, Poll: o.poll,
		App:   hold.App{Ports: ports, OutboundPort: uint16(max(0, min(o.outboundPort, 65535))), ProxyUID: uint32(max(uid, 0))},
		Drain: drainCall, DrainTimeout: o.connectTimeout,
	}
}

// appPorts are --port, or the pod's declared TCP ports from Istio's variable. A variable
// that does not parse is a warning: it is Istio's, and without it the app is only not seen.
func (setup *holdSetup) appPorts(sources map[string]string, lookup func(string) (string, bool)) ([]uint16, error) {
	o := &setup.opts
	if sources["port"] != sourceDefault {
		setup.portsFrom = sources["port"]
		var ports []uint16
		for _, p := range o.ports {
			if p < 1 || p > 65535 {
				return nil, fmt.Errorf("--port %d: not a port number", p)
			}
			ports = append(ports, uint16(p))
		}
		return ports, nil
	}
	raw, ok := lookup(hold.PodPortsVariable)
	if !ok {
		setup.portsFrom = "none: no --port, no " + hold.PodPortsVariable
		return nil, nil
	}
	ports, err := hold.PodPorts(raw)
	if err != nil {
		setup.warnings = append(setup.warnings, fmt.Sprintf("%v: the app's ports are unknown, pass --port", err))
		setup.portsFrom = "none: " + hold.PodPortsVariable + " does not parse"
		return nil, nil
	}
	setup.portsFrom = "env " + hold.PodPortsVariable
	return ports, nil
}

// salvageProxyHold is the fail-safe bound from whatever can be read of --grace-period,
// --app-drain and --deadline (flag or variable), each on its own.
func salvageProxyHold(args []string, lookup func(string) (string, bool)) time.Duration {
	read := func(flag string, def time.Duration) time.Duration {
		raw, ok := lastFlagValue(args, flag)
		if !ok {
			raw, ok = lookup(envName(flag))
		}
		if !ok {
			return def
		}
		v, err := parseSecondsOrDuration(raw)
		if err != nil || v < 0 {
			return def
		}
		return v
	}
	return hold.Bound(read("grace-period", drain.DefaultGracePeriod), read("app-drain", drain.DefaultAppDrain), read("deadline", 0))
}

func (setup *holdSetup) output() hookOutput { return setup.opts.hookOutput }

// run is the hold, or its fail-safe path on a start problem.
func (setup *holdSetup) run(ctx context.Context, s streams, start time.Time) error {
	o := setup.opts
	logger, closeLog, logFileErr := o.logger("hold", s, setup.warnings)
	defer closeLog()
	if len(setup.problems) > 0 {
		res := hold.FailSafe(ctx, hold.FailSafeConfig{Problems: setup.problems, Hold: setup.bound, Start: start, Logger: logger})
		return hookExit(res.ExitCode())
	}
	cfg := setup.cfg
	cfg.Degraded = degradedLog(logger, "hold", logFileErr)
	channel, err := hold.Listen(o.channel)
	if err != nil {
		cfg.ChannelErr = fmt.Errorf("--channel %s: %w", o.channel, err)
	} else {
		defer channel.Close()
		cfg.Channel = channel
	}
	cfg.App.Table = sockets.NewReader()
	cfg.Clock = clock.Real{}
	cfg.Logger = logger
	cfg.Start = start
	return hookExit(hold.Run(ctx, cfg).ExitCode())
}

// validation is what hold --validate prints.
func (setup *holdSetup) validation() hookValidation {
	return hookValidation{hook: "hold", start: setup.hookStart, settings: setup.cfg.Settings, plan: setup.plan,
		failSafe: fmt.Sprintf("keep the proxy for %v without a drain call", setup.bound)}
}

// plan is what a hold would do, as --validate prints it.
func (setup *holdSetup) plan() []string {
	cfg, o := setup.cfg, setup.opts
	app := fmt.Sprintf("app       not seen (%s): the proxy is kept --app-drain %v after the app was told to stop", setup.portsFrom, cfg.AppDrain)
	if len(cfg.App.Ports) > 0 {
		app = fmt.Sprintf("app       ports %v (%s), outbound port %d, proxy uid %d", cfg.App.Ports, setup.portsFrom, cfg.App.OutboundPort, cfg.App.ProxyUID)
	}
	drainCall := "none (the proxy drains at its own SIGTERM)"
	if cfg.Drain != nil {
		drainCall = cfg.Drain.String()
	}
	hookDeadline := drain.HookDeadline(cfg.GracePeriod, cfg.AppDrain, cfg.Deadline)
	return []string{
		fmt.Sprintf("channel   %s (prestop reports there; none within %v: taken as absent)", o.channel, cfg.PrestopWait),
		app,
		fmt.Sprintf("timing    hook deadline %v; returns by %v (grace period %v, app drain %v)", hookDeadline, hold.Bound(cfg.GracePeriod, cfg.AppDrain, cfg.Deadline), cfg.GracePeriod, cfg.AppDrain),
		"drain     " + drainCall,
	}
}
