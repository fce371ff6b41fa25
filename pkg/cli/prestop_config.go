package cli

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/meshdrain/meshdrain/pkg/hook/drain"
	"github.com/meshdrain/meshdrain/pkg/hook/hold"
	"github.com/meshdrain/meshdrain/pkg/hook/risk"
	"github.com/meshdrain/meshdrain/pkg/mesh"
	"github.com/meshdrain/meshdrain/pkg/mesh/backends"
)

// prestopSetup is prestop's configuration as loaded and checked at start.
type prestopSetup struct {
	opts prestopOptions
	cfg  drain.Config
	// sidecar is what the drain reads; nil with --mesh auto, which detects it at start
	// among candidates. adminURL is the admin URL to show (credentials redacted).
	sidecar    drain.Sidecar
	adminURL   string
	candidates []string
	// drainModeSet: --drain-mode was given (flag or variable), worth a warning for Linkerd.
	drainModeSet bool
	hookStart
	// hold is how long the fail-safe path holds the app: from whatever parsed.
	hold time.Duration
}

// flagsNotFromEnv are flags no MESHDRAIN_* variable sets: a variable in a pod spec must not
// turn the hook into a help page or a dry check.
var flagsNotFromEnv = map[string]bool{"help": true, "validate": true}

// loadPrestop parses prestop's arguments and environment and checks everything that can be
// checked at start, collecting every problem rather than stopping at the first. `meshdrain
// check` can call it to verify a hook's configuration (CheckPrestopConfig).
func loadPrestop(ctx context.Context, args, environ []string) *prestopSetup {
	return loadPrestopFrom(ctx, defaultPrestopOptions(), args, environ)
}

// loadPrestopFrom is loadPrestop starting from the options from (prestopOffline's).
func loadPrestopFrom(ctx context.Context, from prestopOptions, args, environ []string) *prestopSetup {
	setup := &prestopSetup{opts: from}
	o := &setup.opts
	line := parseHookCommandLine("prestop", args, environ, &o.help, func(fs *pflag.FlagSet) { prestopFlags(fs, o) })
	fs, lookup, parseErr := line.flags, line.lookup, line.parseErr
	setup.hold = salvageHold(args, lookup)
	if parseErr != nil {
		// The parser stops at the bad flag: a --validate after it must still answer at once
		// rather than hold the app as a hook would.
		o.validate = validateGiven(args)
	}
	if o.help {
		return setup
	}
	sources := line.complete("prestop", o.validate, &setup.hookStart)
	if parseErr != nil {
		// The options are only partly parsed: checking them would report the wrong things.
		return setup
	}
	o.deadlineSet = sources["deadline"] != sourceDefault
	o.minWaitSet = sources["min-wait"] != sourceDefault
	o.appRequestsSet = sources["app-requests"] != sourceDefault
	if o.lagDist != "" && !o.minWaitSet {
		// The figure guards the early stop that --min-wait's guess guards without one; a
		// --min-wait that was asked for still holds as a floor.
		o.minWait = 0
	}
	if o.lagDist == "" && sources["risk"] != sourceDefault {
		setup.warnings = append(setup.warnings, "--risk is used only with --lag-dist: without a lag distribution the hook has no figure to hold to it")
	}

	if rest := fs.Args(); len(rest) > 0 {
		if o.exec == "" {
			setup.problems = append(setup.problems, usageError("unexpected arguments %q: arguments after -- belong to --exec", rest))
		} else {
			o.execArgs = rest
		}
	}
	cfg, problems := o.check(ctx)
	setup.problems = append(setup.problems, problems...)
	setup.drainModeSet = sources["drain-mode"] != sourceDefault
	setup.openBackend(ctx, &cfg, lookup)
	if o.validate && o.logFile != "" {
		if err := checkLogFile(o.logFile); err != nil {
			setup.problems = append(setup.problems, fmt.Errorf("--log-file: %w", err))
		}
	}
	fs.VisitAll(func(f *pflag.Flag) {
		if flagsNotFromEnv[f.Name] {
			return
		}
		value := f.Value.String()
		switch {
		case f.Name == "admin" && value == "" && o.mesh == mesh.None:
			value = "none (--mesh none: no sidecar)"
		case f.Name == "admin" && value == "":
			value = strings.Join(setup.adminURLs(), ",")
		case f.Name == "drain-mode" && o.mesh == mesh.Linkerd && value != string(mesh.DrainNone):
			value += " (not used: a Linkerd proxy gets no drain call)"
		case f.Name == "min-wait" && o.lagDist != "" && !o.minWaitSet:
			value += " (the default with --lag-dist: the risk figure guards instead)"
		case f.Name == "risk" && o.lagDist == "":
			value += " (not used: no --lag-dist)"
		}
		cfg.Settings = append(cfg.Settings, drain.Setting{Name: f.Name, Value: redactedValue(f.Name, value), Source: sources[f.Name]})
	})
	setup.cfg = cfg
	return setup
}

// adminURLs are the admin URLs the drain will read: --admin, or the mesh's default; with
// --mesh auto and no --admin, the candidates in the order detection asks them.
func (setup *prestopSetup) adminURLs() []string {
	if setup.opts.admin == "" && setup.opts.mesh != mesh.Auto {
		return []string{backends.DefaultAdminURL(setup.opts.mesh)}
	}
	return backends.Candidates(setup.opts.admin)
}

// CheckPrestopConfig checks a prestop configuration (its arguments and environment) as the
// hook would at start, without running it: what `prestop --validate` prints, for `meshdrain
// check` to reuse. Unknown MESHDRAIN_* variables are problems here.
func CheckPrestopConfig(ctx context.Context, args, environ []string) (warnings []string, problems []error) {
	setup := loadPrestop(ctx, append(append([]string(nil), args...), "--validate"), environ)
	return setup.warnings, setup.problems
}

// hookSettings is how a hook (prestop, hold) completes its flags once parsed: a parse error is
// a problem, MESHDRAIN_<FLAG> variables fill in the flags not given (a bad value is a problem),
// and an unknown MESHDRAIN_* variable is a warning, a problem with --validate. Every problem
// is collected, none stops the others. sources says where each flag's value came from.
func hookSettings(hook string, fs *pflag.FlagSet, parseErr error, env map[string]string, lookup func(string) (string, bool), validate bool) (sources map[string]string, problems []error, warnings []string) {
	if parseErr != nil {
		problems = append(problems, usageError("%v", parseErr))
	}
	sources, envErrs := applyEnv(fs, lookup, flagsNotFromEnv)
	problems = append(problems, envErrs...)
	for _, name := range unknownEnv(fs, env) {
		msg := fmt.Sprintf("%s is not a %s setting (misspelt?); the variables are MESHDRAIN_<FLAG>, e.g. MESHDRAIN_GRACE_PERIOD", name, hook)
		if validate {
			problems = append(problems, errors.New(msg))
		} else {
			warnings = append(warnings, msg)
		}
	}
	return sources, problems, warnings
}

func envMap(environ []string) map[string]string {
	env := map[string]string{}
	for _, kv := range environ {
		if name, value, ok := strings.Cut(kv, "="); ok {
			env[name] = value
		}
	}
	return env
}

// unknownEnv lists the MESHDRAIN_* variables that set none of fs's flags.
func unknownEnv(fs *pflag.FlagSet, env map[string]string) []string {
	known := map[string]bool{}
	fs.VisitAll(func(f *pflag.Flag) {
		if !flagsNotFromEnv[f.Name] {
			known[envName(f.Name)] = true
		}
	})
	var unknown []string
	for name := range env {
		if strings.HasPrefix(name, "MESHDRAIN_") && !known[name] {
			unknown = append(unknown, name)
		}
	}
	sort.Strings(unknown)
	return unknown
}

// isRate says whether r is a request rate a flag may give: 0 (unknown) or more, finite.
func isRate(r float64) bool { return r >= 0 && !math.IsInf(r, 0) }

// check checks the options and builds the drain configuration, returning every problem.
func (o *prestopOptions) check(ctx context.Context) (drain.Config, []error) {
	var problems []error
	add := func(format string, args ...any) { problems = append(problems, usageError(format, args...)) }

	mode, err := mesh.ParseDrainMode(o.drainMode)
	if err != nil {
		add("--drain-mode: %v", err)
	}
	if _, err := encoderFor(o.logFormat); err != nil {
		add("%v", err)
	}
	deadline, timingProblems := o.timing()
	problems = append(problems, timingProblems...)
	if !isRate(o.rpsPerClient) {
		add("--rps-per-client must be a rate of 0 or more requests a second, got %v", o.rpsPerClient)
	}
	if o.edsLagBound < 0 {
		add("--eds-lag-bound must not be negative, got %v", o.edsLagBound)
	}
	lag, err := parseLagDist(o.lagDist)
	if err != nil {
		add("--lag-dist %q: %v", o.lagDist, err)
	}
	if err := risk.CheckLevel(o.risk); err != nil {
		add("--risk %v", err)
	}
	if o.drainAt != drainAtStart && o.drainAt != drainAtEnd {
		add("--drain-at %q: want %s or %s", o.drainAt, drainAtStart, drainAtEnd)
	}
	if o.holdChannel != "" {
		if err := hold.CheckChannel(o.holdChannel); err != nil {
			add("--hold-channel: %v", err)
		}
	}
	if o.clientEvidence != clientEvidenceAuto && o.clientEvidence != clientEvidenceOff {
		add("--client-evidence %q: want %s or %s", o.clientEvidence, clientEvidenceAuto, clientEvidenceOff)
	}
	for _, p := range o.listenerPorts {
		if p < 1 || p > 65535 {
			add("--inbound-listener-port %d: not a port number", p)
		}
	}
	// The selector and the flags each mesh refuses are checked where the backend opens.
	sel := mesh.Selector{Ports: o.ports, Clusters: o.clusters, HTTPPrefixes: o.httpPrefixes}
	actions, actionProblems := o.actions(ctx)
	problems = append(problems, actionProblems...)
	return drain.Config{
		Selector:         sel,
		DrainMode:        mode,
		Deadline:         deadline,
		Quiet:            o.quiet,
		LatencyAllowance: o.latencyAllowance,
		// The default minimum wait is cut to a short deadline (runPrestop warns); one that was
		// asked for is checked above.
		MinWait:        min(o.minWait, max(deadline, 0)),
		StreamsWait:    o.streamsWaitOrStrict(),
		ClientPeriod:   o.clientPeriod,
		RPSPerClient:   o.rpsPerClient,
		LagBound:       o.edsLagBound,
		Lag:            lag,
		Risk:           o.risk,
		SettledQuiet:   o.settledQuiet,
		DrainAtEnd:     o.drainAt == drainAtEnd,
		Mesh:           string(o.mesh),
		Poll:           o.poll,
		ConnectTimeout: o.connectTimeout,
		FallbackWait:   o.fallbackWait,
		DryRun:         o.dryRun,
		Actions:        actions,
		ActionTimeout:  max(o.appDrain, 2*time.Second),
		GracePeriod:    o.gracePeriod,
	}, problems
}

// parseLagDist reads --lag-dist: empty is no distribution, the hook as without the flag.
func parseLagDist(s string) (risk.Distribution, error) {
	if s == "" {
		return risk.Distribution{}, nil
	}
	return risk.Parse(s)
}

// timing checks the durations and how they fit in the grace period, and works out the
// hook's deadline.
func (o *prestopOptions) timing() (deadline time.Duration, problems []error) {
	add := func(format string, args ...any) { problems = append(problems, usageError(format, args...)) }
	if o.connectTimeout <= 0 {
		add("--connect-timeout must be positive, got %v", o.connectTimeout)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"--streams-wait", o.streamsWait}, {"--latency-allowance", o.latencyAllowance}, {"--fallback-wait", o.fallbackWait}} {
		if d.v < 0 {
			add("%s must not be negative, got %v", d.name, d.v)
		}
	}
	explicit := time.Duration(0)
	if o.deadlineSet {
		explicit = o.deadline
		if explicit <= 0 {
			add("--deadline %v must be positive and within --grace-period %v", explicit, o.gracePeriod)
		}
	}
	hookTiming := drain.Timing{GracePeriod: o.gracePeriod, AppDrain: o.appDrain, Deadline: max(explicit, 0), Quiet: o.quiet, Poll: o.poll,
		MinWait: o.minWait, MinWaitSet: o.minWaitSet, ClientPeriod: o.clientPeriod, SettledQuiet: o.settledQuiet}
	for _, err := range hookTiming.Problems() {
		add("%v", err)
	}
	return drain.HookDeadline(o.gracePeriod, o.appDrain, max(explicit, 0)), problems
}

// streamsWaitOrStrict is the drain's StreamsWait: zero keeps the strict rule.
func (o *prestopOptions) streamsWaitOrStrict() time.Duration {
	if o.strictActive {
		return 0
	}
	return o.streamsWait
}

// actions builds the actions, checking at start everything they will need: the signal and
// its process, the shutdown URL, the program.
func (o *prestopOptions) actions(ctx context.Context) ([]drain.Action, []error) {
	var actions []drain.Action
	var problems []error
	add := func(format string, args ...any) { problems = append(problems, usageError(format, args...)) }
	switch {
	case o.signal != "":
		sig, err := drain.ParseSignal(o.signal)
		if err != nil {
			add("--signal: %v", err)
			break
		}
		if (o.pid != 0) == (o.pidFile != "") {
			add("--signal needs exactly one of --pid or --pidfile")
			break
		}
		if o.offline {
			// The process is the pod's: only what the flags say can be checked here.
			if err := drain.CheckSignal(sig); err != nil {
				add("--signal: %v", err)
			}
			break
		}
		action, err := drain.NewSignalAction(ctx, sig, o.pid, o.pidFile)
		if err != nil {
			flag := "--pid"
			if o.pidFile != "" {
				flag = "--pidfile"
			}
			add("--signal %s to %s: %v", o.signal, flag, err)
			break
		}
		actions = append(actions, action)
	case o.pid != 0 || o.pidFile != "":
		add("--pid and --pidfile need --signal")
	}
	if o.shutdownURL != "" {
		action, err := drain.NewShutdownURLAction(o.shutdownURL, o.allowRemote)
		if err != nil {
			add("--shutdown-url: %v", err)
		} else {
			actions = append(actions, action)
		}
	}
	if o.exec != "" && !o.offline { // offline, the program is the pod's, not this machine's
		action, err := drain.NewExecAction(append([]string{o.exec}, o.execArgs...))
		if err != nil {
			add("--exec: %v", err)
		} else {
			actions = append(actions, action)
		}
	}
	return actions, problems
}

// salvageHold is the fail-safe hold computed from whatever can be read of --fallback-wait,
// --min-wait, --grace-period and --deadline (flag or variable), each on its own: a bad
// value elsewhere, even one that stopped the flag parser before these, does not lose them.
// The hold is the fallback wait (or --min-wait if longer), capped by the latest the hook may
// return (drain.HookDeadline), as a working drain is.
func salvageHold(args []string, lookup func(string) (string, bool)) time.Duration {
	d := defaultPrestopOptions()
	read := func(flag string, def time.Duration) (time.Duration, bool) {
		raw, ok := lastFlagValue(args, flag)
		if !ok {
			raw, ok = lookup(envName(flag))
		}
		if !ok {
			return def, false
		}
		v, err := parseSecondsOrDuration(raw)
		if err != nil || v < 0 {
			return def, false
		}
		return v, true
	}
	fallback, _ := read("fallback-wait", d.fallbackWait)
	minWait, _ := read("min-wait", 0)
	grace, _ := read("grace-period", d.gracePeriod)
	appDrain, _ := read("app-drain", d.appDrain)
	deadline, _ := read("deadline", 0)
	limit := min(drain.HookDeadline(grace, appDrain, deadline), grace-drain.KillMargin)
	return max(0, min(max(fallback, minWait), limit))
}

// validateGiven says whether args turn --validate on (the last of --validate and
// --validate=BOOL before any "--"), however far the parser got.
func validateGiven(args []string) bool {
	validate := false
	for _, a := range args {
		if a == "--" {
			break
		}
		if a == "--validate" {
			validate = true
		} else if v, ok := strings.CutPrefix(a, "--validate="); ok {
			if b, err := strconv.ParseBool(v); err == nil {
				validate = b
			}
		}
	}
	return validate
}

// lastFlagValue finds the last value given to --flag in args (as "--flag=v" or "--flag v"),
// before any "--".
func lastFlagValue(args []string, flag string) (string, bool) {
	var value string
	found := false
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			break
		}
		switch {
		case strings.HasPrefix(a, "--"+flag+"="):
			value, found = strings.TrimPrefix(a, "--"+flag+"="), true
		case a == "--"+flag && i+1 < len(args):
			value, found = args[i+1], true
			i++
		}
	}
	return value, found
}
