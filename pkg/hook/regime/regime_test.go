package regime

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/meshdrain/meshdrain/pkg/clock"
	"github.com/meshdrain/meshdrain/pkg/hook/drain"
	"github.com/meshdrain/meshdrain/pkg/mesh"
	"github.com/meshdrain/meshdrain/pkg/mesh/envoy"
)

var t0 = time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)

func f(v float64) *float64 { return &v }

// refused is an admin that does not answer: no read, no watch.
var refused = fmt.Errorf("GET http://127.0.0.1:15000/stats/prometheus: %w", envoy.ErrRefused)

// scriptedSidecar answers each poll from a script of pod time since the start.
type scriptedSidecar struct {
	clock  *clock.Fake
	script func(at time.Duration) (mesh.Snapshot, error)
}

func (s *scriptedSidecar) Inbound(context.Context, mesh.Selector) (mesh.Snapshot, error) {
	return s.script(s.clock.Now().Sub(t0))
}
func (s *scriptedSidecar) DrainListeners(context.Context, mesh.DrainMode) error { return nil }
func (s *scriptedSidecar) Hints() mesh.Hints                                    { return envoy.EnvoyHints() }

// judgedDrain is a drain's outcome with the regime prestop's final event says.
type judgedDrain struct {
	drain.Result
	Regime    Regime
	RegimeWhy string
}

// run runs one drain on the fake clock with the regime watched, as prestop runs it for an
// Envoy sidecar.
func run(t *testing.T, drainAtEnd bool, script func(time.Duration) (mesh.Snapshot, error)) (judgedDrain, *observer.ObservedLogs) {
	t.Helper()
	fake := clock.NewAutoFake(t0)
	core, logs := observer.New(zap.DebugLevel)
	reads := &Prestop{DrainAtEnd: drainAtEnd}
	cfg := drain.Config{DrainMode: mesh.DrainGraceful, Deadline: 24 * time.Second, Quiet: time.Second, Poll: 200 * time.Millisecond,
		ConnectTimeout: 2 * time.Second, FallbackWait: 5 * time.Second, LatencyAllowance: time.Second,
		DrainAtEnd: drainAtEnd, Clock: fake, Logger: zap.New(core), Reads: reads}
	res := judgedDrain{Result: drain.Run(context.Background(), cfg, &scriptedSidecar{clock: fake, script: script})}
	res.Regime, res.RegimeWhy = reads.Judge()
	return res, logs
}

// field is the value of key in the first event whose message contains msg, "" without one.
func field(logs *observer.ObservedLogs, msg, key string) string {
	for _, e := range logs.All() {
		if strings.Contains(e.Message, msg) {
			if v, ok := e.ContextMap()[key]; ok {
				return fmt.Sprint(v)
			}
		}
	}
	return ""
}

// steadyTraffic is an Istio sidecar with one HTTP port: 800 requests a second until stop,
// then nothing.
func steadyTraffic(stop time.Duration) func(time.Duration) (mesh.Snapshot, error) {
	return func(at time.Duration) (mesh.Snapshot, error) {
		port := 8080
		return mesh.Snapshot{Naming: mesh.NamingIstio, Endpoints: []mesh.Endpoint{{
			Port: &port, Name: "inbound|8080||", HTTPRequestsTotal: f(1000 + 800*min(at, stop).Seconds()), HTTPRequestsActive: f(0),
		}}}, nil
	}
}

// traffic is one read's traffic: arrivals, in flight, drain closes (nil: not counted).
func traffic(arrivals, active float64, closes *float64) drain.Traffic {
	return drain.Traffic{Arrivals: f(arrivals), Active: f(active), DrainCloses: closes}
}

// The regime from the reads: (b) only while the counter stands where it stood at the first
// read and that read said nothing drained, or an answer since showed it; (a) when it rose or
// meshdrain drains at its start; unknown when the counter is not exposed, or stood above zero
// with no answer to tell.
func TestJudgeRegime(t *testing.T) {
	for _, tc := range []struct {
		name       string
		drainAtEnd bool
		exposed    bool
		reads      []drain.Traffic
		want       Regime
		why        string
	}{
		{"drain at start", false, true, []drain.Traffic{traffic(10, 0, f(0)), traffic(20, 0, f(0))}, A, "--drain-at start"},
		{"deferred, nothing closed", true, true, []drain.Traffic{traffic(10, 0, nil), traffic(20, 0, nil), traffic(30, 0, nil)}, B, ""},
		{"deferred, the counter rose", true, true, []drain.Traffic{traffic(10, 0, nil), traffic(20, 0, f(4)), traffic(30, 0, f(9))}, A,
			"rose by 9 before meshdrain's drain call): check the istio-proxy override (" + OverridesCheck},
		{"not exposed", true, false, []drain.Traffic{traffic(10, 0, nil), traffic(20, 0, nil)}, Unknown, "add http.inbound_"},
		{"closes before the first read, no answer since", true, true, []drain.Traffic{traffic(10, 0, f(3)), traffic(10, 0, f(3)), traffic(10, 0, f(3))}, Unknown,
			"had told 3 connections to close before the first read"},
		// Answered at the second read: the third, whose counter still stands, confirms it.
		{"closes before the first read, an answer without a close", true, true, []drain.Traffic{traffic(10, 0, f(3)), traffic(11, 0, f(3)), traffic(11, 0, f(3))}, B, ""},
		// Answered at the last read only: its closes may have been read before the answer.
		{"closes before the first read, answered at the last read", true, true, []drain.Traffic{traffic(10, 0, f(3)), traffic(10, 0, f(3)), traffic(11, 0, f(3))}, Unknown, "no answer before meshdrain's drain call showed it not draining"},
		// Still in flight is not answered.
		{"closes before the first read, a request in flight", true, true, []drain.Traffic{traffic(10, 0, f(3)), traffic(11, 1, f(3)), traffic(11, 1, f(3))}, Unknown, "no answer before meshdrain's drain call showed it not draining"},
		{"closes before the first read, then more", true, true, []drain.Traffic{traffic(10, 0, f(3)), traffic(11, 0, f(4)), traffic(11, 0, f(4))}, A, "rose by 1"},
	} {
		var w Watch
		for _, read := range tc.reads {
			w.Observe(read, tc.exposed)
		}
		seen := w.Seen()
		seen.DrainAtEnd = tc.drainAtEnd
		regime, why := seen.Judge()
		if regime != tc.want || (tc.why == "" && why != "") || !strings.Contains(why, tc.why) {
			t.Errorf("%s: %s, %q; want %s with %q", tc.name, regime, why, tc.want, tc.why)
		}
	}
}

// The span a why names is the caller's: status's samples are not meshdrain's drain call.
func TestJudgeRegimeNamesTheSpan(t *testing.T) {
	seen := Seen{DrainAtEnd: true, Exposed: true, Rise: 2, Span: "since status's first sample"}
	if _, why := seen.Judge(); !strings.Contains(why, "rose by 2 since status's first sample") {
		t.Errorf("why %q", why)
	}
}

// closesFrom is a script whose sidecar tells every connection it answers on to close from
// drainFrom on (its own drain, at the deletion), with steady traffic until stop.
func closesFrom(drainFrom, stop time.Duration) func(time.Duration) (mesh.Snapshot, error) {
	steady := steadyTraffic(stop)
	return func(at time.Duration) (mesh.Snapshot, error) {
		snap, err := steady(at)
		closes := 0.0
		if drainFrom >= 0 && at > drainFrom {
			closes = 800 * (min(at, stop) - drainFrom).Seconds()
		}
		snap.Endpoints[0].HTTPDrainCloses = f(closes)
		return snap, err
	}
}

// The final event says the regime, and why when it is not (b).
func TestFinalEventSaysTheRegime(t *testing.T) {
	for _, tc := range []struct {
		name       string
		drainAtEnd bool
		script     func(time.Duration) (mesh.Snapshot, error)
		want       Regime
		why        string
	}{
		{"deferred", true, closesFrom(-1, 3*time.Second), B, ""},
		{"deferred, but the sidecar drains", true, closesFrom(0, 3*time.Second), A, "regime a: the sidecar's own drain was not deferred (http.<prefix>.downstream_cx_drain_close rose by"},
		{"drain at start", false, closesFrom(0, 3*time.Second), A, "--drain-at start"},
		{"no drain-close stats", true, func(at time.Duration) (mesh.Snapshot, error) {
			port := 8080
			return mesh.Snapshot{Naming: mesh.NamingIstio, Endpoints: []mesh.Endpoint{{Port: &port, Name: "inbound|8080||",
				ClusterRequestsTotal: f(1000 + 800*min(at, 3*time.Second).Seconds()), ClusterRequestsActive: f(0)}}}, nil
		}, Unknown, "downstream_cx_drain_close"},
	} {
		res, logs := run(t, tc.drainAtEnd, tc.script)
		if res.Regime != tc.want || field(logs, "drain finished", "drain_regime") != string(tc.want) {
			t.Errorf("%s: regime %q (event %q), want %q", tc.name, res.Regime, field(logs, "drain finished", "drain_regime"), tc.want)
		}
		if got := field(logs, "drain finished", "drain_regime_why"); got != res.RegimeWhy || (tc.why == "" && got != "") || !strings.Contains(got, tc.why) {
			t.Errorf("%s: drain_regime_why %q (result %q), want %q", tc.name, got, res.RegimeWhy, tc.why)
		}
	}
	// No watch, no regime: nothing was read to judge it by.
	res, logs := run(t, false, func(time.Duration) (mesh.Snapshot, error) { return mesh.Snapshot{}, refused })
	if res.Regime != "" || field(logs, "drain finished", "drain_regime") != "" {
		t.Errorf("no sidecar: regime %q", res.Regime)
	}
}
