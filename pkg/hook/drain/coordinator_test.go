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

// --min-wait is a floor on every path, not only the quiet rule's.
func TestMinWaitOnEveryPath(t *testing.T) {
	for name, script := range map[string]func(time.Duration) (mesh.Snapshot, error){
		"no-sidecar": func(time.Duration) (mesh.Snapshot, error) { return mesh.Snapshot{}, refused },
		"no-signal": func(time.Duration) (mesh.Snapshot, error) {
			return mesh.Snapshot{Naming: mesh.NamingUnknown}, nil
		},
	} {
		cfg := baseConfig()
		cfg.MinWait = 9 * time.Second
		res, _, action, _ := run(t, cfg, script)
		if string(res.Reason) != name {
			t.Errorf("%s: reason %s", name, res.Reason)
		}
		if res.Elapsed < cfg.MinWait || res.Elapsed > cfg.MinWait+cfg.Poll {
			t.Errorf("%s: elapsed %v, want --min-wait %v", name, res.Elapsed, cfg.MinWait)
		}
		if len(action.runs) != 1 || action.runs[0] < cfg.MinWait {
			t.Errorf("%s: action ran at %v", name, action.runs)
		}
	}
}

// withAdminCounter adds Envoy's admin request counter to a script: moving at every poll, or
// frozen from `from` on (with the inbound counters frozen too, as a cache would show them).
func withAdminCounter(script func(time.Duration) (mesh.Snapshot, error), frozenFrom time.Duration) func(time.Duration) (mesh.Snapshot, error) {
	polls := 0.0
	var frozen *mesh.Snapshot
	return func(at time.Duration) (mesh.Snapshot, error) {
		if frozenFrom > 0 && at >= frozenFrom && frozen != nil {
			return *frozen, nil
		}
		snap, err := script(at)
		polls++
		snap.AdminRequestsTotal = f(polls)
		if frozenFrom > 0 && at >= frozenFrom {
			frozen = &snap
		}
		return snap, err
	}
}

// A cache in front of the admin port replays one answer while traffic goes on: the admin
// request counter standing still gives it away, and the frozen polls count as admin errors,
// never as the quiet the inbound counter seems to show.
func TestFrozenAdminCounterIsNeverQuiet(t *testing.T) {
	cfg := baseConfig()
	cfg.Deadline = 6 * time.Second
	traffic := steadyTraffic(time.Hour, 0)
	res, _, _, logs := run(t, cfg, withAdminCounter(traffic, 2*time.Second))
	if res.Reason != ReasonDeadline || res.FrozenAnswers == 0 || res.AdminErrors < res.FrozenAnswers {
		t.Fatalf("reason %s, frozen %d, admin errors %d: want deadline, every frozen poll an admin error", res.Reason, res.FrozenAnswers, res.AdminErrors)
	}
	if logs.FilterMessageSnippet("admin request failed").Len() == 0 {
		t.Error("frozen answers not logged")
	}
	// The same trace with a live admin: quiet once the traffic stops.
	res, _, _, _ = run(t, baseConfig(), withAdminCounter(steadyTraffic(2*time.Second, 0), 0))
	if res.Reason != ReasonQuiet || res.FrozenAnswers != 0 {
		t.Errorf("live admin: reason %s, frozen %d", res.Reason, res.FrozenAnswers)
	}
}

// uptimeSidecar adds /server_info's uptime to a scripted sidecar: whole seconds of the fake
// clock since t0 (as Envoy's time_t difference), frozen from frozenFrom on; notFound answers
// 404 as an admin without /server_info would.
type uptimeSidecar struct {
	*scriptedSidecar
	frozenFrom time.Duration
	notFound   bool
	reads      int
	last       time.Duration
}

func (u *uptimeSidecar) Uptime(context.Context) (time.Duration, error) {
	u.reads++
	if u.notFound {
		return 0, &localhttp.StatusError{Method: "GET", URL: "/server_info", Code: 404}
	}
	at := u.clock.Now().Sub(t0)
	if u.frozenFrom > 0 && at >= u.frozenFrom {
		return u.last, nil
	}
	u.last = at.Truncate(time.Second) + 100*time.Second
	return u.last, nil
}

func runUptime(t *testing.T, cfg Config, u *uptimeSidecar) (Result, *observer.ObservedLogs) {
	t.Helper()
	fake := clock.NewAutoFake(t0)
	core, logs := observer.New(zap.DebugLevel)
	cfg.Clock, cfg.Logger = fake, zap.New(core)
	u.scriptedSidecar.clock = fake
	return Run(context.Background(), cfg, u), logs
}

// Without the admin counter (Istio's default stats), a quiet decision needs /server_info's
// uptime to have moved across the window: frozen answers never pass for quiet.
func TestFrozenUptimeIsNeverQuiet(t *testing.T) {
	cfg := baseConfig()
	cfg.Deadline = 8 * time.Second
	// The inbound counters stop at 2 s because the cache froze there, not because the
	// clients left.
	frozen := &uptimeSidecar{scriptedSidecar: &scriptedSidecar{script: steadyTraffic(2*time.Second, 0)}, frozenFrom: 2 * time.Second}
	res, _ := runUptime(t, cfg, frozen)
	if res.Reason != ReasonDeadline || res.FrozenAnswers == 0 {
		t.Fatalf("frozen uptime: reason %s, frozen answers %d", res.Reason, res.FrozenAnswers)
	}

	// Fast polls: the first quiet check comes well within a second of the anchor, and every
	// later check within a poll of the one before; the frozen uptime must still show once a
	// second has passed since the value was first read.
	fast := cfg
	fast.Quiet, fast.Poll = 300*time.Millisecond, 50*time.Millisecond
	frozen = &uptimeSidecar{scriptedSidecar: &scriptedSidecar{script: steadyTraffic(100*time.Millisecond, 0)}, frozenFrom: 100 * time.Millisecond}
	res, _ = runUptime(t, fast, frozen)
	if res.Reason != ReasonDeadline || res.FrozenAnswers == 0 {
		t.Fatalf("frozen uptime, fast polls: reason %s, frozen answers %d", res.Reason, res.FrozenAnswers)
	}

	live := &uptimeSidecar{scriptedSidecar: &scriptedSidecar{script: steadyTraffic(2*time.Second, 0)}}
	res, _ = runUptime(t, cfg, live)
	if res.Reason != ReasonQuiet || res.FrozenAnswers != 0 {
		t.Fatalf("live uptime: reason %s, frozen %d", res.Reason, res.FrozenAnswers)
	}
	// One reading before the watch and one at the decision: no /server_info poll storm.
	if live.reads > 3 {
		t.Errorf("uptime read %d times", live.reads)
	}

	// A sub-second quiet window that ends before the uptime's next step (the anchor was read
	// at 0 s, uptime 100 s) waits for that step at 1 s: until then nothing proves the answers
	// fresh.
	short := cfg
	short.Quiet, short.Poll = 300*time.Millisecond, 50*time.Millisecond
	live = &uptimeSidecar{scriptedSidecar: &scriptedSidecar{script: steadyTraffic(300*time.Millisecond, 0)}}
	res, _ = runUptime(t, short, live)
	if res.Reason != ReasonQuiet || res.Elapsed < time.Second || res.Elapsed > time.Second+short.Poll {
		t.Errorf("short window: reason %s after %v, want quiet at the 1 s uptime step", res.Reason, res.Elapsed)
	}

	// No /server_info at all: warned once, then the rule decides alone.
	none := &uptimeSidecar{scriptedSidecar: &scriptedSidecar{script: steadyTraffic(2*time.Second, 0)}, notFound: true}
	res, logs := runUptime(t, cfg, none)
	if res.Reason != ReasonQuiet || logs.FilterMessageSnippet("cannot be checked for freshness").Len() != 1 {
		t.Errorf("no server_info: reason %s", res.Reason)
	}
}

func TestProgressEvents(t *testing.T) {
	cfg := baseConfig()
	res, _, _, logs := run(t, cfg, steadyTraffic(17*time.Second, 0))
	if res.Reason != ReasonQuiet {
		t.Fatalf("reason %s", res.Reason)
	}
	events := logs.FilterMessage("waiting").All()
	// 18.2 s of watch at one event per 5 s: 3 events, not one per poll.
	if len(events) != 3 {
		t.Fatalf("%d progress events, want 3", len(events))
	}
	first := events[0].ContextMap()
	if events[0].Level != zapcore.InfoLevel || first["arrivals_since_last"] != 4000.0 || first["active"] != 0.0 || first["left_ms"] == nil {
		t.Errorf("progress event %v", first)
	}
}

func TestWeakSignalIsNamedWithTheFix(t *testing.T) {
	cfg := baseConfig()
	res, _, _, logs := run(t, cfg, func(at time.Duration) (mesh.Snapshot, error) {
		return mesh.Snapshot{Naming: mesh.NamingIstio, CompletedRequestsTotal: f(float64(min(at, 2*time.Second) / time.Millisecond))}, nil
	})
	if res.Signal != mesh.SignalCompletedRequests {
		t.Fatalf("signal %s", res.Signal)
	}
	weak := logs.FilterMessageSnippet("weak inbound signal").All()
	if len(weak) != 1 || weak[0].ContextMap()["fix"] != envoy.MissingStatsHint {
		t.Errorf("weak signal warnings: %v", weak)
	}
}

// portSidecar answers like Envoy behind the filter: a selected port without stats is an
// endpoint with nothing in it (the normaliser creates it), the others exist only unselected.
type portSidecar struct {
	clock *clock.Fake
	ports []int // the inbound ports the sidecar has
}

func (p *portSidecar) Inbound(_ context.Context, sel mesh.Selector) (mesh.Snapshot, error) {
	snap := mesh.Snapshot{Naming: mesh.NamingIstio}
	has := map[int]bool{}
	for _, port := range p.ports {
		has[port] = true
	}
	wanted := sel.Ports
	if len(wanted) == 0 {
		wanted = p.ports
	}
	at := p.clock.Now().Sub(t0)
	for _, port := range wanted {
		port := port
		e := mesh.Endpoint{Port: &port, Name: fmt.Sprintf("inbound|%d||", port)}
		if has[port] {
			e.HTTPRequestsTotal, e.HTTPRequestsActive = f(float64(min(at, time.Second)/time.Millisecond)), f(0)
		}
		snap.Endpoints = append(snap.Endpoints, e)
	}
	if sel.Completions {
		snap.CompletedRequestsTotal = f(42) // pod-wide: must not stand in for a wrong --port
	}
	return snap, nil
}

func (p *portSidecar) DrainListeners(context.Context, mesh.DrainMode) error { return nil }

func TestPortWithoutInboundEndpoint(t *testing.T) {
	for _, tc := range []struct {
		ports  []int
		reason Reason
	}{
		{[]int{9999}, ReasonNoSignal},
		{[]int{8080, 9999}, ReasonQuiet},
	} {
		fake := clock.NewAutoFake(t0)
		core, logs := observer.New(zap.DebugLevel)
		cfg := baseConfig()
		cfg.Clock, cfg.Logger = fake, zap.New(core)
		cfg.Selector.Ports = tc.ports
		res := Run(context.Background(), cfg, &portSidecar{clock: fake, ports: []int{8080, 9090}})
		if res.Reason != tc.reason {
			t.Errorf("--port %v: reason %s, want %s", tc.ports, res.Reason, tc.reason)
		}
		errs := logs.FilterMessageSnippet("no inbound endpoint").All()
		if len(errs) != 1 || errs[0].Level != zapcore.ErrorLevel || fmt.Sprint(errs[0].ContextMap()["inbound_ports_found"]) != "[8080 9090]" {
			t.Errorf("--port %v: error events %v", tc.ports, errs)
		}
		if tc.reason == ReasonNoSignal {
			fix := logs.FilterMessageSnippet("falling back").All()
			if len(fix) != 1 || !strings.Contains(fmt.Sprint(fix[0].ContextMap()["fix"]), "[8080 9090]") {
				t.Errorf("no-signal fix does not name the ports: %v", fix)
			}
		}
	}
}

// deadlineAction records its context's deadline.
type deadlineAction struct{ deadline time.Time }

func (a *deadlineAction) Run(ctx context.Context) error {
	a.deadline, _ = ctx.Deadline()
	return nil
}
func (a *deadlineAction) String() string { return "deadline probe" }

// --grace-period 4s --app-drain 0s: the deadline is 3 s and the actions' 2 s timeout would
// end at 5 s, past the grace period. It is cut to end 0.5 s before it, with a warning.
func TestActionTimeoutIsCutToTheGracePeriod(t *testing.T) {
	cfg := baseConfig()
	cfg.GracePeriod, cfg.Deadline, cfg.ActionTimeout = 4*time.Second, 3*time.Second, 2*time.Second
	probe := &deadlineAction{}
	cfg.Actions = []Action{probe}
	before := time.Now()
	res, _, _, logs := run(t, cfg, steadyTraffic(time.Hour, 0))
	after := time.Now()
	if res.Reason != ReasonDeadline {
		t.Fatalf("reason %s", res.Reason)
	}
	// The actions' context is made on the wall clock somewhere between before and after, so
	// the timeout it got is within [deadline − after, deadline − before]: that range must
	// hold the 0.5 s left, however long a busy machine took over the run.
	const left = 4*time.Second - DefaultActionMargin - 3*time.Second
	if probe.deadline.IsZero() || probe.deadline.Sub(after) > left || probe.deadline.Sub(before) < left {
		t.Errorf("action got between %v and %v, want the %v left before the grace period's margin", probe.deadline.Sub(after), probe.deadline.Sub(before), left)
	}
	if logs.FilterMessageSnippet("timeout cut").Len() != 1 {
		t.Error("the cut was not warned about")
	}

	// No time left at all: the actions do not run, and that is an action failure.
	cfg.Deadline = 4 * time.Second
	res, _, action, logs := run(t, cfg, steadyTraffic(time.Hour, 0))
	if res.ActionErr == nil || len(action.runs) != 0 || logs.FilterMessageSnippet("actions not run").FilterField(zap.Strings("actions", []string{"deadline probe", "record"})).Len() != 1 {
		t.Errorf("action error %v, runs %v", res.ActionErr, action.runs)
	}
}

func TestFailedActionIsAnError(t *testing.T) {
	cfg := baseConfig()
	cfg.Actions = []Action{failingAction{}}
	res, _, _, logs := run(t, cfg, steadyTraffic(time.Second, 0))
	if res.ExitCode() != ExitActionFailed {
		t.Errorf("exit %d", res.ExitCode())
	}
	failed := logs.FilterMessage("action failed").All()
	if len(failed) != 1 || failed[0].Level != zapcore.ErrorLevel {
		t.Errorf("action failure events %v", failed)
	}
	if final := logs.FilterMessage("drain finished").All(); final[0].Level != zapcore.ErrorLevel {
		t.Errorf("final event at %v", final[0].Level)
	}
}

func TestStartedEventListsActionsAndSettings(t *testing.T) {
	cfg := baseConfig()
	cfg.Settings = []Setting{{Name: "signal", Value: "TERM", Source: "env MESHDRAIN_SIGNAL"}, {Name: "quiet", Value: "1s", Source: "default"}}
	_, _, _, logs := run(t, cfg, steadyTraffic(time.Second, 0))
	started := logs.FilterMessage("drain started").All()[0].ContextMap()
	if fmt.Sprint(started["actions"]) != "[record]" {
		t.Errorf("actions %v", started["actions"])
	}
	settings, _ := started["settings"].(map[string]any)
	signal, _ := settings["signal"].(map[string]any)
	if signal["from"] != "env MESHDRAIN_SIGNAL" || signal["value"] != "TERM" {
		t.Errorf("settings %v", started["settings"])
	}
}

// The exit-code contract has one source: every reason's code comes from the table.
func TestReasonTable(t *testing.T) {
	seen := map[Reason]bool{}
	for _, info := range Reasons() {
		if seen[info.Reason] || info.When == "" || info.Reason.ExitCode() != info.Code {
			t.Errorf("table row %+v", info)
		}
		seen[info.Reason] = true
	}
	for _, r := range []Reason{ReasonQuiet, ReasonSidecarGone, ReasonSidecarGoneBusy, ReasonNoSidecar, ReasonDeadline, ReasonNoSignal, ReasonInterrupted, ReasonConfigError} {
		if !seen[r] {
			t.Errorf("%s missing from the table", r)
		}
	}
}

func TestFailSafeHoldsThenExits2(t *testing.T) {
	fake := clock.NewAutoFake(t0)
	core, logs := observer.New(zap.DebugLevel)
	res := FailSafe(context.Background(), FailSafeConfig{
		Problems: []error{errors.New("--poll 1ns: below 20ms"), errors.New("MESHDRAIN_GRACEPERIOD: unknown variable")},
		Hold:     5 * time.Second, Clock: fake, Logger: zap.New(core),
	})
	if res.Reason != ReasonConfigError || res.ExitCode() != 2 || res.Elapsed != 5*time.Second {
		t.Fatalf("reason %s exit %d after %v", res.Reason, res.ExitCode(), res.Elapsed)
	}
	if logs.FilterMessage("configuration error").Len() != 2 {
		t.Error("each problem must be logged")
	}
	all := logs.All()
	final := all[len(all)-1]
	if final.Message != "drain finished" || final.ContextMap()["reason"] != "config-error" || final.ContextMap()["exit_code"] != int64(2) {
		t.Errorf("last event %s %v", final.Message, final.ContextMap())
	}

	// Interrupted: the hold ends at once, the exit code stays 2.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	res = FailSafe(ctx, FailSafeConfig{Problems: []error{errors.New("x")}, Hold: time.Hour, Clock: clock.NewFake(t0)})
	if res.ExitCode() != 2 || res.Elapsed != 0 {
		t.Errorf("interrupted hold: exit %d after %v", res.ExitCode(), res.Elapsed)
	}
}

// An unusable log file does not stop the drain, but the exit code says it (2 over 0 and 1).
func TestDegradedDrainExits2(t *testing.T) {
	cfg := baseConfig()
	cfg.Degraded = errors.New("open --log-file /proc/1/fd/1: permission denied")
	res, _, _, logs := run(t, cfg, steadyTraffic(time.Second, 0))
	if res.Reason != ReasonQuiet || res.ExitCode() != 2 {
		t.Errorf("reason %s exit %d", res.Reason, res.ExitCode())
	}
	if final := logs.FilterMessage("drain finished").All()[0]; final.ContextMap()["config_error"] == nil || final.ContextMap()["exit_code"] != int64(2) {
		t.Errorf("final event %v", final.ContextMap())
	}
	cfg.Deadline = 2 * time.Second
	if res, _, _, _ := run(t, cfg, steadyTraffic(time.Hour, 0)); res.ExitCode() != 3 {
		t.Errorf("deadline while degraded: exit %d, want the deadline's 3", res.ExitCode())
	}
}
