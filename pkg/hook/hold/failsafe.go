package hold

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/meshdrain/meshdrain/pkg/clock"
	"github.com/meshdrain/meshdrain/pkg/hook/drain"
)

// FailSafeConfig is what FailSafe needs: what went wrong, and how long to keep the proxy.
type FailSafeConfig struct {
	Problems []error
	// Hold is how long to keep the proxy: Bound, from whatever timing parsed.
	Hold   time.Duration
	Start  time.Time
	Clock  clock.Clock
	Logger *zap.Logger
}

// FailSafe is hold when its configuration cannot be used. Returning at once would let a
// classic proxy drain and stop under the app (its SIGTERM follows the hook), the loss this
// hook exists to prevent; so it keeps the proxy until the app hook's deadline plus its drain,
// as the guessed preStop sleep it replaces would, makes no drain call (the proxy then drains
// at its own SIGTERM), and exits 2 so that the kubelet records a FailedPreStopHook event.
// SIGINT/SIGTERM/SIGHUP (ctx) end the wait early; the exit code stays 2.
func FailSafe(ctx context.Context, cfg FailSafeConfig) Result {
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	start := cfg.Clock.Now()
	if !cfg.Start.IsZero() && cfg.Start.Before(start) {
		start = cfg.Start
	}
	messages := make([]string, 0, len(cfg.Problems))
	for _, p := range cfg.Problems {
		cfg.Logger.Error("configuration error", zap.String("error", p.Error()))
		messages = append(messages, p.Error())
	}
	wait := cfg.Hold - cfg.Clock.Now().Sub(start)
	cfg.Logger.Error("configuration cannot be used: keeping the proxy until the hook deadline plus the app's drain, without a drain call",
		zap.Int64("hold_ms", max(wait, 0).Milliseconds()), zap.Int("problems", len(cfg.Problems)))
	interrupted := false
	if wait > 0 {
		timer := cfg.Clock.NewTimer(wait)
		select {
		case <-timer.C():
		case <-ctx.Done():
			interrupted = true
		}
		timer.Stop()
	}
	res := Result{Reason: ReasonConfigError, Elapsed: cfg.Clock.Now().Sub(start), Decided: -1}
	cfg.Logger.Error(FinalMessage,
		zap.String("reason", string(res.Reason)),
		zap.Int64("elapsed_ms", res.Elapsed.Milliseconds()),
		zap.Bool("drain_called", false),
		zap.Int64("hold_ms", max(cfg.Hold, 0).Milliseconds()),
		zap.Bool("interrupted", interrupted),
		zap.Strings("errors", messages),
		drain.PeakRSSField(),
		zap.Int("exit_code", res.ExitCode()))
	return res
}
