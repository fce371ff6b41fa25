// Package drain decides when an app container may stop: after its sidecar's inbound
// new-request counter has stood still for a quiet window with nothing in flight, which is
// the observable moment at which the clients' sidecars have stopped routing to this pod
// (docs/facts.md §1). It replaces a guessed preStop sleep with that measurement, and never
// decides later than a deadline derived from the pod's grace period.
package drain

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/meshdrain/meshdrain/pkg/clock"
	"github.com/meshdrain/meshdrain/pkg/localhttp"
	"github.com/meshdrain/meshdrain/pkg/mesh"
)

// Phase is a step of the coordinator's state machine.
type Phase string

// Phases, in order.
const (
	PhaseConnect  Phase = "connect"  // reach the admin API
	PhaseDiscover Phase = "discover" // find the inbound endpoints and the best signal
	PhaseDrain    Phase = "drain"    // tell the inbound listeners to drain
	PhaseWatch    Phase = "watch"    // wait for the quiet window
	PhaseDone     Phase = "done"
)

// Reason says why the wait ended.
type Reason string

// Reasons, as they appear in the final log event (ReasonQuietStreams is in rule.go).
const (
	ReasonQuiet       Reason = "quiet"        // the counter stood still for the quiet window, nothing active
	ReasonSidecarGone Reason = "sidecar-gone" // the admin port started refusing after the clients had left
	// ReasonSidecarGoneBusy: the admin port started refusing while requests were still
	// arriving or in flight: the sidecar stopped under live traffic.
	ReasonSidecarGoneBusy Reason = "sidecar-gone-busy"
	ReasonNoSidecar       Reason = "no-sidecar"  // the admin port was never reached within the connect timeout
	ReasonDeadline        Reason = "deadline"    // the deadline came first
	ReasonNoSignal        Reason = "no-signal"   // the sidecar exposes no usable inbound stat
	ReasonInterrupted     Reason = "interrupted" // meshdrain itself was asked to stop
)

// ExitCode is the process exit code for a reason (ExitCodes).
func (r Reason) ExitCode() int { return ExitCodes.Code(r) }

// Sidecar is what the coordinator needs of the pod's sidecar: any mesh's (mesh.Sidecar).
type Sidecar = mesh.Sidecar

// UsedOnlyReader is the optional part of a Sidecar that polls more cheaply between complete
// reads (*envoy.Client has it: Envoy's usedonly, completed with the last complete read).
// Its answers may miss a counter that moved, so the watch polls with it but never decides on
// it: the poll that would end the wait is followed by a complete read, and that one decides.
type UsedOnlyReader interface {
	InboundUsed(ctx context.Context, sel mesh.Selector) (mesh.Snapshot, error)
}

// Run coordinates one drain and returns its outcome. It returns when a reason holds; the
// caller maps the reason to an exit code.
func Run(ctx context.Context, cfg Config, sidecar Sidecar) Result {
	c := newCoordinator(cfg, sidecar)
	return c.run(ctx)
}

type coordinator struct {
	cfg     Config
	sidecar Sidecar
	log     *zap.Logger
	clock   clock.Clock

	phase      Phase
	start      time.Time
	phaseStart time.Time
	deadline   time.Time
	result     Result

	lastErrLog   time.Time
	suppressed   int
	rule         *Rule
	watchStarted bool
	// clients is Config.Clients while it can be read.
	clients ClientEvidence

	fresh      freshness
	arrivals   arrivalLog
	progressAt progressState
	// terms word the messages about the inbound side, from what the first read answered: a
	// sidecar's stats, or the pod's kernel (--mesh none).
	terms mesh.Terms
}

func newCoordinator(cfg Config, sidecar Sidecar) *coordinator {
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.Poll <= 0 {
		cfg.Poll = 200 * time.Millisecond
	}
	if cfg.ConnectTimeout <= 0 {
		cfg.ConnectTimeout = 2 * time.Second
	}
	if cfg.ActionTimeout <= 0 {
		cfg.ActionTimeout = 10 * time.Second
	}
	if cfg.ErrorLogInterval <= 0 {
		cfg.ErrorLogInterval = 5 * time.Second
	}
	if cfg.ActionMargin <= 0 {
		cfg.ActionMargin = DefaultActionMargin
	}
	if cfg.ProgressInterval <= 0 {
		cfg.ProgressInterval = DefaultProgressInterval
	}
	return &coordinator{cfg: cfg, sidecar: sidecar, log: cfg.Logger, clock: cfg.Clock, terms: mesh.NamingUnknown.Terms()}
}

// errDeadline ends a wait at the deadline.
var errDeadline = errors.New("deadline reached")

func (c *coordinator) run(parent context.Context) Result {
	c.start = c.clock.Now()
	if !c.cfg.Start.IsZero() && c.cfg.Start.Before(c.start) {
		c.start = c.cfg.Start
	}
	c.deadline = c.start.Add(c.cfg.Deadline)
	c.phase, c.phaseStart = PhaseConnect, c.start
	c.result.Signal = mesh.SignalNone
	c.result.Naming = mesh.NamingUnknown
	c.log.Info("drain started",
		zap.Int64("deadline_ms", c.cfg.Deadline.Milliseconds()),
		zap.Int64("quiet_ms", c.cfg.Quiet.Milliseconds()),
		zap.Int64("min_wait_ms", c.cfg.MinWait.Milliseconds()),
		zap.Int64("streams_wait_ms", c.cfg.StreamsWait.Milliseconds()),
		zap.Int64("poll_ms", c.cfg.Poll.Milliseconds()),
		zap.String("drain_mode", string(c.cfg.DrainMode)),
		zap.Bool("dry_run", c.cfg.DryRun),
		zap.Inline(zapcore.ObjectMarshalerFunc(func(enc zapcore.ObjectEncoder) error {
			for _, f := range c.startFields() {
				f.AddTo(enc)
			}
			return nil
		})))

	// Real time bounds the admin calls; the injected clock drives every decision.
	ctx, cancel := context.WithTimeout(parent, c.deadline.Sub(c.clock.Now()))
	defer cancel()

	reason := c.loop(ctx, parent)
	reason = c.holdMinWait(parent, reason)
	c.drainAtEnd(parent, reason)
	return c.finish(parent, reason)
}

// loop runs the phases and returns the reason the wait ended.
func (c *coordinator) loop(ctx, parent context.Context) Reason {
	snap, reason := c.connect(ctx, parent)
	if reason != "" {
		return reason
	}
	c.terms = snap.Naming.Terms()

	c.enter(PhaseDiscover)
	fix, reason := c.checkPorts(ctx, snap)
	if reason != "" {
		return reason
	}
	if fix != "" {
		return c.noSignal(ctx, parent, fix)
	}
	reading := snap.Read()
	if reading.Signal.Rank() > mesh.SignalClusterRequests.Rank() && !c.cfg.Selector.Completions {
		// No request-level stat: completions are the next best signal, asked for only now
		// because their series grow with the number of callers.
		c.cfg.Selector.Completions = true
		if wider, err := c.fetch(ctx); err == nil {
			snap, reading = wider, wider.Read()
		} else if localhttp.IsRefused(err) {
			return c.sidecarGone()
		}
	}
	c.result.Signal, c.result.Naming = reading.Signal, snap.Naming
	c.log.Info("inbound discovered",
		zap.String("naming", string(snap.Naming)),
		zap.String("signal", string(reading.Signal)),
		zap.Ints("ports", ports(snap)),
		zap.Stringer("arrivals", optional{reading.Arrivals}),
		zap.Stringer("active", optional{reading.Active}))
	if reading.Signal == mesh.SignalNone {
		return c.noSignal(ctx, parent, "")
	}
	c.warnWeakSignal(reading.Signal)

	c.enter(PhaseDrain)
	if !c.cfg.DryRun && c.cfg.DrainMode != mesh.DrainNone && !c.cfg.DrainAtEnd {
		if reason := c.drainListeners(ctx, parent); reason != "" {
			return reason
		}
	}

	c.beginFreshness(ctx, snap)
	c.enter(PhaseWatch)
	return c.watch(ctx, parent, snap, reading)
}

func (c *coordinator) connect(ctx, parent context.Context) (mesh.Snapshot, Reason) {
	answered := false
	for {
		snap, err := c.fetch(ctx)
		if err == nil {
			return snap, ""
		}
		if reason := c.stopped(parent); reason != "" {
			return snap, reason
		}
		if !localhttp.IsUnreachable(err) {
			// The admin port accepts connections but answers badly: the sidecar is there,
			// so keep trying until the deadline rather than give up after connect-timeout.
			answered = true
		}
		c.adminError(err)
		if !answered && c.clock.Now().Sub(c.start) >= c.cfg.ConnectTimeout {
			fields := []zap.Field{zap.String("error", err.Error()), zap.Int64("connect_timeout_ms", c.cfg.ConnectTimeout.Milliseconds())}
			if hint := c.sidecar.Hints().Unreachable; hint != "" {
				fields = append(fields, zap.String("hint", hint))
			}
			c.log.Warn("admin API not reachable", fields...)
			return snap, ReasonNoSidecar
		}
		if reason := c.wait(parent, c.cfg.Poll); reason != "" {
			return snap, reason
		}
	}
}

// noSignal holds the app for the fallback wait when there is nothing to watch; fix, when
// set, is what the user must change (it otherwise depends on the selection).
func (c *coordinator) noSignal(ctx, parent context.Context, fix string) Reason {
	wait := c.cfg.FallbackWait
	if left := c.deadline.Sub(c.clock.Now()); wait > left {
		wait = left
	}
	hints := c.sidecar.Hints()
	switch {
	case fix != "":
	case len(c.cfg.Selector.Clusters) > 0 || len(c.cfg.Selector.HTTPPrefixes) > 0:
		fix = "check the --cluster and --http-prefix names against the sidecar's /stats"
	default:
		fix = hints.MissingStats
	}
	fields := []zap.Field{zap.String("fix", fix)}
	for _, more := range hints.MoreNoSignalFixes {
		fields = append(fields, zap.String(more.Key, more.Text))
	}
	c.log.Error(c.terms.NoSignal+"; falling back to a fixed wait",
		append(fields, zap.Int64("fallback_wait_ms", wait.Milliseconds()))...)
	if reason := c.wait(parent, wait); reason != "" && reason != ReasonDeadline {
		return reason
	}
	return ReasonNoSignal
}

// drainAtEnd makes the deferred drain call (DrainAtEnd) once the wait has ended with the
// sidecar still there, whatever ended it: the app is about to stop accepting.
func (c *coordinator) drainAtEnd(parent context.Context, reason Reason) {
	if !c.cfg.DrainAtEnd || c.cfg.DryRun || c.cfg.DrainMode == mesh.DrainNone || !c.watchStarted {
		return
	}
	switch reason {
	case ReasonInterrupted, ReasonSidecarGone, ReasonSidecarGoneBusy, ReasonNoSidecar:
		return
	}
	// The drain's own context may be spent (the deadline); the call is bounded by the
	// connect timeout, and the actions' own bound keeps them inside the grace period.
	c.drainListeners(parent, parent)
}

func (c *coordinator) drainListeners(ctx, parent context.Context) Reason {
	callCtx, cancel := context.WithTimeout(ctx, c.cfg.ConnectTimeout)
	defer cancel()
	err := c.sidecar.DrainListeners(callCtx, c.cfg.DrainMode)
	if reason := c.stopped(parent); reason != "" {
		return reason
	}
	switch {
	case err == nil:
		c.result.DrainCalled = true
		c.log.Info("inbound listeners draining", zap.String("drain_mode", string(c.cfg.DrainMode)))
	case localhttp.IsRefused(err):
		return c.sidecarGone()
	default:
		// Draining only speeds clients up; the quiet window is still measured without it.
		c.result.AdminErrors++
		c.log.Warn("drain_listeners failed; watching without it", zap.String("error", err.Error()))
	}
	return ""
}

func (c *coordinator) watch(ctx, parent context.Context, snap mesh.Snapshot, first mesh.Reading) Reason {
	c.beginClients(ctx, snap)
	c.rule = NewRule(RuleConfig{Start: c.start, Quiet: c.cfg.Quiet, LatencyAllowance: c.cfg.LatencyAllowance, MinWait: c.cfg.MinWait, ClientPeriod: c.cfg.ClientPeriod,
		Deadline: c.cfg.Deadline, StreamsWait: c.cfg.StreamsWait, LagBound: c.cfg.LagBound, SettledQuiet: SettledQuiet(c.cfg.SettledQuiet, c.cfg.Poll),
		ClientQuiet: ClientQuiet(c.cfg.Quiet, c.cfg.ClientPeriod, c.cfg.RPSPerClient), Lag: c.cfg.Lag, Risk: c.cfg.Risk}, c.observation(ctx, snap, first))
	c.result.LastArrival = c.clock.Now().Sub(c.start)
	c.result.RequestsAfterDrain = new(float64)
	c.result.ActiveAtEnd = first.Active
	c.watchStarted = true
	c.arrivals.add(c.clock.Now(), first)
	cheap, _ := c.sidecar.(UsedOnlyReader)
	var d Decision
	for {
		if reason := c.wait(parent, c.nextPoll(d)); reason != "" {
			return reason
		}
		fetch := c.fetch
		if cheap != nil {
			fetch = func(ctx context.Context) (mesh.Snapshot, error) { return c.fetchWith(ctx, cheap.InboundUsed) }
		}
		var snap mesh.Snapshot
		var reason Reason
		snap, d, reason = c.poll(ctx, parent, fetch)
		if reason != "" {
			return reason
		}
		if d.Reason == "" {
			continue
		}
		if cheap != nil {
			// Without an admin counter (Istio's default stats), the answers are shown fresh
			// by /server_info's uptime stepping, which can take a second: that wait is made
			// on cheap polls, before the complete read.
			if snap.AdminRequestsTotal == nil && c.fresh.adminLast == nil && !c.confirmQuiet(ctx, c.start.Add(d.LastArrival), snap) {
				continue
			}
			// The cheap answer may have missed a counter that moved: the decision is made
			// again on a complete read, which counts anything missed as an arrival now.
			c.result.CompleteReads++
			if snap, d, reason = c.poll(ctx, parent, c.fetch); reason != "" {
				return reason
			}
			if d.Change.Arrivals > 0 {
				// Arrivals the cheap polls did not show (or that came in the milliseconds
				// between the two): a sidecar whose cheap answers miss arrivals would make
				// every quiet window a pause in the traffic, and stretch the next one.
				c.log.Warn("a complete read showed arrivals the cheap (usedonly) polls had not; polling the complete stats from now on",
					zap.Float64("arrivals", d.Change.Arrivals))
				cheap = nil
			}
			if d.Reason == "" {
				continue
			}
		}
		// A decision rests on the counter having stood still since the last arrival: it
		// stands only if the answers are known to be fresh across that time.
		if c.confirmQuiet(ctx, c.start.Add(d.LastArrival), snap) {
			return d.Reason
		}
	}
}

// nextPoll is how long to wait for the next poll after decision d: the poll interval, or less
// when the window ends sooner, so that the wait ends when its window does rather than on the
// next poll (which would add up to a poll interval to every stop). At most one short poll per
// window: the one at its end.
func (c *coordinator) nextPoll(d Decision) time.Duration {
	until := d.Ends - c.clock.Now().Sub(c.start)
	if d.Reason != "" || d.Ends <= 0 || until <= 0 || until >= c.cfg.Poll {
		return c.cfg.Poll
	}
	return max(until, minPollWait)
}

// minPollWait is the shortest wait nextPoll asks for: a window that ends within it is as
// good as ended, and polls do not crowd each other.
const minPollWait = 10 * time.Millisecond

// poll takes one poll with fetch and shows it to the rule. A failed poll is an admin error
// and no decision; reason is set when the wait must end at once.
func (c *coordinator) poll(ctx, parent context.Context, fetch func(context.Context) (mesh.Snapshot, error)) (mesh.Snapshot, Decision, Reason) {
	snap, err := fetch(ctx)
	if reason := c.stopped(parent); reason != "" {
		return snap, Decision{}, reason
	}
	if err == nil {
		err = c.freshStats(snap)
	}
	if err != nil {
		if localhttp.IsRefused(err) {
			return snap, Decision{}, c.sidecarGone()
		}
		c.adminError(err)
		return snap, Decision{}, ""
	}
	reading := snap.Read()
	d := c.rule.Observe(c.observation(ctx, snap, reading))
	c.account(d)
	c.result.ActiveAtEnd = reading.Active
	now := c.clock.Now()
	c.arrivals.add(now, reading)
	c.progress(now, reading)
	return snap, d, ""
}

// observation is the rule's view of a poll, with the clients' evidence when there is some.
func (c *coordinator) observation(ctx context.Context, snap mesh.Snapshot, r mesh.Reading) Observation {
	traffic := TrafficOf(snap, r)
	if c.cfg.Reads != nil {
		c.cfg.Reads.ObserveRead(snap, traffic)
	}
	return Observation{At: c.clock.Now().Sub(c.start), Signal: r.Signal, Arrivals: r.Arrivals, Active: r.Active, Uptime: snap.ServerUptime,
		Clients: c.clientCounts(ctx, traffic)}
}

// account reports what the rule saw: arrivals after the drain call, the window in force,
// and the signal changes and counter resets worth a log line.
func (c *coordinator) account(d Decision) {
	ch := d.Change
	if ch.SignalChanged {
		c.log.Info("inbound signal changed", zap.String("from", string(ch.From)), zap.String("to", string(ch.To)))
		c.result.Signal = ch.To
	}
	if ch.Reset {
		c.log.Warn("inbound counter went down: stats were reset; re-baselining",
			zap.Float64("from", ch.ResetFrom), zap.Float64("to", ch.ResetTo))
	}
	*c.result.RequestsAfterDrain += ch.Arrivals
	c.result.LastArrival, c.result.LongestGap = d.LastArrival, d.LongestGap
	c.result.Window, c.result.WindowTerm, c.result.WindowCapped, c.result.Rate = d.Window, d.Term, d.Capped, d.Rate
	c.result.OpenStreams = d.OpenStreams
	c.result.Risk, c.result.RiskFrom = d.Risk, d.RiskFrom
}

func (c *coordinator) fetch(ctx context.Context) (mesh.Snapshot, error) {
	return c.fetchWith(ctx, c.sidecar.Inbound)
}

// fetchWith is one poll through read, counted and bounded by the connect timeout.
func (c *coordinator) fetchWith(ctx context.Context, read func(context.Context, mesh.Selector) (mesh.Snapshot, error)) (mesh.Snapshot, error) {
	c.result.Polls++
	callCtx, cancel := context.WithTimeout(ctx, c.cfg.ConnectTimeout)
	defer cancel()
	return read(callCtx, c.cfg.Selector)
}

// wait sleeps for d on the injected clock, but never past the deadline. It returns the
// reason to stop, if any.
func (c *coordinator) wait(parent context.Context, d time.Duration) Reason {
	if reason := c.stopped(parent); reason != "" {
		return reason
	}
	left := c.deadline.Sub(c.clock.Now())
	if left <= 0 {
		return ReasonDeadline
	}
	if d > left {
		d = left
	}
	timer := c.clock.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C():
	case <-parent.Done():
		return ReasonInterrupted
	}
	if !c.clock.Now().Before(c.deadline) {
		return ReasonDeadline
	}
	return ""
}

func (c *coordinator) stopped(parent context.Context) Reason {
	if parent.Err() != nil {
		return ReasonInterrupted
	}
	if !c.clock.Now().Before(c.deadline) {
		return ReasonDeadline
	}
	return ""
}

func (c *coordinator) adminError(err error) {
	c.result.AdminErrors++
	now := c.clock.Now()
	if !c.lastErrLog.IsZero() && now.Sub(c.lastErrLog) < c.cfg.ErrorLogInterval {
		c.suppressed++
		c.log.Debug("admin request failed", zap.String("phase", string(c.phase)), zap.Error(err))
		return
	}
	c.log.Warn("admin request failed; retrying", zap.String("phase", string(c.phase)),
		zap.String("error", err.Error()), zap.Int("suppressed", c.suppressed))
	c.lastErrLog, c.suppressed = now, 0
}

func (c *coordinator) enter(p Phase) {
	now := c.clock.Now()
	c.log.Info("phase", zap.String("phase", string(p)), zap.String("previous", string(c.phase)),
		zap.Int64("previous_ms", now.Sub(c.phaseStart).Milliseconds()),
		zap.Int64("elapsed_ms", now.Sub(c.start).Milliseconds()))
	c.phase, c.phaseStart = p, now
}

func (c *coordinator) finish(parent context.Context, reason Reason) Result {
	c.enter(PhaseDone)
	c.result.Reason = reason
	c.result.Degraded = c.cfg.Degraded
	// Elapsed is when the decision was made; the actions' own time is reported apart.
	c.result.Elapsed = c.clock.Now().Sub(c.start)
	actionsStart := c.clock.Now()
	if reason != ReasonInterrupted && !c.cfg.DryRun && len(c.cfg.Actions) > 0 {
		c.runActions(parent)
	}
	c.result.ActionsTook = c.clock.Now().Sub(actionsStart)
	fields := []zap.Field{
		zap.String("reason", string(reason)),
		zap.Int64("elapsed_ms", c.result.Elapsed.Milliseconds()),
		zap.String("signal", string(c.result.Signal)),
		zap.String("naming", string(c.result.Naming)),
		optionalField("requests_after_drain", c.result.RequestsAfterDrain),
		optionalField("active_at_end", c.result.ActiveAtEnd),
		zap.Int64("last_arrival_ms", c.result.LastArrival.Milliseconds()),
		zap.Int64("longest_gap_ms", c.result.LongestGap.Milliseconds()),
		zap.Int64("window_ms", c.result.Window.Milliseconds()),
		zap.String("window_term", string(c.result.WindowTerm)),
		zap.Bool("window_capped", c.result.WindowCapped),
		optionalField("rate_per_s", rate(c.result.Rate)),
		optionalField("open_streams", c.result.OpenStreams),
		zap.Int("polls", c.result.Polls),
		zap.Int("complete_reads", c.result.CompleteReads),
		zap.Int("admin_errors", c.result.AdminErrors),
		zap.Bool("drain_called", c.result.DrainCalled),
		zap.Bool("actions_run", c.result.ActionsRun),
		zap.Int64("actions_ms", c.result.ActionsTook.Milliseconds()),
		zap.Int("exit_code", c.result.ExitCode()),
	}
	if c.result.ActionErr != nil {
		fields = append(fields, zap.String("action_error", c.result.ActionErr.Error()))
	}
	fields = append(fields, c.clientFields()...)
	fields = append(fields, c.learntFields()...)
	if c.cfg.Reads != nil {
		fields = append(fields, c.cfg.Reads.FinalFields()...)
	}
	fields = append(fields, c.outcomeFields()...)
	fields = append(fields, c.riskFields()...)
	if c.result.WindowTerm == TermGaps || c.result.WindowTerm == TermRate {
		c.log.Warn("inbound traffic is sparse: its own pauses stretched the quiet window beyond --quiet; a sparse client that learns of the deletion later than --min-wait can still send after the app stopped",
			zap.Int64("window_ms", c.result.Window.Milliseconds()), zap.String("window_term", string(c.result.WindowTerm)),
			zap.Int64("longest_gap_ms", c.result.LongestGap.Milliseconds()), zap.Int64("min_wait_ms", c.cfg.MinWait.Milliseconds()))
	}
	if ce := c.log.Check(c.finalLevel(), "drain finished"); ce != nil {
		ce.Write(fields...)
	}
	return c.result
}

func ports(s mesh.Snapshot) []int {
	var out []int
	for _, e := range s.Endpoints {
		if e.Port != nil {
			out = append(out, *e.Port)
		}
	}
	return out
}

// rate is a rate for the final event: unknown (nil) when no rate was measured.
func rate(perSecond float64) *float64 {
	if perSecond <= 0 {
		return nil
	}
	return &perSecond
}

type optional struct{ v *float64 }

func (o optional) String() string {
	if o.v == nil {
		return "unknown"
	}
	return fmt.Sprint(*o.v)
}

// optionalField logs an unknown value as JSON null rather than 0.
func optionalField(key string, v *float64) zap.Field {
	if v == nil {
		return zap.Reflect(key, nil)
	}
	return zap.Float64(key, *v)
}
