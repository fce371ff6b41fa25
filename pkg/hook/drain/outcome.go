package drain

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/meshdrain/meshdrain/pkg/hook/exitcode"
	"github.com/meshdrain/meshdrain/pkg/mesh"
)

// Reasons only the command layer reports: the drain never ran as configured.
const (
	// ReasonConfigError: the configuration could not be used (a bad flag or MESHDRAIN_*
	// value, a check that failed at start); meshdrain held the app for the fallback wait.
	ReasonConfigError Reason = "config-error"
)

// ExitActionFailed is the exit code when the wait ended with a reason whose code is 0 but an
// action (--signal, --shutdown-url, --exec) failed.
const ExitActionFailed = exitcode.FailedAfter

// ExitConfigError is ReasonConfigError's exit code, also used when a drain ran degraded.
const ExitConfigError = exitcode.ConfigError

// ReasonInfo documents one way a drain ends.
type ReasonInfo = exitcode.Row[Reason]

// ExitCodes is prestop's exit-code contract: ExitCode reads it, `prestop --help` prints it,
// and tests hold the README to it.
var ExitCodes = exitcode.NewTable("(action failed)",
	"the wait ended with a reason of exit 0, but an action (--signal, --shutdown-url, --exec) failed: the final line has action_error",
	exitcode.Ends(ReasonQuiet, exitcode.OK, "the inbound counter stood still for the quiet window (at least --quiet; longer when the traffic's own pauses are) with nothing active, and --min-wait is over"),
	exitcode.Ends(ReasonQuietStreams, exitcode.OK, "arrivals stopped for the quiet window but requests stayed open (streams, WebSockets, TCP connections) for --streams-wait more: the app's own shutdown ends them; the final line has open_streams"),
	exitcode.Ends(ReasonSidecarGone, exitcode.OK, "the admin port started refusing while no request had arrived within the quiet window and none was active: the sidecar is gone, nothing is lost"),
	exitcode.Ends(ReasonNoSidecar, exitcode.OK, "the admin port was never reached within --connect-timeout"),
	exitcode.Ends(ReasonConfigError, exitcode.ConfigError, "a flag, MESHDRAIN_* variable or start check was wrong: the error is logged and the app is held for --fallback-wait (capped by the grace period); also when only --log-file could not be opened (the drain ran with stderr logs)"),
	exitcode.Ends(ReasonDeadline, exitcode.Deadline, "--deadline came first"),
	exitcode.Ends(ReasonNoSignal, exitcode.NoSignal, "the sidecar exposes no usable inbound stat (or none for --port; --mesh none: nothing listens on --port): the log names the fix; the app was held for --fallback-wait"),
	exitcode.Ends(ReasonSidecarGoneBusy, exitcode.SidecarGoneBusy, "the admin port started refusing while requests were still arriving or in flight: the sidecar stopped under live traffic (Envoy killed by Istio's terminationDrainDuration, a classic Linkerd proxy SIGTERMed at the deletion), and those requests failed"),
	exitcode.Ends(ReasonInterrupted, exitcode.Interrupted, "meshdrain itself got SIGINT, SIGTERM or SIGHUP; no action runs"),
)

// Reasons returns every reason with its exit code, in the order of the contract.
func Reasons() []ReasonInfo { return ExitCodes.Reasons() }

// Result is the outcome of one drain, as reported in the final log event.
type Result struct {
	Reason  Reason
	Elapsed time.Duration
	Signal  mesh.Signal
	Naming  mesh.Naming
	// RequestsAfterDrain counts arrivals after the drain call; nil when never measured.
	RequestsAfterDrain *float64
	// ActiveAtEnd is the in-flight gauge at the end; nil when unknown.
	ActiveAtEnd *float64
	// LastArrival is when the arrival counter last moved, relative to the start.
	LastArrival time.Duration
	// LongestGap is the longest time the counter stood still during the watch, the pause in
	// progress at the end included.
	LongestGap time.Duration
	// Window is the last quiet window the rule asked for, WindowTerm what set it, and
	// WindowCapped whether it reached past the deadline (rule.go).
	Window       time.Duration
	WindowTerm   WindowTerm
	WindowCapped bool
	// Rate is the arrival rate (per second) behind the rate term; 0 when none.
	Rate float64
	// OpenStreams is the in-flight gauge when the wait ended with quiet-streams.
	OpenStreams *float64
	Polls       int
	// CompleteReads counts the polls made to confirm a decision that a cheaper poll
	// (UsedOnlyReader) proposed; they are in Polls too.
	CompleteReads int
	AdminErrors   int
	DrainCalled   bool
	ActionsRun    bool
	ActionsTook   time.Duration
	ActionErr     error
	// FrozenAnswers counts admin answers that could not be fresh (counted in AdminErrors too).
	FrozenAnswers int
	// RecentArrivals is what arrived in the RecentWindow before the sidecar went away; nil
	// unless it did.
	RecentArrivals *float64
	RecentWindow   time.Duration
	// Degraded is Config.Degraded.
	Degraded error
	// ClientEvidence says where per-client evidence came from ("socket-table"), or why
	// there was none ("off", "unavailable: ..."); Clients is the last poll's.
	ClientEvidence string
	Clients        *ClientCounts
	// Risk is the last poll's figure and RiskFrom its clients (Decision); nil without a lag
	// distribution or before any poll was judged.
	Risk     *float64
	RiskFrom RiskFrom
}

// ExitCode is the process exit code for the outcome: the reason's, or 1 when the wait ended
// well but an action failed (the kubelet then records a FailedPreStopHook event), or 2 over
// either when the drain ran degraded (Config.Degraded).
func (r Result) ExitCode() int {
	return ExitCodes.Outcome(r.Reason, r.ActionErr != nil, r.Degraded != nil)
}

// recentWindow is how far back the arrivals reported with a dying sidecar are counted.
const recentWindow = 5 * time.Second

// arrivalLog keeps the arrivals seen at each poll of the last recentWindow, to say how many
// requests were still coming when the sidecar went away.
type arrivalLog struct {
	samples []recentArrival
	last    *float64
}

type recentArrival struct {
	at    time.Time
	delta float64
}

func (l *arrivalLog) add(now time.Time, r mesh.Reading) {
	if r.Arrivals == nil {
		return
	}
	if l.last != nil {
		delta := *r.Arrivals - *l.last
		if delta < 0 {
			delta = *r.Arrivals // a reset: what was counted since
		}
		if delta > 0 {
			l.samples = append(l.samples, recentArrival{at: now, delta: delta})
		}
	}
	v := *r.Arrivals
	l.last = &v
	cut := 0
	for cut < len(l.samples) && now.Sub(l.samples[cut].at) > recentWindow {
		cut++
	}
	l.samples = l.samples[cut:]
}

func (l *arrivalLog) since(from time.Time) float64 {
	total := 0.0
	for _, s := range l.samples {
		if s.at.After(from) {
			total += s.delta
		}
	}
	return total
}

// sidecarGone is the reason when the admin port starts refusing. It is benign only when the
// clients had already stopped: no arrival within the quiet window and nothing in flight at
// the last reading. Otherwise the sidecar stopped under live traffic (Istio's default
// terminationDrainDuration kills Envoy 5 s after the deletion; a classic Linkerd proxy stops
// accepting at its SIGTERM), the user's own incident, and saying "sidecar-gone, exit 0" would
// report it as a success.
func (c *coordinator) sidecarGone() Reason {
	now := c.clock.Now()
	windowStart := now.Add(-recentWindow)
	if windowStart.Before(c.start) {
		windowStart = c.start
	}
	recent := c.arrivals.since(windowStart)
	c.result.RecentArrivals = &recent
	c.result.RecentWindow = now.Sub(windowStart)
	active := c.result.ActiveAtEnd
	// "Lately" is the quiet window in force: sparse traffic's window is longer than --quiet.
	window := max(c.cfg.Quiet, c.result.Window)
	arrivedLately := c.watchStarted && now.Sub(c.start.Add(c.result.LastArrival)) < window && recent > 0
	if !arrivedLately && (active == nil || *active == 0) {
		return ReasonSidecarGone
	}
	c.log.Warn("the sidecar went away while requests were still arriving or in flight: they failed (cut, or refused at the callers; behind Envoy: 503 UC)",
		zap.Float64("arrivals_recent", recent),
		zap.Int64("recent_window_ms", c.result.RecentWindow.Milliseconds()),
		zap.Int64("last_arrival_ms", c.result.LastArrival.Milliseconds()),
		optionalField("active_at_end", active),
		zap.String("fix", c.sidecar.Hints().SidecarGone))
	return ReasonSidecarGoneBusy
}

// holdMinWait honours --min-wait on the paths that end before the rule could apply it (no
// sidecar, no signal, sidecar gone): it is a floor whatever happened, bounded by the deadline.
func (c *coordinator) holdMinWait(parent context.Context, reason Reason) Reason {
	switch reason {
	case ReasonQuiet, ReasonQuietStreams, ReasonDeadline, ReasonInterrupted:
		return reason
	}
	left := c.start.Add(c.cfg.MinWait).Sub(c.clock.Now())
	if left <= 0 {
		return reason
	}
	c.log.Info("holding for --min-wait", zap.String("reason", string(reason)),
		zap.Int64("min_wait_ms", c.cfg.MinWait.Milliseconds()), zap.Int64("hold_ms", left.Milliseconds()))
	if stop := c.wait(parent, left); stop == ReasonInterrupted {
		return stop
	}
	return reason
}

// actionTimeout is the actions' timeout, cut to what is left of the grace period less
// ActionMargin: an action must never run into the kubelet's SIGKILL at the grace period.
func (c *coordinator) actionTimeout() time.Duration {
	timeout := c.cfg.ActionTimeout
	if c.cfg.GracePeriod <= 0 {
		return timeout
	}
	left := c.start.Add(c.cfg.GracePeriod - c.cfg.ActionMargin).Sub(c.clock.Now())
	if left < timeout {
		c.log.Warn("action timeout cut to what is left of the grace period",
			zap.Int64("action_timeout_ms", timeout.Milliseconds()),
			zap.Int64("cut_to_ms", max(left, 0).Milliseconds()),
			zap.Int64("grace_period_ms", c.cfg.GracePeriod.Milliseconds()),
			zap.Int64("margin_ms", c.cfg.ActionMargin.Milliseconds()))
		timeout = left
	}
	return timeout
}

// runActions runs the actions within their (cut) timeout; a failure is logged at ERROR.
func (c *coordinator) runActions(parent context.Context) {
	timeout := c.actionTimeout()
	if timeout <= 0 {
		c.result.ActionErr = fmt.Errorf("no time left before the grace period ends: actions not run")
		c.log.Error("actions not run: no time left before the grace period ends", zap.Strings("actions", actionNames(c.cfg.Actions)))
		return
	}
	// The actions get their own time: the wait's context may be over.
	actx, cancel := context.WithTimeout(context.WithoutCancel(parent), timeout)
	defer cancel()
	c.result.ActionsRun = true
	for _, a := range c.cfg.Actions {
		started := c.clock.Now()
		if err := a.Run(actx); err != nil {
			c.result.ActionErr = joinActionErr(c.result.ActionErr, fmt.Errorf("%s: %w", a, err))
			c.log.Error("action failed", zap.Stringer("action", a), zap.String("error", err.Error()),
				zap.Int64("took_ms", c.clock.Now().Sub(started).Milliseconds()))
			continue
		}
		c.log.Info("action done", zap.Stringer("action", a), zap.Int64("took_ms", c.clock.Now().Sub(started).Milliseconds()))
	}
}

func joinActionErr(prev, err error) error {
	if prev == nil {
		return err
	}
	return fmt.Errorf("%w; %w", prev, err)
}

func actionNames(actions []Action) []string {
	names := make([]string, 0, len(actions))
	for _, a := range actions {
		names = append(names, a.String())
	}
	return names
}

// outcomeFields are the final event's fields about how trustworthy the outcome is.
func (c *coordinator) outcomeFields() []zap.Field {
	fields := []zap.Field{zap.Int("frozen_answers", c.result.FrozenAnswers), PeakRSSField()}
	if c.result.RecentArrivals != nil {
		fields = append(fields, zap.Float64("arrivals_recent", *c.result.RecentArrivals),
			zap.Int64("recent_window_ms", c.result.RecentWindow.Milliseconds()))
	}
	if c.result.Reason == ReasonSidecarGoneBusy {
		fields = append(fields, zap.String("fix", c.sidecar.Hints().SidecarGone))
	}
	if why := c.sidecar.Hints().NoDrainCall; why != "" && !c.result.DrainCalled {
		fields = append(fields, zap.String("no_drain_call", why))
	}
	if c.result.Degraded != nil {
		fields = append(fields, zap.String("config_error", c.result.Degraded.Error()))
	}
	return fields
}

// finalLevel is the final event's level: ERROR when an action failed, WARN when the outcome
// is not the clients having left, INFO otherwise.
func (c *coordinator) finalLevel() zapcore.Level {
	switch {
	case c.result.ActionErr != nil, c.result.Degraded != nil:
		return zapcore.ErrorLevel
	case c.result.Reason == ReasonDeadline, c.result.Reason == ReasonNoSignal, c.result.Reason == ReasonSidecarGoneBusy:
		return zapcore.WarnLevel
	}
	return zapcore.InfoLevel
}

// Setting is one configuration value and where it came from, for the "drain started" event:
// a MESHDRAIN_* variable set in the pod spec must never act without a trace.
type Setting struct {
	Name   string
	Value  string
	Source string // "flag", "env MESHDRAIN_X" or "default"
}

type settingsObject []Setting

// SettingsField is a start event's "settings": every value and where it came from, for
// prestop's "drain started" and hold's "hold started" alike.
func SettingsField(settings []Setting) zap.Field {
	return zap.Object("settings", settingsObject(settings))
}

func (s settingsObject) MarshalLogObject(enc zapcore.ObjectEncoder) error {
	for _, setting := range s {
		_ = enc.AddObject(setting.Name, zapcore.ObjectMarshalerFunc(func(e zapcore.ObjectEncoder) error {
			e.AddString("value", setting.Value)
			e.AddString("from", setting.Source)
			return nil
		}))
	}
	return nil
}

// startFields are the "drain started" event's fields about the actions and the settings.
func (c *coordinator) startFields() []zap.Field {
	fields := []zap.Field{zap.Strings("actions", actionNames(c.cfg.Actions))}
	if why := c.sidecar.Hints().NoDrainCall; why != "" {
		fields = append(fields, zap.String("no_drain_call", why))
	}
	if c.cfg.GracePeriod > 0 {
		fields = append(fields, zap.Int64("grace_period_ms", c.cfg.GracePeriod.Milliseconds()))
	}
	if len(c.cfg.Settings) > 0 {
		fields = append(fields, SettingsField(c.cfg.Settings))
	}
	return fields
}
