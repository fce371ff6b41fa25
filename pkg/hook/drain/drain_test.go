package drain

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/meshdrain/meshdrain/pkg/clock"
	"github.com/meshdrain/meshdrain/pkg/localhttp"
	"github.com/meshdrain/meshdrain/pkg/mesh"
	"github.com/meshdrain/meshdrain/pkg/mesh/envoy"
)

var t0 = time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)

// scriptedSidecar answers each poll from a script of pod time since the start.
type scriptedSidecar struct {
	clock  *clock.Fake
	script func(at time.Duration) (mesh.Snapshot, error)
	drains []mesh.DrainMode
	// drainedAt is when each drain call came, in pod time since t0.
	drainedAt []time.Duration
	polls     []time.Duration
	sels      []mesh.Selector
	// drainErr, when set, is what DrainListeners returns.
	drainErr error
}

func (s *scriptedSidecar) Inbound(_ context.Context, sel mesh.Selector) (mesh.Snapshot, error) {
	at := s.clock.Now().Sub(t0)
	s.polls = append(s.polls, at)
	s.sels = append(s.sels, sel)
	snap, err := s.script(at)
	if !sel.Completions {
		// Like Envoy behind the filter: completions are only sent when asked for.
		snap.CompletedRequestsTotal = nil
	}
	return snap, err
}

func (s *scriptedSidecar) DrainListeners(_ context.Context, mode mesh.DrainMode) error {
	s.drains = append(s.drains, mode)
	s.drainedAt = append(s.drainedAt, s.clock.Now().Sub(t0))
	return s.drainErr
}

func f(v float64) *float64 { return &v }

// httpSnap is an Istio sidecar with one HTTP port.
func httpSnap(total, active float64) mesh.Snapshot {
	port := 8080
	return mesh.Snapshot{Naming: mesh.NamingIstio, Endpoints: []mesh.Endpoint{{
		Port: &port, Name: "inbound|8080||", HTTPRequestsTotal: f(total), HTTPRequestsActive: f(active),
	}}}
}

// steadyTraffic is 800 requests a second until stop, then nothing; activeUntil keeps one
// request in flight after that.
func steadyTraffic(stop, activeUntil time.Duration) func(time.Duration) (mesh.Snapshot, error) {
	return func(at time.Duration) (mesh.Snapshot, error) {
		arrivals := at
		if arrivals > stop {
			arrivals = stop
		}
		active := 0.0
		if at < activeUntil {
			active = 1
		}
		return httpSnap(1000+800*arrivals.Seconds(), active), nil
	}
}

func baseConfig() Config {
	return Config{
		DrainMode:        mesh.DrainGraceful,
		Deadline:         24 * time.Second,
		Quiet:            time.Second,
		Poll:             200 * time.Millisecond,
		ConnectTimeout:   2 * time.Second,
		FallbackWait:     5 * time.Second,
		LatencyAllowance: time.Second,
	}
}

type recordingAction struct {
	runs  []time.Duration
	clock *clock.Fake
}

func (a *recordingAction) Run(context.Context) error {
	a.runs = append(a.runs, a.clock.Now().Sub(t0))
	return nil
}
func (a *recordingAction) String() string { return "record" }

func run(t *testing.T, cfg Config, script func(time.Duration) (mesh.Snapshot, error)) (Result, *scriptedSidecar, *recordingAction, *observer.ObservedLogs) {
	t.Helper()
	fake := clock.NewAutoFake(t0)
	core, logs := observer.New(zap.DebugLevel)
	cfg.Clock, cfg.Logger = fake, zap.New(core)
	action := &recordingAction{clock: fake}
	cfg.Actions = append(cfg.Actions, action)
	sidecar := &scriptedSidecar{clock: fake, script: script}
	res := Run(context.Background(), cfg, sidecar)
	return res, sidecar, action, logs
}

func within(t *testing.T, what string, got, lo, hi time.Duration) {
	t.Helper()
	if got < lo || got > hi {
		t.Errorf("%s = %v, want within [%v, %v]", what, got, lo, hi)
	}
}

func TestQuietAfterTrafficStops(t *testing.T) {
	cfg := baseConfig()
	res, sidecar, action, logs := run(t, cfg, steadyTraffic(3*time.Second, 0))
	if res.Reason != ReasonQuiet {
		t.Fatalf("reason = %s, want quiet", res.Reason)
	}
	// The last movement is seen at the first poll after 3s; done quiet later, within 2 polls.
	within(t, "elapsed", res.Elapsed, 3*time.Second+cfg.Quiet, 3*time.Second+cfg.Quiet+2*cfg.Poll)
	if len(sidecar.drains) != 1 || sidecar.drains[0] != mesh.DrainGraceful {
		t.Errorf("drains = %v, want one graceful", sidecar.drains)
	}
	if len(action.runs) != 1 || action.runs[0] != res.Elapsed {
		t.Errorf("action runs = %v, want once at %v", action.runs, res.Elapsed)
	}
	if res.Signal != mesh.SignalHTTPRequests || res.ActiveAtEnd == nil || *res.ActiveAtEnd != 0 {
		t.Errorf("result = %+v", res)
	}
	// 800/s for 3s after the drain call at t=0.
	if res.RequestsAfterDrain == nil || *res.RequestsAfterDrain != 2400 {
		t.Errorf("requests after drain = %v, want 2400", res.RequestsAfterDrain)
	}
	final := logs.FilterMessage("drain finished").All()
	if len(final) != 1 {
		t.Fatalf("final events = %d", len(final))
	}
	if fields := final[0].ContextMap(); fields["reason"] != "quiet" || fields["signal"] != "http-requests" || fields["exit_code"] != int64(0) {
		t.Errorf("final event fields = %v", fields)
	}
	if ReasonQuiet.ExitCode() != 0 {
		t.Error("quiet must exit 0")
	}
}

// A window that ends between two polls ends the wait when it ends, with one short poll, not
// at the next poll: the grid would add up to a poll interval to every stop.
func TestDecisionFallsWhenTheWindowEnds(t *testing.T) {
	cfg := baseConfig()
	cfg.Quiet = 1100 * time.Millisecond
	res, sidecar, _, _ := run(t, cfg, steadyTraffic(3*time.Second, 0))
	if res.Reason != ReasonQuiet {
		t.Fatalf("reason = %s, want quiet", res.Reason)
	}
	// The last movement is seen at the poll of 3s; the window ends 1.1s later, between the
	// polls of 4s and 4.2s.
	if want := 3*time.Second + cfg.Quiet; res.Elapsed != want {
		t.Errorf("elapsed = %v, want %v (polls %v)", res.Elapsed, want, sidecar.polls)
	}
	short := 0
	for i := 1; i < len(sidecar.polls); i++ {
		if sidecar.polls[i]-sidecar.polls[i-1] < cfg.Poll {
			short++
		}
	}
	if short > 1 {
		t.Errorf("%d polls closer than the poll interval, want at most 1: %v", short, sidecar.polls)
	}
}

func TestTrafficResumingInsideQuietWindowRestartsIt(t *testing.T) {
	cfg := baseConfig()
	script := func(at time.Duration) (mesh.Snapshot, error) {
		switch {
		case at <= 2*time.Second:
			return httpSnap(float64(at/time.Millisecond), 0), nil
		case at < 2600*time.Millisecond: // a gap shorter than the quiet window
			return httpSnap(2000, 0), nil
		case at <= 4*time.Second: // a late client's requests
			return httpSnap(2000+float64((at-2600*time.Millisecond)/time.Millisecond), 0), nil
		default:
			return httpSnap(3400, 0), nil
		}
	}
	res, _, _, _ := run(t, cfg, script)
	if res.Reason != ReasonQuiet {
		t.Fatalf("reason = %s", res.Reason)
	}
	// The pause from 2s to 2.6s is traffic's own gap: at 200ms polls it lasted less than 1s
	// (from the 1.8s poll to the 2.8s one) and the window becomes twice that (rule.go).
	if res.WindowTerm != TermGaps || res.Window != 2*time.Second {
		t.Errorf("window %v set by %q, want 2s set by the gaps term", res.Window, res.WindowTerm)
	}
	within(t, "elapsed", res.Elapsed, 4*time.Second+res.Window, 4*time.Second+res.Window+2*cfg.Poll)
	within(t, "last arrival", res.LastArrival, 4*time.Second, 4*time.Second+cfg.Poll)
}

func TestActiveRequestHoldsTheDecision(t *testing.T) {
	cfg := baseConfig()
	res, _, _, _ := run(t, cfg, steadyTraffic(2*time.Second, 6*time.Second))
	if res.Reason != ReasonQuiet {
		t.Fatalf("reason = %s", res.Reason)
	}
	within(t, "elapsed", res.Elapsed, 6*time.Second, 6*time.Second+cfg.Poll)
}

func TestMinWait(t *testing.T) {
	cfg := baseConfig()
	cfg.MinWait = 10 * time.Second
	res, _, _, _ := run(t, cfg, steadyTraffic(time.Second, 0))
	if res.Reason != ReasonQuiet {
		t.Fatalf("reason = %s", res.Reason)
	}
	within(t, "elapsed", res.Elapsed, 10*time.Second, 10*time.Second+cfg.Poll)
}

func TestCounterResetCountsAsMovement(t *testing.T) {
	cfg := baseConfig()
	script := func(at time.Duration) (mesh.Snapshot, error) {
		switch {
		case at < 2*time.Second:
			return httpSnap(500+float64(at/time.Millisecond), 0), nil // moving
		case at < 3*time.Second:
			return httpSnap(7, 0), nil // Envoy restarted: counters start again
		default:
			return httpSnap(7, 0), nil
		}
	}
	res, _, _, logs := run(t, cfg, script)
	if res.Reason != ReasonQuiet {
		t.Fatalf("reason = %s", res.Reason)
	}
	// The drop at 2s is movement: done no earlier than 2s + quiet.
	within(t, "elapsed", res.Elapsed, 2*time.Second+cfg.Quiet, 2*time.Second+cfg.Quiet+2*cfg.Poll)
	if logs.FilterMessageSnippet("went down").Len() != 1 {
		t.Error("reset not logged once")
	}
	// 1800 before the reset (at 1.8s) plus the 7 counted since it.
	if res.RequestsAfterDrain == nil || *res.RequestsAfterDrain != 1807 {
		t.Errorf("requests after drain = %v, want 1807", optional{res.RequestsAfterDrain})
	}
}

func TestDeadlineWhenTrafficNeverStops(t *testing.T) {
	cfg := baseConfig()
	res, _, action, _ := run(t, cfg, steadyTraffic(time.Hour, 0))
	if res.Reason != ReasonDeadline || res.Reason.ExitCode() != 3 {
		t.Fatalf("reason = %s", res.Reason)
	}
	if res.Elapsed != cfg.Deadline {
		t.Errorf("elapsed = %v, want exactly the deadline %v", res.Elapsed, cfg.Deadline)
	}
	if len(action.runs) != 1 {
		t.Error("the action must also run at the deadline")
	}
}

func TestDeadlineNotOvershotByAnOddPoll(t *testing.T) {
	cfg := baseConfig()
	cfg.Deadline = 1050 * time.Millisecond
	cfg.Poll = 300 * time.Millisecond
	res, _, _, _ := run(t, cfg, steadyTraffic(time.Hour, 0))
	if res.Reason != ReasonDeadline || res.Elapsed != cfg.Deadline {
		t.Fatalf("reason %s after %v, want deadline at %v", res.Reason, res.Elapsed, cfg.Deadline)
	}
}

var refused = fmt.Errorf("GET http://127.0.0.1:15000/stats/prometheus: %w", envoy.ErrRefused)

// Envoy killed under live traffic (Istio's default terminationDrainDuration): the user's own
// incident. It is not a success: its own reason and exit code, a WARN with the arrivals and
// the fix, and the action still runs (the app must stop now, Envoy is gone).
func TestSidecarGoneUnderTraffic(t *testing.T) {
	cfg := baseConfig()
	traffic := steadyTraffic(time.Hour, 0)
	script := func(at time.Duration) (mesh.Snapshot, error) {
		if at >= 5*time.Second { // pilot-agent killed Envoy at terminationDrainDuration
			return mesh.Snapshot{}, refused
		}
		return traffic(at)
	}
	res, _, action, logs := run(t, cfg, script)
	if res.Reason != ReasonSidecarGoneBusy || res.ExitCode() != 5 {
		t.Fatalf("reason = %s exit %d", res.Reason, res.ExitCode())
	}
	within(t, "elapsed", res.Elapsed, 5*time.Second, 5*time.Second+cfg.Poll)
	if len(action.runs) != 1 {
		t.Error("action not run")
	}
	// 800/s seen over the last 5 s before the refusal.
	if res.RecentArrivals == nil || *res.RecentArrivals < 3500 || *res.RecentArrivals > 4100 {
		t.Errorf("recent arrivals = %v", optional{res.RecentArrivals})
	}
	warn := logs.FilterMessageSnippet("went away while requests were still arriving").All()
	if len(warn) != 1 || warn[0].Level != zapcore.WarnLevel || !strings.Contains(fmt.Sprint(warn[0].ContextMap()["fix"]), "terminationDrainDuration") {
		t.Errorf("warning = %v", warn)
	}
	final := logs.FilterMessage("drain finished").All()[0]
	if final.Level != zapcore.WarnLevel || final.ContextMap()["exit_code"] != int64(5) || final.ContextMap()["arrivals_recent"] == nil {
		t.Errorf("final event %v %v", final.Level, final.ContextMap())
	}
}

// Envoy going away once the clients had left loses nothing: sidecar-gone, exit 0, and
// --min-wait still holds the app.
func TestSidecarGoneAfterTheClientsLeft(t *testing.T) {
	cfg := baseConfig()
	cfg.MinWait = 10 * time.Second
	traffic := steadyTraffic(2*time.Second, 0)
	script := func(at time.Duration) (mesh.Snapshot, error) {
		if at >= 5*time.Second {
			return mesh.Snapshot{}, refused
		}
		return traffic(at)
	}
	res, _, _, _ := run(t, cfg, script)
	if res.Reason != ReasonSidecarGone || res.ExitCode() != 0 {
		t.Fatalf("reason = %s", res.Reason)
	}
	within(t, "elapsed (min-wait)", res.Elapsed, 10*time.Second, 10*time.Second+cfg.Poll)
}

func TestNoSidecar(t *testing.T) {
	cfg := baseConfig()
	res, sidecar, action, _ := run(t, cfg, func(time.Duration) (mesh.Snapshot, error) { return mesh.Snapshot{}, refused })
	if res.Reason != ReasonNoSidecar || res.Reason.ExitCode() != 0 {
		t.Fatalf("reason = %s", res.Reason)
	}
	within(t, "elapsed", res.Elapsed, cfg.ConnectTimeout, cfg.ConnectTimeout+cfg.Poll)
	if len(sidecar.drains) != 0 {
		t.Error("drained a sidecar that is not there")
	}
	if len(action.runs) != 1 {
		t.Error("action not run")
	}
}

func TestBadAnswersAreNotNoSidecar(t *testing.T) {
	cfg := baseConfig()
	cfg.Deadline = 5 * time.Second
	status := &localhttp.StatusError{Method: "GET", URL: "/stats/prometheus", Code: 500, Body: "boom"}
	res, _, _, logs := run(t, cfg, func(time.Duration) (mesh.Snapshot, error) { return mesh.Snapshot{}, status })
	if res.Reason != ReasonDeadline {
		t.Fatalf("reason = %s, want deadline: an admin that answers is a sidecar", res.Reason)
	}
	// 25 polls over 5s, logged once then rate-limited (5s interval).
	if warn := logs.FilterMessage("admin request failed; retrying").Len(); warn > 2 {
		t.Errorf("transient error logged %d times at warn level, want rate limiting", warn)
	}
}

func TestTransientErrorsDoNotEndTheWaitEarly(t *testing.T) {
	cfg := baseConfig()
	traffic := steadyTraffic(3*time.Second, 0)
	script := func(at time.Duration) (mesh.Snapshot, error) {
		// The admin hangs (times out) from 3.2s to 4.4s, right when the counter is still.
		if at > 3200*time.Millisecond && at < 4400*time.Millisecond {
			return mesh.Snapshot{}, context.DeadlineExceeded
		}
		return traffic(at)
	}
	res, _, _, _ := run(t, cfg, script)
	if res.Reason != ReasonQuiet {
		t.Fatalf("reason = %s", res.Reason)
	}
	if res.Elapsed < 4400*time.Millisecond || res.AdminErrors == 0 {
		t.Errorf("elapsed %v with %d admin errors: must not decide while blind", res.Elapsed, res.AdminErrors)
	}
}

func TestNoSignalFallsBackToAFixedWait(t *testing.T) {
	cfg := baseConfig()
	res, sidecar, action, logs := run(t, cfg, func(time.Duration) (mesh.Snapshot, error) {
		return mesh.Snapshot{Naming: mesh.NamingUnknown}, nil
	})
	if res.Reason != ReasonNoSignal || res.Reason.ExitCode() != 4 {
		t.Fatalf("reason = %s", res.Reason)
	}
	if res.Elapsed != cfg.FallbackWait {
		t.Errorf("elapsed = %v, want the fallback wait %v", res.Elapsed, cfg.FallbackWait)
	}
	if len(action.runs) != 1 || len(sidecar.drains) != 0 {
		t.Errorf("actions %v drains %v", action.runs, sidecar.drains)
	}
	entry := logs.FilterMessageSnippet("no inbound request stats").All()
	if len(entry) != 1 || entry[0].ContextMap()["fix"] != envoy.MissingStatsHint {
		t.Error("no-signal error must name the annotation to add")
	}

	cfg.Deadline = 3 * time.Second
	res, _, _, _ = run(t, cfg, func(time.Duration) (mesh.Snapshot, error) { return mesh.Snapshot{}, nil })
	if res.Reason != ReasonNoSignal || res.Elapsed != 3*time.Second {
		t.Errorf("fallback not capped by the deadline: %s after %v", res.Reason, res.Elapsed)
	}
}

func TestCompletedRequestsGetTheLatencyAllowance(t *testing.T) {
	cfg := baseConfig()
	script := func(at time.Duration) (mesh.Snapshot, error) {
		if at > 2*time.Second {
			at = 2 * time.Second
		}
		return mesh.Snapshot{Naming: mesh.NamingIstio, CompletedRequestsTotal: f(float64(at / time.Millisecond))}, nil
	}
	res, sidecar, _, _ := run(t, cfg, script)
	if res.Reason != ReasonQuiet || res.Signal != mesh.SignalCompletedRequests {
		t.Fatalf("reason %s signal %s", res.Reason, res.Signal)
	}
	if sidecar.sels[0].Completions || !sidecar.sels[1].Completions || !sidecar.sels[len(sidecar.sels)-1].Completions {
		t.Error("completions must be asked for only once no request-level stat was found, then kept")
	}
	want := 2*time.Second + cfg.Quiet + cfg.LatencyAllowance
	within(t, "elapsed", res.Elapsed, want, want+2*cfg.Poll)
}

func TestConnectionsSignalWaitsForZero(t *testing.T) {
	cfg := baseConfig()
	script := func(at time.Duration) (mesh.Snapshot, error) {
		active := 3.0
		if at >= 4*time.Second {
			active = 0
		}
		return mesh.Snapshot{Naming: mesh.NamingIstio, Listener: &mesh.Listener{Address: "0.0.0.0_15006", ConnectionsActive: f(active)}}, nil
	}
	res, _, _, _ := run(t, cfg, script)
	if res.Reason != ReasonQuiet || res.Signal != mesh.SignalConnections {
		t.Fatalf("reason %s signal %s", res.Reason, res.Signal)
	}
	within(t, "elapsed", res.Elapsed, 4*time.Second, 4*time.Second+cfg.Poll)
}

func TestDryRunNeitherDrainsNorActs(t *testing.T) {
	cfg := baseConfig()
	cfg.DryRun = true
	res, sidecar, action, _ := run(t, cfg, steadyTraffic(time.Second, 0))
	if res.Reason != ReasonQuiet || len(sidecar.drains) != 0 || len(action.runs) != 0 || res.ActionsRun {
		t.Errorf("dry run: reason %s, drains %v, actions %v", res.Reason, sidecar.drains, action.runs)
	}
}

func TestDrainModes(t *testing.T) {
	for _, mode := range []mesh.DrainMode{mesh.DrainImmediate, mesh.DrainNone} {
		cfg := baseConfig()
		cfg.DrainMode = mode
		_, sidecar, _, _ := run(t, cfg, steadyTraffic(time.Second, 0))
		if mode == mesh.DrainNone && len(sidecar.drains) != 0 {
			t.Errorf("mode none called drain_listeners")
		}
		if mode == mesh.DrainImmediate && (len(sidecar.drains) != 1 || sidecar.drains[0] != mode) {
			t.Errorf("mode immediate: drains %v", sidecar.drains)
		}
	}
}

func TestDrainFailureIsNotFatal(t *testing.T) {
	fake := clock.NewAutoFake(t0)
	cfg := baseConfig()
	cfg.Clock = fake
	sidecar := &scriptedSidecar{clock: fake, script: steadyTraffic(time.Second, 0),
		drainErr: &localhttp.StatusError{Method: "POST", URL: "/drain_listeners", Code: 503}}
	res := Run(context.Background(), cfg, sidecar)
	if res.Reason != ReasonQuiet || res.DrainCalled {
		t.Errorf("reason %s drainCalled %v", res.Reason, res.DrainCalled)
	}
	sidecar = &scriptedSidecar{clock: clock.NewAutoFake(t0), script: steadyTraffic(time.Second, 0), drainErr: refused}
	cfg.Clock = sidecar.clock
	if res := Run(context.Background(), cfg, sidecar); res.Reason != ReasonSidecarGone {
		t.Errorf("refused drain call: reason %s, want sidecar-gone", res.Reason)
	}
}

func TestInterruptedRunsNoAction(t *testing.T) {
	fake := clock.NewAutoFake(t0)
	ctx, cancel := context.WithCancel(context.Background())
	action := &recordingAction{clock: fake}
	cfg := baseConfig()
	cfg.Clock, cfg.Actions = fake, []Action{action}
	traffic := steadyTraffic(time.Hour, 0)
	sidecar := &scriptedSidecar{clock: fake, script: func(at time.Duration) (mesh.Snapshot, error) {
		if at >= 2*time.Second {
			cancel() // SIGINT from the operator
		}
		return traffic(at)
	}}
	res := Run(ctx, cfg, sidecar)
	if res.Reason != ReasonInterrupted || res.Reason.ExitCode() != 130 {
		t.Fatalf("reason = %s", res.Reason)
	}
	if len(action.runs) != 0 || res.ActionsRun {
		t.Error("an interrupted drain must not act")
	}
}

func TestActionErrorsAreReported(t *testing.T) {
	cfg := baseConfig()
	cfg.Actions = []Action{failingAction{}}
	res, _, action, logs := run(t, cfg, steadyTraffic(time.Second, 0))
	if res.ActionErr == nil || len(action.runs) != 1 {
		t.Fatalf("action error %v, later actions run %v", res.ActionErr, action.runs)
	}
	if logs.FilterMessage("drain finished").All()[0].ContextMap()["action_error"] == nil {
		t.Error("final event lacks action_error")
	}
}

// With a manual clock and a goroutine, the loop must block on the poll timer between polls:
// nothing busy-waits.
func TestLoopWaitsOnTheClock(t *testing.T) {
	fake := clock.NewFake(t0)
	cfg := baseConfig()
	cfg.Clock = fake
	sidecar := &scriptedSidecar{clock: fake, script: steadyTraffic(time.Second, 0)}
	done := make(chan Result, 1)
	go func() { done <- Run(context.Background(), cfg, sidecar) }()
	for i := 0; i < 200; i++ {
		deadline := time.Now().Add(2 * time.Second)
		for fake.Waiters() == 0 {
			select {
			case res := <-done:
				if res.Reason != ReasonQuiet {
					t.Fatalf("reason = %s", res.Reason)
				}
				return
			default:
			}
			if time.Now().After(deadline) {
				t.Fatal("loop neither waiting nor finished")
			}
			time.Sleep(100 * time.Microsecond)
		}
		fake.Advance(cfg.Poll)
	}
	t.Fatal("not done after 200 polls")
}

func TestSparseTrafficIsReported(t *testing.T) {
	cfg := baseConfig()
	// One request every 300ms until 6s: each gap is well under the 1s quiet window.
	script := func(at time.Duration) (mesh.Snapshot, error) {
		if at > 6*time.Second {
			at = 6 * time.Second
		}
		return httpSnap(float64(at/(300*time.Millisecond)), 0), nil
	}
	res, _, _, logs := run(t, cfg, script)
	// The latest 15 requests took 4.5s: the rate term asks for 4.5s·(1e4^(1/15)−1) ≈ 3.8s of
	// silence.
	if res.Reason != ReasonQuiet || res.WindowTerm != TermRate {
		t.Fatalf("reason %s, window %v set by %q", res.Reason, res.Window, res.WindowTerm)
	}
	within(t, "window", res.Window, 3600*time.Millisecond, 4100*time.Millisecond)
	// The pause that ended the wait is the longest, and it is reported.
	if res.LongestGap < res.Window || res.LongestGap > res.Window+cfg.Poll {
		t.Errorf("longest gap %v, want the final pause (window %v)", res.LongestGap, res.Window)
	}
	final := logs.FilterMessage("drain finished").All()[0].ContextMap()
	if final["window_term"] != "rate" || final["longest_gap_ms"] != res.LongestGap.Milliseconds() || final["rate_per_s"] == nil {
		t.Errorf("final event %v", final)
	}
	if logs.FilterMessageSnippet("sparse").Len() != 1 {
		t.Error("sparse traffic not warned about")
	}
	res, _, _, logs = run(t, cfg, steadyTraffic(3*time.Second, 0))
	if res.WindowTerm != TermQuiet || res.LongestGap > cfg.Quiet+cfg.Poll || logs.FilterMessageSnippet("sparse").Len() != 0 {
		t.Errorf("steady traffic: window term %q, longest gap %v, warned %d times", res.WindowTerm, res.LongestGap, logs.FilterMessageSnippet("sparse").Len())
	}
}

// The signal changing under the watch (stats appearing or vanishing) is movement: the
// quiet window restarts even when the totals happen to be equal.
func TestSignalChangeRestartsTheQuietWindow(t *testing.T) {
	cfg := baseConfig()
	port := 8080
	// Requests until 1s (1500 in all); at 1.5s the HTTP stats vanish and the cluster's, at
	// the same total, are the signal.
	script := func(at time.Duration) (mesh.Snapshot, error) {
		e := mesh.Endpoint{Port: &port, ClusterRequestsTotal: f(1500), ClusterRequestsActive: f(0)}
		if at < 1500*time.Millisecond {
			e.HTTPRequestsTotal, e.HTTPRequestsActive = f(500+float64(min(at, time.Second)/time.Millisecond)), f(0)
		}
		return mesh.Snapshot{Naming: mesh.NamingIstio, Endpoints: []mesh.Endpoint{e}}, nil
	}
	res, _, _, _ := run(t, cfg, script)
	if res.Reason != ReasonQuiet || res.Signal != mesh.SignalClusterRequests {
		t.Fatalf("reason %s signal %s", res.Reason, res.Signal)
	}
	within(t, "elapsed", res.Elapsed, 1500*time.Millisecond+cfg.Quiet, 1500*time.Millisecond+cfg.Quiet+2*cfg.Poll)

	// Same signal (connections), but its counter vanishes from 1s to 1.4s: movement too.
	script = func(at time.Duration) (mesh.Snapshot, error) {
		l := &mesh.Listener{Address: "0.0.0.0_15006", ConnectionsActive: f(0)}
		if at < time.Second || at >= 1400*time.Millisecond {
			l.ConnectionsTotal = f(float64(min(at, 800*time.Millisecond) / time.Millisecond))
		}
		return mesh.Snapshot{Naming: mesh.NamingIstio, Listener: l}, nil
	}
	res, _, _, _ = run(t, cfg, script)
	if res.Reason != ReasonQuiet || res.Signal != mesh.SignalConnections {
		t.Fatalf("reason %s signal %s", res.Reason, res.Signal)
	}
	within(t, "elapsed after a vanishing counter", res.Elapsed, 1400*time.Millisecond+cfg.Quiet, 1400*time.Millisecond+cfg.Quiet+2*cfg.Poll)
}

func TestRefusedWhileAskingForCompletionsIsSidecarGone(t *testing.T) {
	cfg := baseConfig()
	calls := 0
	res, _, _, _ := run(t, cfg, func(time.Duration) (mesh.Snapshot, error) {
		calls++
		if calls == 1 {
			return mesh.Snapshot{Naming: mesh.NamingIstio}, nil
		}
		return mesh.Snapshot{}, refused
	})
	if res.Reason != ReasonSidecarGone {
		t.Errorf("reason = %s, want sidecar-gone", res.Reason)
	}
}

type failingAction struct{}

func (failingAction) Run(context.Context) error { return errors.New("app said no") }
func (failingAction) String() string            { return "failing" }

type slowAction struct {
	clock *clock.Fake
	took  time.Duration
}

func (a slowAction) Run(context.Context) error { a.clock.Advance(a.took); return nil }
func (a slowAction) String() string            { return "slow" }

func TestElapsedIsTheDecisionNotTheActions(t *testing.T) {
	fake := clock.NewAutoFake(t0)
	cfg := baseConfig()
	cfg.Clock = fake
	cfg.Actions = []Action{slowAction{clock: fake, took: 3 * time.Second}}
	res := Run(context.Background(), cfg, &scriptedSidecar{clock: fake, script: steadyTraffic(2*time.Second, 0)})
	within(t, "elapsed", res.Elapsed, 2*time.Second+cfg.Quiet, 2*time.Second+cfg.Quiet+2*cfg.Poll)
	if res.ActionsTook != 3*time.Second {
		t.Errorf("actions took %v, want 3s", res.ActionsTook)
	}
}

// The scripted sidecars of these tests stand for an Istio sidecar, so they name its fixes.
func (s *scriptedSidecar) Hints() mesh.Hints { return envoy.EnvoyHints() }
func (p *portSidecar) Hints() mesh.Hints     { return envoy.EnvoyHints() }
func (s *traceSidecar) Hints() mesh.Hints    { return envoy.EnvoyHints() }
