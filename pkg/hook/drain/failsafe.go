package drain

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/meshdrain/meshdrain/pkg/clock"
	"github.com/meshdrain/meshdrain/pkg/mesh"
)

// FailSafeConfig is what FailSafe needs: what went wrong, and how long to hold the app.
type FailSafeConfig struct {
	// Problems are every start error found (a bad flag or variable, a failed check).
	Problems []error
	// Hold is how long to keep the app from stopping: the fallback wait (or --min-wait if
	// longer), capped by the grace period. Computed by the caller from whatever parsed.
	Hold   time.Duration
	Start  time.Time
	Clock  clock.Clock
	Logger *zap.Logger
}

// WaitOutProblems is what every hook's fail-safe exit does before its final line (prestop's
// FailSafe, and hold's): it logs each problem, says what it holds with holding, and waits
// until cfg.Hold after the start, unless ctx ends first. It returns cfg with its defaults
// filled in, the start the wait counted from, the problems' messages and whether ctx ended
// the wait.
func WaitOutProblems(ctx context.Context, cfg FailSafeConfig, holding string) (_ FailSafeConfig, start time.Time, messages []string, interrupted bool) {
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	start = cfg.Clock.Now()
	if !cfg.Start.IsZero() && cfg.Start.Before(start) {
		start = cfg.Start
	}
	messages = make([]string, 0, len(cfg.Problems))
	for _, p := range cfg.Problems {
		cfg.Logger.Error("configuration error", zap.String("error", p.Error()))
		messages = append(messages, p.Error())
	}
	hold := cfg.Hold - cfg.Clock.Now().Sub(start)
	cfg.Logger.Error(holding, zap.Int64("hold_ms", max(hold, 0).Milliseconds()), zap.Int("problems", len(cfg.Problems)))
	if hold > 0 {
		timer := cfg.Clock.NewTimer(hold)
		select {
		case <-timer.C():
		case <-ctx.Done():
			interrupted = true
		}
		timer.Stop()
	}
	return cfg, start, messages, interrupted
}

// FailSafe is prestop when its configuration cannot be used. Exiting at once would let the
// kubelet stop the app immediately, the 503s meshdrain exists to remove, and a mistake that
// shows only at rollout must not cause that: so it logs every problem, holds the app for the
// fallback wait as a guessed preStop sleep would, and ends with exit 2 (the kubelet then
// records a FailedPreStopHook event with the final line). SIGINT/SIGTERM/SIGHUP (ctx) end the
// hold early; the exit code stays 2, the more important fact.
func FailSafe(ctx context.Context, cfg FailSafeConfig) Result {
	cfg, start, messages, interrupted := WaitOutProblems(ctx, cfg, "configuration cannot be used: holding the app for the fallback wait instead of draining")
	res := Result{Reason: ReasonConfigError, Elapsed: cfg.Clock.Now().Sub(start), Signal: mesh.SignalNone, Naming: mesh.NamingUnknown}
	cfg.Logger.Error("drain finished",
		zap.String("reason", string(res.Reason)),
		zap.Int64("elapsed_ms", res.Elapsed.Milliseconds()),
		zap.String("signal", string(res.Signal)),
		zap.String("naming", string(res.Naming)),
		optionalField("requests_after_drain", nil),
		optionalField("active_at_end", nil),
		zap.Int("polls", 0),
		zap.Int("admin_errors", 0),
		zap.Bool("drain_called", false),
		zap.Bool("actions_run", false),
		zap.Int64("hold_ms", max(cfg.Hold, 0).Milliseconds()),
		zap.Bool("interrupted", interrupted),
		zap.Strings("errors", messages),
		PeakRSSField(),
		zap.Int("exit_code", res.ExitCode()))
	return res
}
