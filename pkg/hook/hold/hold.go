// Package hold is `meshdrain hold`, the preStop hook of the pod's proxy container
// (istio-proxy). It keeps the proxy from draining and stopping until the app container's own
// hook, `meshdrain prestop`, has decided, and the app has then let go of the proxy; then it asks
// pilot-agent to drain (POST /drain), so that the SIGTERM which follows ends the proxy at once,
// and returns.
//
// Why: Istio drains the pod's inbound listeners at the deletion (a classic proxy at its
// SIGTERM, a native one from its injected preStop, docs/facts.md §1), and a drained Envoy tells
// every client to close its connection, which erases the per-client evidence prestop reads
// (docs/decision-rule.md, regime b). Replacing the proxy's preStop with hold defers that drain
// until prestop has decided, without a shell or a guessed sleep, and in both sidecar modes:
//
//   - classic: the kubelet sends the proxy its SIGTERM when hold returns, so hold returns only
//     once the app has stopped using the proxy (its ports released, no outbound connection
//     through it), or, where hold cannot see the app, --app-drain after it was told to stop;
//   - native: the kubelet sends the proxy its SIGTERM only after the app has exited anyway;
//     hold's /drain call makes that SIGTERM end the proxy at once instead of after
//     terminationDrainDuration.
//
// prestop reports over a channel (channel.go): an abstract unix socket in the pod's network
// namespace. Every wait is bounded: hold never returns later than the app hook's deadline plus
// the app's drain, within the grace period (Bound).
package hold

import (
	"context"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/meshdrain/meshdrain/pkg/clock"
	"github.com/meshdrain/meshdrain/pkg/hook/drain"
	"github.com/meshdrain/meshdrain/pkg/hook/exitcode"
)

// Defaults of hold's own settings; the timing ones are prestop's (drain.DefaultGracePeriod,
// drain.DefaultAppDrain), since hold must end by the same hook deadline.
const (
	// DefaultPrestopWait is how long hold waits for a prestop to report before it takes the
	// app as having no hook (or as gone). Both hooks are started by the kubelet at the same
	// moment; exec'ing a static binary in a container takes milliseconds, seconds only on a
	// loaded node. A prestop that reports later is still waited for; only the proxy's drain
	// may then have started before its decision, which prestop detects (docs/hold.md).
	DefaultPrestopWait = 2 * time.Second
	// DefaultDrainURL is pilot-agent's drain endpoint on its status port (15020, the
	// annotation status.sidecar.istio.io/port changes it): POST /drain, localhost only,
	// drains Envoy's inbound listeners (inboundonly&graceful&skip_exit) and makes pilot-agent
	// end at once at its SIGTERM (pilot/cmd/pilot-agent/status/server.go handleDrain,
	// pkg/envoy/agent.go DrainNow).
	DefaultDrainURL = "http://127.0.0.1:15020/drain"
)

// FinalMessage is the message of the one event every hold ends with.
const FinalMessage = "hold finished"

// Bound is the latest hold returns, from its start: the app hook's deadline (prestop's
// drain.HookDeadline, from the same flags) plus the app's drain, and never past the grace
// period less drain.KillMargin, so that the proxy's SIGTERM still comes before the kubelet's
// SIGKILL. With prestop's default deadline the two are the same.
func Bound(gracePeriod, appDrain, deadline time.Duration) time.Duration {
	return max(0, min(drain.HookDeadline(gracePeriod, appDrain, deadline)+appDrain, gracePeriod-drain.KillMargin))
}

// Reason says why hold returned.
type Reason string

// Reasons, as in the final event.
const (
	ReasonReleased    Reason = "released"
	ReasonAppGone     Reason = "app-gone"
	ReasonAppDrain    Reason = "app-drain"
	ReasonDeadline    Reason = "deadline"
	ReasonConfigError Reason = "config-error"
	ReasonInterrupted Reason = "interrupted"
)

// Exit codes that are not a reason's: they override a reason's 0 (the drain call), or any
// lower code (the channel), so that the kubelet records a FailedPreStopHook event saying so.
const (
	ExitDrainFailed  = exitcode.FailedAfter
	ExitChannelError = exitcode.ConfigError
)

// ReasonInfo documents one way hold ends.
type ReasonInfo = exitcode.Row[Reason]

// ExitCodes is hold's exit-code contract: Result.ExitCode reads it, `hold --help` prints it,
// and a test holds docs/hold.md to it.
var ExitCodes = exitcode.NewTable("(drain failed)",
	"the hold ended with a reason of exit 0, but the --drain-url call failed: the proxy drains at its own SIGTERM and waits its terminationDrainDuration; the final line has drain_error",
	exitcode.Ends(ReasonReleased, exitcode.OK, "the app's hook ended (or there was none) and the app let go of the proxy: no listener or connection of its own on its ports, no outbound connection through the proxy, in two reads in a row"),
	exitcode.Ends(ReasonAppGone, exitcode.OK, "no prestop reported within --prestop-wait and the app's ports never had a listener: the app container is gone, nothing uses the proxy"),
	exitcode.Ends(ReasonAppDrain, exitcode.OK, "--app-drain passed since the app was told to stop (its prestop ended, or its listener went away), and the app cannot be seen letting go: its ports are unknown, the socket table cannot be read, or it never listened on them"),
	exitcode.Ends(ReasonConfigError, exitcode.ConfigError, "a flag or MESHDRAIN_* value was wrong: the error is logged and the proxy is held until the hook deadline plus --app-drain (within the grace period), without a drain call, as a preStop sleep would; also when the channel could not be opened (the hold ran without it: the final line has channel_error)"),
	exitcode.Ends(ReasonDeadline, exitcode.Deadline, "a prestop still ran at its deadline (or, none reporting, the app kept listening until the hook deadline): hold drained the proxy then and returned at the deadline plus --app-drain, or when the app let go; also when the app, seen listening, still held its ports or an outbound connection at that bound"),
	exitcode.Ends(ReasonInterrupted, exitcode.Interrupted, "hold itself got SIGINT, SIGTERM or SIGHUP; no drain call is made after it"),
)

// Reasons returns every reason with its exit code, in the order of the contract.
func Reasons() []ReasonInfo { return ExitCodes.Reasons() }

// Prestop is what hold knows of the app's hook when it decides.
type Prestop string

// What hold learned of prestop.
const (
	// PrestopDone: every prestop that reported said "done".
	PrestopDone Prestop = "done"
	// PrestopGone: a prestop's connection closed before it said "done": killed with its
	// container (the app exited, or the kubelet killed it), or it crashed.
	PrestopGone Prestop = "gone"
	// PrestopOverdue: a prestop still ran at its deadline.
	PrestopOverdue Prestop = "overdue"
	// PrestopAbsent: none reported within --prestop-wait and the app was not (or no longer)
	// listening: no hook, or the app container is gone.
	PrestopAbsent Prestop = "absent"
	// PrestopUnreported: none reported, and the app kept listening until the hook deadline:
	// a hook that does not report (another channel, a sleep), or an app that ignores SIGTERM.
	PrestopUnreported Prestop = "unreported"
)

// Config is one hold.
type Config struct {
	// GracePeriod, AppDrain and Deadline are the app hook's timing, as prestop's flags give
	// it (Deadline zero: derived, drain.HookDeadline).
	GracePeriod, AppDrain, Deadline time.Duration
	// PrestopWait is how long to wait for a prestop to report.
	PrestopWait time.Duration
	// Poll is the interval between two looks at the socket table (and the channel, which
	// also wakes hold when something arrives).
	Poll time.Duration
	// Channel is where prestops report; nil when it could not be opened (ChannelErr).
	Channel    Channel
	ChannelErr error
	// App is how the app is seen.
	App App
	// Drain asks the proxy to drain and to end at once at its SIGTERM (pilot-agent's POST
	// /drain); nil: no call.
	Drain drain.Action
	// DrainTimeout bounds the drain call (real time).
	DrainTimeout time.Duration
	Clock        clock.Clock
	Logger       *zap.Logger
	// Start is when the hook started (default: when Run is called).
	Start time.Time
	// Settings are reported in the "hold started" event with where each came from.
	Settings []drain.Setting
	// Degraded is a start problem that did not stop the hold (an unusable --log-file): it is
	// in the final event, and the exit code is at least 2.
	Degraded error
}

// Result is the outcome of one hold, as in the final event.
type Result struct {
	Reason  Reason
	Prestop Prestop
	// PrestopReason and PrestopExitCode are the last "done" report's.
	PrestopReason   string
	PrestopExitCode *int
	// Sessions is how many prestops reported.
	Sessions int
	Elapsed  time.Duration
	// Decided is when hold decided the app's hook was over (since the start); negative if
	// it never did.
	Decided     time.Duration
	DrainCalled bool
	DrainErr    error
	ChannelErr  error
	// AppPorts are the ports the app was seen listening on; AppUnseen why it could not be
	// seen ("" if it could).
	AppPorts  []int
	AppUnseen string
	Degraded  error
}

// ExitCode is the reason's code, 1 where it is 0 but the drain call failed, and at least 2
// when the channel could not be opened or the hold ran degraded.
func (r Result) ExitCode() int {
	return ExitCodes.Outcome(r.Reason, r.DrainErr != nil, r.ChannelErr != nil || r.Degraded != nil)
}

// Run holds until the app's hook has decided and the app has let go of the proxy, within
// Bound, and returns why it stopped.
func Run(ctx context.Context, cfg Config) Result {
	return newHolder(cfg).run(ctx)
}

type phase string

const (
	// phaseAwaiting: the app's hook has not decided yet (as far as hold knows).
	phaseAwaiting phase = "awaiting-prestop"
	// phaseReleasing: it has; the proxy was asked to drain; hold waits for the app to let go.
	phaseReleasing phase = "releasing"
)

type sessionState string

const (
	sessionRunning sessionState = "running"
	sessionDone    sessionState = "done"
	sessionGone    sessionState = "gone"
)

// session is one prestop that reported.
type session struct {
	state sessionState
	pid   int
	// due is when it decides at the latest (its report's deadline, or the hook deadline).
	due time.Time
}

type holder struct {
	cfg   Config
	clock clock.Clock
	log   *zap.Logger

	start time.Time
	// hookDue is the app hook's deadline, end the latest return (Bound); both from start.
	hookDue, end time.Time
	phase        phase
	sessions     map[int]*session
	app          *appView
	// appStopAt is when the app was last told to stop, as far as hold knows (zero: not
	// known); the app's drain counts from it.
	appStopAt time.Time
	decidedAt time.Time
	// releasingReads counts the full reads of the socket table since hold decided.
	releasingReads int
	result         Result
}

func newHolder(cfg Config) *holder {
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.Poll <= 0 {
		cfg.Poll = drain.DefaultPoll
	}
	if cfg.DrainTimeout <= 0 {
		cfg.DrainTimeout = drain.DefaultConnectTimeout
	}
	return &holder{cfg: cfg, clock: cfg.Clock, log: cfg.Logger, phase: phaseAwaiting,
		sessions: map[int]*session{}, app: newAppView(cfg.App)}
}

func (h *holder) run(ctx context.Context) Result {
	h.start = h.clock.Now()
	if !h.cfg.Start.IsZero() && h.cfg.Start.Before(h.start) {
		h.start = h.cfg.Start
	}
	h.end = h.start.Add(Bound(h.cfg.GracePeriod, h.cfg.AppDrain, h.cfg.Deadline))
	h.hookDue = minTime(h.start.Add(drain.HookDeadline(h.cfg.GracePeriod, h.cfg.AppDrain, h.cfg.Deadline)), h.end)
	h.result.Decided = -1
	h.result.ChannelErr, h.result.Degraded = h.cfg.ChannelErr, h.cfg.Degraded
	h.logStart()
	var wake <-chan struct{}
	if h.cfg.Channel != nil {
		wake = h.cfg.Channel.Wake()
	}
	for {
		if ctx.Err() != nil {
			return h.finish(ReasonInterrupted)
		}
		now := h.clock.Now()
		h.take(now)
		h.look(now)
		if reason := h.step(ctx, now); reason != "" {
			return h.finish(reason)
		}
		timer := h.clock.NewTimer(h.nextWait(now))
		select {
		case <-timer.C():
		case <-wake:
		case <-ctx.Done():
			timer.Stop()
			return h.finish(ReasonInterrupted)
		}
		timer.Stop()
	}
}

func (h *holder) logStart() {
	fields := []zap.Field{
		zap.Int64("prestop_wait_ms", h.cfg.PrestopWait.Milliseconds()),
		zap.Int64("hook_deadline_ms", h.hookDue.Sub(h.start).Milliseconds()),
		zap.Int64("bound_ms", h.end.Sub(h.start).Milliseconds()),
		zap.Int64("app_drain_ms", h.cfg.AppDrain.Milliseconds()),
		zap.Ints("app_ports", ints(h.cfg.App.Ports)),
		zap.Int("outbound_port", int(h.cfg.App.OutboundPort)),
		zap.Int64("poll_ms", h.cfg.Poll.Milliseconds()),
		zap.String("drain", actionName(h.cfg.Drain)),
	}
	if len(h.cfg.Settings) > 0 {
		fields = append(fields, drain.SettingsField(h.cfg.Settings))
	}
	h.log.Info("hold started", fields...)
	if h.cfg.ChannelErr != nil {
		h.log.Error("the channel cannot be opened: no prestop can report; holding on what the socket table shows, as if none had",
			zap.String("error", h.cfg.ChannelErr.Error()))
	}
	if !h.app.visible() {
		h.log.Warn("the app cannot be seen: hold waits --app-drain after it was told to stop", zap.String("why", h.app.invisible.Error()))
	}
}

// take applies what the channel received.
func (h *holder) take(now time.Time) {
	if h.cfg.Channel == nil {
		return
	}
	for _, ev := range h.cfg.Channel.Take() {
		s := h.sessions[ev.Session]
		switch {
		case ev.Report != nil && ev.Report.State == StateRunning:
			if s != nil {
				continue // one running report a session; a repeat changes nothing
			}
			due := minTime(now.Add(time.Duration(*ev.Report.DeadlineInMs)*time.Millisecond), h.end)
			h.sessions[ev.Session] = &session{state: sessionRunning, pid: ev.Report.PID, due: due}
			h.result.Sessions++
			h.log.Info("prestop reported", zap.Int("session", ev.Session), zap.Int("pid", ev.Report.PID),
				zap.Int64("deadline_in_ms", *ev.Report.DeadlineInMs), zap.Int64("elapsed_ms", now.Sub(h.start).Milliseconds()))
			if reported := due.Sub(h.hookDue); reported > time.Second || reported < -time.Second {
				h.log.Warn("prestop's deadline is not hold's: give both the same --grace-period, --app-drain and --deadline (hold waits for prestop's, within its own bound)",
					zap.Int64("prestop_deadline_ms", due.Sub(h.start).Milliseconds()), zap.Int64("hold_deadline_ms", h.hookDue.Sub(h.start).Milliseconds()))
			}
		case ev.Report != nil && ev.Report.State == StateDone:
			if s == nil {
				// A prestop that connected only at its end (hold started late).
				s = &session{pid: ev.Report.PID}
				h.sessions[ev.Session] = s
				h.result.Sessions++
			}
			s.state = sessionDone
			h.result.PrestopReason, h.result.PrestopExitCode = ev.Report.Reason, ev.Report.ExitCode
			h.log.Info("prestop finished", zap.Int("session", ev.Session), zap.String("prestop_reason", ev.Report.Reason),
				zap.Intp("prestop_exit_code", ev.Report.ExitCode), zap.Int64("elapsed_ms", now.Sub(h.start).Milliseconds()))
			h.ended(now)
		case ev.Closed:
			if ev.Err != nil {
				h.log.Warn("a channel connection sent something that is not a prestop report: dropped", zap.Int("session", ev.Session), zap.String("error", ev.Err.Error()))
			}
			if s == nil || s.state != sessionRunning {
				continue
			}
			s.state = sessionGone
			h.log.Warn("prestop's connection closed before it said done: it was killed with its container, or crashed",
				zap.Int("session", ev.Session), zap.Int("pid", s.pid), zap.Int64("elapsed_ms", now.Sub(h.start).Milliseconds()))
			h.ended(now)
		}
	}
}

// ended notes that a prestop ended while hold releases: the app is told to stop now, and its
// drain counts from here.
func (h *holder) ended(now time.Time) {
	if h.phase == phaseReleasing && now.After(h.appStopAt) {
		h.appStopAt = now
	}
}

// look reads the socket table: the listeners only while the hook runs (a cheap dump, to know
// where the app listens and when it stops), everything once it has decided.
func (h *holder) look(now time.Time) {
	read := h.app.readListeners
	if h.phase == phaseReleasing {
		read = h.app.readAll
		h.releasingReads++
	}
	wasVisible := h.app.visible()
	fresh, err := read(now)
	if len(fresh) > 0 {
		h.log.Info("app listening", zap.Ints("ports", ints(fresh)), zap.Int64("elapsed_ms", now.Sub(h.start).Milliseconds()))
	}
	switch {
	case wasVisible && !h.app.visible():
		h.log.Warn("the socket table cannot be read: the app cannot be seen; hold waits --app-drain after it was told to stop", zap.String("error", err.Error()))
	case err != nil:
		h.log.Debug("socket table read failed", zap.String("error", err.Error()))
	}
}

// step decides and returns the reason to stop, if any; the one place phases change.
func (h *holder) step(ctx context.Context, now time.Time) Reason {
	if h.phase == phaseAwaiting {
		outcome, decided := h.decide(now)
		if !decided {
			return ""
		}
		h.phase, h.decidedAt = phaseReleasing, now
		h.result.Prestop, h.result.Decided = outcome, now.Sub(h.start)
		switch outcome {
		case PrestopDone, PrestopGone:
			h.appStopAt = now
		case PrestopAbsent:
			h.appStopAt = h.start
			if !h.app.goneAt.IsZero() {
				h.appStopAt = h.app.goneAt
			}
		}
		h.log.Info("the app's hook is over: releasing the proxy", zap.String("prestop", string(outcome)),
			zap.Int64("elapsed_ms", now.Sub(h.start).Milliseconds()), zap.Int64("release_by_ms", h.releaseBy().Sub(h.start).Milliseconds()))
		h.callDrain(ctx)
		if ctx.Err() != nil {
			return ReasonInterrupted
		}
	}
	// A prestop that reported late, after hold took it as absent, still holds the proxy.
	for _, s := range h.sessions {
		if s.state == sessionRunning && now.Before(s.due) {
			return ""
		}
	}
	switch {
	case h.app.letGo():
		return ReasonReleased
	case h.result.Prestop == PrestopAbsent && h.app.neverThere():
		return ReasonAppGone
	case !now.Before(h.releaseBy()) && (h.releasingReads >= drain.MinQuietPolls || !now.Before(h.end)):
		// The reads that can show the app gone or let go come first, however late a busy
		// machine ran them: ending on the clock alone would name the wrong reason.
		if h.result.Prestop == PrestopOverdue || h.result.Prestop == PrestopUnreported || h.running() || h.app.watched() {
			return ReasonDeadline
		}
		return ReasonAppDrain
	}
	return ""
}

// decide says whether the app's hook is over, and how hold knows.
func (h *holder) decide(now time.Time) (Prestop, bool) {
	running, finished, gone := 0, 0, 0
	for _, s := range h.sessions {
		switch s.state {
		case sessionRunning:
			if now.Before(s.due) {
				return "", false
			}
			running++
		case sessionDone:
			finished++
		case sessionGone:
			gone++
		}
	}
	switch {
	case running > 0:
		return PrestopOverdue, true
	case gone > 0:
		return PrestopGone, true
	case finished > 0:
		return PrestopDone, true
	case now.Before(h.start.Add(h.cfg.PrestopWait)) && now.Before(h.hookDue):
		return "", false
	case h.app.listening && now.Before(h.hookDue):
		// No prestop has reported, but the app still serves: something holds it (a hook
		// that does not report) or it has not been told to stop yet. Draining now could
		// come before that hook's decision.
		return "", false
	case h.app.listening:
		return PrestopUnreported, true
	}
	return PrestopAbsent, true
}

func (h *holder) running() bool {
	for _, s := range h.sessions {
		if s.state == sessionRunning {
			return true
		}
	}
	return false
}

// releaseBy is when hold stops waiting for the app to let go. An app that hold has seen
// listening is watched until it lets go, up to the bound: while it still holds its ports or
// calls out, it serves, and the pod is not gone before it exits anyway, so keeping the proxy
// costs nothing, and releasing it would cut requests that outlast --app-drain. An app that
// cannot be seen (no port known, no socket table, a port it never listened on) is given its
// drain after it was told to stop, or, when that moment is not known, the bound.
func (h *holder) releaseBy() time.Time {
	if h.app.watched() {
		return h.end
	}
	stop := h.appStopAt
	if stop.IsZero() && h.app.goneAt.After(h.decidedAt) {
		// An overdue or unreported hook: the app's listener going away says it was told.
		stop = h.app.goneAt
	}
	if stop.IsZero() {
		return h.end
	}
	// The app's drain may be over before hold decided (no hook: it was told at the start);
	// step still waits for the reads that can show the app gone.
	return minTime(h.end, stop.Add(h.cfg.AppDrain))
}

// nextWait is how long to sleep: a poll, or less if a deadline comes first.
func (h *holder) nextWait(now time.Time) time.Duration {
	wait := h.cfg.Poll
	candidates := []time.Time{h.start.Add(h.cfg.PrestopWait), h.hookDue, h.end}
	if h.phase == phaseReleasing {
		candidates = append(candidates, h.releaseBy())
	}
	for _, s := range h.sessions {
		if s.state == sessionRunning {
			candidates = append(candidates, s.due)
		}
	}
	for _, t := range candidates {
		if d := t.Sub(now); d > 0 && d < wait {
			wait = d
		}
	}
	return wait
}

// callDrain asks the proxy to drain. It is made once the app's hook is over, and only then:
// the inbound drain it starts is what the hook deferred, and the SIGTERM it makes final comes
// only after hold returns.
func (h *holder) callDrain(ctx context.Context) {
	if h.cfg.Drain == nil {
		h.log.Info("no drain call (--drain-url is empty): the proxy drains at its own SIGTERM")
		return
	}
	callCtx, cancel := context.WithTimeout(ctx, h.cfg.DrainTimeout)
	defer cancel()
	started := h.clock.Now()
	err := h.cfg.Drain.Run(callCtx)
	took := h.clock.Now().Sub(started).Milliseconds()
	if err != nil {
		h.result.DrainErr = err
		h.log.Error("the drain call failed: the proxy will drain at its SIGTERM and wait its terminationDrainDuration",
			zap.String("drain", h.cfg.Drain.String()), zap.String("error", err.Error()), zap.Int64("took_ms", took))
		return
	}
	h.result.DrainCalled = true
	h.log.Info("proxy draining: its SIGTERM will end it at once", zap.String("drain", h.cfg.Drain.String()), zap.Int64("took_ms", took))
}

func (h *holder) finish(reason Reason) Result {
	now := h.clock.Now()
	h.result.Reason = reason
	h.result.Elapsed = now.Sub(h.start)
	h.result.AppPorts = h.app.seenPorts()
	if h.app.invisible != nil {
		h.result.AppUnseen = h.app.invisible.Error()
	}
	r := h.result
	fields := []zap.Field{
		zap.String("reason", string(r.Reason)),
		zap.String("prestop", string(r.Prestop)),
		zap.String("prestop_reason", r.PrestopReason),
		zap.Intp("prestop_exit_code", r.PrestopExitCode),
		zap.Int("prestops", r.Sessions),
		zap.Int64("elapsed_ms", r.Elapsed.Milliseconds()),
		decidedField(r.Decided),
		zap.Bool("drain_called", r.DrainCalled),
		zap.Ints("app_ports_seen", r.AppPorts),
		zap.Int64("bound_ms", h.end.Sub(h.start).Milliseconds()),
		zap.Int("exit_code", r.ExitCode()),
	}
	if r.DrainErr != nil {
		fields = append(fields, zap.String("drain_error", r.DrainErr.Error()))
	}
	if r.AppUnseen != "" {
		fields = append(fields, zap.String("app_unseen", r.AppUnseen))
	}
	if r.ChannelErr != nil {
		fields = append(fields, zap.String("channel_error", r.ChannelErr.Error()))
	}
	if r.Degraded != nil {
		fields = append(fields, zap.String("config_error", r.Degraded.Error()))
	}
	fields = append(fields, drain.PeakRSSField())
	if ce := h.log.Check(finalLevel(r), FinalMessage); ce != nil {
		ce.Write(fields...)
	}
	return r
}

// decidedField is when hold decided the app's hook was over, null if it never did.
func decidedField(decided time.Duration) zap.Field {
	if decided < 0 {
		return zap.Reflect("decided_ms", nil)
	}
	return zap.Int64("decided_ms", decided.Milliseconds())
}

// finalLevel: ERROR when the drain call or the channel failed, WARN when the app's hook did
// not end as it should have, INFO otherwise.
func finalLevel(r Result) zapcore.Level {
	switch {
	case r.DrainErr != nil, r.ChannelErr != nil, r.Degraded != nil:
		return zapcore.ErrorLevel
	case r.Reason == ReasonDeadline, r.Prestop == PrestopGone, r.Prestop == PrestopOverdue, r.Prestop == PrestopUnreported:
		return zapcore.WarnLevel
	}
	return zapcore.InfoLevel
}

func actionName(a drain.Action) string {
	if a == nil {
		return "none"
	}
	return a.String()
}

func ints(ports []uint16) []int {
	out := make([]int, len(ports))
	for i, p := range ports {
		out[i] = int(p)
	}
	return out
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
