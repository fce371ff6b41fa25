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
)

// Exit codes shared by every command. A command that needs a specific code returns an
// *ExitError.
const (
	ExitOK       = 0
	ExitFailure  = 1
	ExitUsage    = 2
	ExitDeadline = 3
	ExitNoSignal = 4
	ExitSignaled = 130
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

// streams are the process's standard streams, injected so commands are testable.
type streams struct {
	in       io.Reader
	out, err io.Writer
}

// Main runs meshdrain with args and returns the process exit code. It is the only place that
// decides an exit code; main only calls os.Exit with it.
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	root := NewRootCommand(streams{in: stdin, out: stdout, err: stderr})
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return ExitOK
	}
	var exitErr *ExitError
	if errors.As(err, &exitErr) {
		if exitErr.Err != nil {
			fmt.Fprintf(stderr, "meshdrain: %v\n", exitErr.Err)
		}
		return exitErr.Code
	}
	fmt.Fprintf(stderr, "meshdrain: %v\n", err)
	// Cobra reports unknown flags, commands and argument counts as plain errors.
	if isCobraUsageError(err) {
		return ExitUsage
	}
	return ExitFailure
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

// NewRootCommand builds the meshdrain command tree.
func NewRootCommand(s streams) *cobra.Command {
	root := &cobra.Command{
		Use:   "meshdrain",
		Short: "Let an app stop only once its Envoy sidecar has stopped receiving new requests",
		Long: `meshdrain replaces the guessed "preStop: sleep N" of pods with an Envoy sidecar
(Istio first) by a measurement: it watches the sidecar's inbound request counters through
Envoy's admin API, drains the inbound listeners, and lets the app stop as soon as the clients
have stopped sending, never later than a deadline derived from terminationGracePeriodSeconds.`,
		Example: `  # See the difference on this machine: none / sleep 5s / sleep 15s / meshdrain
  meshdrain simulate

  # As the app container's preStop hook (logs to kubectl logs):
  meshdrain prestop --grace-period=30s --app-drain=5s --log-file=/proc/1/fd/1

  # What should the grace period and the sidecar's drain settings be? Into your own Deployment:
  meshdrain plan --p99 450ms --eds-lag p50=1.5s,p99=12s --clients 50 --app-drain 5s -f deploy.yaml -o yaml`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetIn(s.in)
	root.SetOut(s.out)
	root.SetErr(s.err)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		return &ExitError{Code: ExitUsage, Err: err}
	})
	root.AddCommand(
		newVersionCommand(s),
		newPrestopCommand(s),
		newInstallCommand(s),
		newPlanCommand(s),
		newCompletionCommand(s),
		newSimulateCommand(s),
		newEmulateCommand(s),
		newStatusCommand(s),
		newCheckCommand(s),
	)
	registerEnumCompletions(root)
	return root
}

// bindEnv lets every flag of cmd be set from MESHDRAIN_<FLAG> (dashes become underscores),
// because a preStop hook is often easier to configure through the pod's env than its command.
// An explicit flag wins over the environment.
func bindEnv(cmd *cobra.Command, lookup func(string) (string, bool)) error {
	var firstErr error
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if firstErr != nil || f.Changed {
			return
		}
		name := "MESHDRAIN_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		value, ok := lookup(name)
		if !ok {
			return
		}
		// Repeatable flags take a comma-separated list from the environment.
		if sv, isSlice := f.Value.(pflag.SliceValue); isSlice {
			if err := sv.Replace(splitList(value)); err != nil {
				firstErr = usageError("invalid %s=%q: %v", name, value, err)
			}
			return
		}
		if err := f.Value.Set(value); err != nil {
			firstErr = usageError("invalid %s=%q: %v", name, value, err)
		}
	})
	return firstErr
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
