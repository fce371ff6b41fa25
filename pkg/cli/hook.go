package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/meshdrain/meshdrain/pkg/hook/drain"
	"github.com/meshdrain/meshdrain/pkg/hook/exitcode"
)

// The two hooks, prestop (the app container's) and hold (the proxy container's), start,
// check, report and end the same way: this file is that way, and each hook's file holds
// only what is its own (its flags, its checks, what it runs).

// hookOutput are the options every hook has beside its own: how it logs, and whether it is
// only asked for its help or to check its configuration.
type hookOutput struct {
	logFormat string
	logFile   string
	verbose   bool
	validate  bool
	help      bool
}

// hookOutputHelp words hookOutput's flags for one hook: where its --log-file goes in a pod,
// what --verbose adds, what --validate checks.
type hookOutputHelp struct {
	logs, verbose, validate string
}

// register registers hookOutput's flags but --help (parseHookCommandLine adds it).
func (o *hookOutput) register(f *pflag.FlagSet, help hookOutputHelp) {
	f.StringVar(&o.logFormat, "log-format", o.logFormat, "json or console")
	f.StringVar(&o.logFile, "log-file", "", "write logs here instead of stderr (/proc/1/fd/1: "+help.logs+"); errors and the final line still go to stderr")
	f.BoolVarP(&o.verbose, "verbose", "v", false, help.verbose)
	f.BoolVar(&o.validate, "validate", false, help.validate)
}

// hookStart is what every hook's setup collects at start, whatever the hook.
type hookStart struct {
	// warnings are logged at start; problems send the hook down the fail-safe path.
	warnings []string
	problems []error
}

// hookSetup is a hook's configuration as loaded and checked at start (prestopSetup,
// holdSetup), as runHookCommand runs it.
type hookSetup interface {
	output() hookOutput
	// validation is what --validate prints of the configuration.
	validation() hookValidation
	// run is the hook itself, from its start time.
	run(ctx context.Context, s streams, start time.Time) error
}

// newHookCommand finishes a hook's command. A hook parses its own flags (load): a bad flag
// must go through its fail-safe path (log, keep what it protects, exit 2), not end the hook
// at once and let the app stop, or the proxy drain, under live traffic. Its flags are
// registered on the command for the help and completion only.
func newHookCommand(s streams, cmd *cobra.Command, register func(*pflag.FlagSet), load func(ctx context.Context, args, environ []string) hookSetup) *cobra.Command {
	cmd.DisableFlagParsing = true
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		start := time.Now()
		return runHookCommand(cmd.Context(), s, cmd, load(cmd.Context(), args, os.Environ()), start)
	}
	register(cmd.Flags())
	return cmd
}

// runHookCommand is a hook from its raw arguments: its configuration loaded and checked,
// then its help, the report of --validate, or the hook run (the fail-safe path on a start
// problem).
func runHookCommand(ctx context.Context, s streams, cmd *cobra.Command, setup hookSetup, start time.Time) error {
	defer surviveClosedPipes()()
	switch out := setup.output(); {
	case out.help:
		cmd.SetArgs(nil)
		return cmd.Help()
	case out.validate:
		return setup.validation().report(s)
	}
	return setup.run(ctx, s, start)
}

// hookCommandLine is a hook's arguments and environment, parsed into its options.
type hookCommandLine struct {
	flags    *pflag.FlagSet
	env      map[string]string
	parseErr error
}

// parseHookCommandLine parses a hook's arguments into the options that register binds, with
// --help into help. A parse error is kept: a hook reports it with every other problem.
func parseHookCommandLine(hook string, args, environ []string, help *bool, register func(*pflag.FlagSet)) *hookCommandLine {
	fs := pflag.NewFlagSet(hook, pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.SortFlags = false
	register(fs)
	fs.BoolVarP(help, "help", "h", false, "help for "+hook)
	return &hookCommandLine{flags: fs, env: envMap(environ), parseErr: fs.Parse(args)}
}

// lookup is the environment's variable name.
func (c *hookCommandLine) lookup(name string) (string, bool) {
	v, ok := c.env[name]
	return v, ok
}

// complete fills in the flags not given from the environment into start's problems and
// warnings (hookSettings), and says where each flag's value came from.
func (c *hookCommandLine) complete(hook string, validate bool, start *hookStart) (sources map[string]string) {
	sources, problems, warnings := hookSettings(hook, c.flags, c.parseErr, c.env, c.lookup, validate)
	start.problems, start.warnings = append(start.problems, problems...), append(start.warnings, warnings...)
	return sources
}

// hookValidation is what --validate found: the start's warnings and problems, and once there
// are none, the lines saying what the hook would do.
type hookValidation struct {
	hook  string
	start hookStart
	// failSafe says what the hook would do with the problems ("hold the app for 5s").
	failSafe string
	// plan says, once there are no problems, what the hook would do, one line each;
	// settings are where each non-default setting came from.
	plan     func() []string
	settings []drain.Setting
}

// report prints what --validate found and exits 0 or 2 at once.
func (v hookValidation) report(s streams) error {
	for _, w := range v.start.warnings {
		fmt.Fprintf(s.err, "meshdrain: warning: %s\n", w)
	}
	if len(v.start.problems) > 0 {
		for _, p := range v.start.problems {
			fmt.Fprintf(s.err, "meshdrain: %v\n", p)
		}
		fmt.Fprintf(s.err, "meshdrain: %s configuration: %d problem(s); as a hook it would %s and exit 2\n", v.hook, len(v.start.problems), v.failSafe)
		return &ExitError{Code: ExitUsage}
	}
	fmt.Fprintf(s.out, "%s configuration ok\n", v.hook)
	for _, line := range v.plan() {
		fmt.Fprintf(s.out, "  %s\n", line)
	}
	for _, setting := range v.settings {
		if setting.Source != sourceDefault {
			fmt.Fprintf(s.out, "  %-28s = %-20s (%s)\n", "--"+setting.Name, setting.Value, setting.Source)
		}
	}
	return nil
}

// logger is a hook's logger as its options say (newHookLogger); the error is a --log-file
// it cannot use, for the hook to say once it runs (degradedLog).
func (o hookOutput) logger(hook string, s streams, warnings []string) (*zap.Logger, func(), error) {
	return newHookLogger(hook, o.logFormat, o.logFile, s.err, o.verbose, warnings)
}

// degradedLog says that --log-file could not be used, if so, and returns that as the run's
// degradation: the hook goes on logging to stderr, and exits 2 at the end.
func degradedLog(logger *zap.Logger, goesOn string, logFileErr error) error {
	if logFileErr != nil {
		logger.Error("--log-file cannot be used: logging to stderr instead; the "+goesOn+" goes on and exits 2 at the end",
			zap.String("error", logFileErr.Error()))
	}
	return logFileErr
}

// hookExit is a hook's end: its final event has said why, so nothing more is printed.
func hookExit(code int) error {
	if code != exitcode.OK {
		return &ExitError{Code: code}
	}
	return nil
}

// exitCodeTable is a hook's exit-code contract as its --help prints it.
func exitCodeTable(lines []exitcode.Line) string {
	var b strings.Builder
	for _, l := range lines {
		b.WriteString(wrapRow(fmt.Sprintf("  %-4d %-18s ", l.Code, l.Label), l.When))
	}
	return b.String()
}

// wrapRow prints a table row whose text wraps under itself.
func wrapRow(head, text string) string {
	const width = 95
	indent := strings.Repeat(" ", len(head))
	var b strings.Builder
	line := head
	for _, word := range strings.Fields(text) {
		if len(line)+len(word) > width && len(line) > len(head) {
			b.WriteString(strings.TrimRight(line, " ") + "\n")
			line = indent
		}
		line += word + " "
	}
	b.WriteString(strings.TrimRight(line, " ") + "\n")
	return b.String()
}

// surviveClosedPipes keeps a hook going when its stdout or stderr is closed (the pipe of
// whoever started it went away): with SIGPIPE notified, such writes fail with EPIPE instead
// of killing the process, and the logger ignores them. It returns the undo.
func surviveClosedPipes() (stop func()) {
	sigpipe := make(chan os.Signal, 1)
	signal.Notify(sigpipe, syscall.SIGPIPE)
	return func() { signal.Stop(sigpipe) }
}

// newHookLogger is a hook's logger (prestop's, hold's): its format and file, debug with
// verbose, every event tagged with the hook's component, and the settings' warnings logged
// first.
func newHookLogger(component, format, file string, stderr io.Writer, verbose bool, warnings []string) (*zap.Logger, func(), error) {
	level := zapcore.InfoLevel
	if verbose {
		level = zapcore.DebugLevel
	}
	logger, closeLog, fileErr := newPrestopLogger(format, file, stderr, level)
	logger = logger.With(zap.String("component", component))
	for _, w := range warnings {
		logger.Warn(w)
	}
	return logger, closeLog, fileErr
}
