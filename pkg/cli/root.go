// Package cli is meshdrain's command layer: it parses flags and environment, builds the
// options of the packages under pkg/, runs them and turns their outcome into an exit code.
// It holds no drain logic of its own.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/meshdrain/meshdrain/pkg/hook/exitcode"
)

// Exit codes shared by every command. A command that needs a specific code returns an
// *ExitError; the hooks' own codes are their contract's (package exitcode), whose usage
// and signal codes every command shares.
const (
	ExitOK       = exitcode.OK
	ExitFailure  = 1
	ExitUsage    = exitcode.ConfigError
	ExitSignaled = exitcode.Interrupted
)

// ExitError carries the exit code a command wants, with an optional message to print.
// A nil Err means the command has already reported what happened.
type ExitError struct {
	Code int
	Err  error
}

func (e *ExitError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("exit code %d", e.Code)
	}
	return e.Err.Error()
}

func (e *ExitError) Unwrap() error { return e.Err }

// usageError marks a bad flag or argument: exit code 2.
func usageError(format string, args ...any) error {
	return &ExitError{Code: ExitUsage, Err: fmt.Errorf(format, args...)}
}

// UsageError is usageError for the other command trees (meshdrain-sim).
func UsageError(format string, args ...any) error { return usageError(format, args...) }

// streams are the process's standard streams, injected so commands are testable.
type streams struct {
	in       io.Reader
	out, err io.Writer
}

// Main runs meshdrain with args and returns the process exit code. It is the only place that
// decides an exit code; main only calls os.Exit with it.
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	return Execute(NewRootCommand(streams{in: stdin, out: stdout, err: stderr}), args, stderr)
}

// Execute runs a command tree with args, prints its error once and returns the exit code:
// an *ExitError's, 2 for cobra's usage errors, 1 for any other. meshdrain-sim runs its own
// tree through it, so both binaries end the same way.
func Execute(root *cobra.Command, args []string, stderr io.Writer) int {
	// SIGHUP too: a hook run from a terminal that goes away must still say why it ended.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()

	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return ExitOK
	}
	name := root.Name()
	var exitErr *ExitError
	if errors.As(err, &exitErr) {
		if exitErr.Err != nil {
			printError(stderr, name, exitErr.Err)
		}
		return exitErr.Code
	}
	printError(stderr, name, err)
	// Cobra reports unknown flags, commands and argument counts as plain errors.
	if isCobraUsageError(err) {
		return ExitUsage
	}
	return ExitFailure
}

// printError prints err once, each of its lines as a message of its own: an error that joins
// several problems (errors.Join) is several lines, and a line without the program's name
// would read as part of the one before.
func printError(stderr io.Writer, name string, err error) {
	for _, line := range strings.Split(err.Error(), "\n") {
		fmt.Fprintf(stderr, "%s: %s\n", name, line)
	}
}

func isCobraUsageError(err error) bool {
	msg := err.Error()
	for _, prefix := range []string{"unknown flag", "unknown shorthand flag", "unknown command", "invalid argument", "flag needs an argument", "accepts ", "requires at least", "requires at most", "bad flag syntax", "if any flags in the group"} {
		if strings.HasPrefix(msg, prefix) {
			return true
		}
	}
	return false
}

// NewRootCommand builds the meshdrain command tree: what runs in a pod and what operators
// run. The test world (simulate, emulate) is meshdrain-sim's, so none of it is linked here.
func NewRootCommand(s streams) *cobra.Command {
	root := NewRoot(s.in, s.out, s.err, &cobra.Command{
		Use:   "meshdrain",
		Short: "Let an app stop only once its sidecar has stopped receiving new requests",
		Long: `meshdrain replaces the guessed "preStop: sleep N" of pods by a measurement: in pods with a
service-mesh sidecar (Istio or any Envoy, Linkerd) it watches the sidecar's inbound request
counters through its admin API; in pods without one (--mesh none) it watches the pod's own
socket table and TCP counters. It lets the app stop as soon as the clients have stopped
sending, never later than a deadline derived from terminationGracePeriodSeconds.`,
		Example: `  # As the app container's preStop hook (logs to kubectl logs):
  meshdrain prestop --grace-period=52s --app-drain=5s --log-file=/proc/1/fd/1

  # As the istio-proxy container's preStop: keep the proxy until that prestop has decided:
  meshdrain hold --grace-period=52s --app-drain=5s --log-file=/proc/1/fd/1

  # What should the grace period and the hook's flags be? Into your own Deployment (the mesh
  # is read from it; give --mesh istio, linkerd, none or ambient where it names none):
  meshdrain plan --mesh none --p99 450ms --eds-lag 5s --app-drain 5s -f deploy.yaml -o yaml

  # See the difference on this machine (none / sleep / meshdrain): meshdrain-sim simulate`,
	})
	root.AddCommand(
		newVersionCommand(s),
		newPrestopCommand(s),
		newHoldCommand(s),
		newInstallCommand(s),
		newPlanCommand(s),
		newCompletionCommand(s),
		newStatusCommand(s),
		newCheckCommand(s),
	)
	RegisterEnumCompletions(root, enumFlags())
	return root
}

// NewRoot finishes a root command the way both binaries want it: errors printed once by
// Execute, no usage dump on an error, a bad flag exits 2.
func NewRoot(in io.Reader, out, errOut io.Writer, root *cobra.Command) *cobra.Command {
	root.SilenceUsage = true
	root.SilenceErrors = true
	root.SetIn(in)
	root.SetOut(out)
	root.SetErr(errOut)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		return &ExitError{Code: ExitUsage, Err: err}
	})
	return root
}

// bindEnv lets every flag of cmd be set from MESHDRAIN_<FLAG> (dashes become underscores),
// because a preStop hook is often easier to configure through the pod's env than its command.
// An explicit flag wins over the environment.
func bindEnv(cmd *cobra.Command, lookup func(string) (string, bool)) error {
	if _, errs := applyEnv(cmd.Flags(), lookup, nil); len(errs) > 0 {
		return errs[0]
	}
	return nil
}

// Where a flag's value came from, as reported in prestop's "drain started" event.
const (
	sourceFlag    = "flag"
	sourceDefault = "default"
)

// envName is the variable that sets a flag: MESHDRAIN_GRACE_PERIOD for --grace-period.
func envName(flag string) string {
	return "MESHDRAIN_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// applyEnv sets every flag of fs not given on the command line from its MESHDRAIN_ variable,
// skipping the flags in skip, and reports where each value came from: "flag", "env NAME" or
// "default". It returns every bad value, not only the first.
func applyEnv(fs *pflag.FlagSet, lookup func(string) (string, bool), skip map[string]bool) (map[string]string, []error) {
	sources := map[string]string{}
	var errs []error
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Changed {
			sources[f.Name] = sourceFlag
			return
		}
		sources[f.Name] = sourceDefault
		if skip[f.Name] {
			return
		}
		name := envName(f.Name)
		value, ok := lookup(name)
		if !ok {
			return
		}
		var err error
		// Repeatable flags take a comma-separated list from the environment.
		if sv, isSlice := f.Value.(pflag.SliceValue); isSlice {
			err = sv.Replace(splitList(value))
		} else {
			err = f.Value.Set(value)
		}
		if err != nil {
			errs = append(errs, usageError("invalid %s=%q: %v", name, value, err))
			return
		}
		sources[f.Name] = "env " + name
	})
	return sources, errs
}

func splitList(value string) []string {
	var out []string
	for _, part := range strings.Split(value, ",") {
		if part = strings.TrimSpace(part); part != "" {
			out = append(out, part)
		}
	}
	return out
}
