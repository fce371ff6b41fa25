package hold

import (
	"context"

	"go.uber.org/zap"

	"github.com/meshdrain/meshdrain/pkg/hook/drain"
)

// FailSafeConfig is what FailSafe needs: what went wrong, and how long to keep the proxy
// (Hold: Bound, from whatever timing parsed). It is prestop's, whose wait FailSafe shares.
type FailSafeConfig = drain.FailSafeConfig

// FailSafe is hold when its configuration cannot be used. Returning at once would let a
// classic proxy drain and stop under the app (its SIGTERM follows the hook), the loss this
// hook exists to prevent; so it keeps the proxy until the app hook's deadline plus its drain,
// as the guessed preStop sleep it replaces would, makes no drain call (the proxy then drains
// at its own SIGTERM), and exits 2 so that the kubelet records a FailedPreStopHook event.
// SIGINT/SIGTERM/SIGHUP (ctx) end the wait early; the exit code stays 2.
func FailSafe(ctx context.Context, cfg FailSafeConfig) Result {
	cfg, start, messages, interrupted := drain.WaitOutProblems(ctx, cfg, "configuration cannot be used: keeping the proxy until the hook deadline plus the app's drain, without a drain call")
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
