package drain

import (
	"strings"
	"testing"
	"time"

	"github.com/meshdrain/meshdrain/pkg/mesh"
)

// traffic is one read's traffic: arrivals, in flight, drain closes (nil: not counted).
func traffic(arrivals, active float64, closes *float64) Traffic {
	return Traffic{Arrivals: f(arrivals), Active: f(active), DrainCloses: closes}
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
		reads      []Traffic
		want       Regime
		why        string
	}{
		{"drain at start", false, true, []Traffic{traffic(10, 0, f(0)), traffic(20, 0, f(0))}, RegimeA, "--drain-at start"},
		{"deferred, nothing closed", true, true, []Traffic{traffic(10, 0, nil), traffic(20, 0, nil), traffic(30, 0, nil)}, RegimeB, ""},
		{"deferred, the counter rose", true, true, []Traffic{traffic(10, 0, nil), traffic(20, 0, f(4)), traffic(30, 0, f(9))}, RegimeA,
			"rose by 9 before meshdrain's drain call): check the istio-proxy override (" + OverridesCheck},
		{"not exposed", true, false, []Traffic{traffic(10, 0, nil), traffic(20, 0, nil)}, RegimeUnknown, "add http.inbound_"},
		{"closes before the first read, no answer since", true, true, []Traffic{traffic(10, 0, f(3)), traffic(10, 0, f(3)), traffic(10, 0, f(3))}, RegimeUnknown,
			"had told 3 connections to close before the first read"},
		// Answered at the second read: the third, whose counter still stands, confirms it.
		{"closes before the first read, an answer without a close", true, true, []Traffic{traffic(10, 0, f(3)), traffic(11, 0, f(3)), traffic(11, 0, f(3))}, RegimeB, ""},
		// Answered at the last read only: its closes may have been read before the answer.
		{"closes before the first read, answered at the last read", true, true, []Traffic{traffic(10, 0, f(3)), traffic(10, 0, f(3)), traffic(11, 0, f(3))}, RegimeUnknown, "no answer before meshdrain's drain call showed it not draining"},
		// Still in flight is not answered.
		{"closes before the first read, a request in flight", true, true, []Traffic{traffic(10, 0, f(3)), traffic(11, 1, f(3)), traffic(11, 1, f(3))}, RegimeUnknown, "no answer before meshdrain's drain call showed it not draining"},
		{"closes before the first read, then more", true, true, []Traffic{traffic(10, 0, f(3)), traffic(11, 0, f(4)), traffic(11, 0, f(4))}, RegimeA, "rose by 1"},
	} {
		var w RegimeWatch
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
	seen := RegimeSeen{DrainAtEnd: true, Exposed: true, Rise: 2, Span: "since status's first sample"}
	if _, why := seen.Judge(); !strings.Contains(why, "rose by 2 since status's first sample") {
		t.Errorf("why %q", why)
	}
}

// closesFrom is a script whose sidecar tells every connection it answers on to close from
// drainFrom on (its own drain, at the deletion), with steady traffic until stop.
func closesFrom(drainFrom, stop time.Duration) func(time.Duration) (mesh.Snapshot, error) {
	steady := steadyTraffic(stop, 0)
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
		{"deferred", true, closesFrom(-1, 3*time.Second), RegimeB, ""},
		{"deferred, but the sidecar drains", true, closesFrom(0, 3*time.Second), RegimeA, "regime a: the sidecar's own drain was not deferred (http.<prefix>.downstream_cx_drain_close rose by"},
		{"drain at start", false, closesFrom(0, 3*time.Second), RegimeA, "--drain-at start"},
		{"no drain-close stats", true, func(at time.Duration) (mesh.Snapshot, error) {
			port := 8080
			return mesh.Snapshot{Naming: mesh.NamingIstio, Endpoints: []mesh.Endpoint{{Port: &port, Name: "inbound|8080||",
				ClusterRequestsTotal: f(1000 + 800*min(at, 3*time.Second).Seconds()), ClusterRequestsActive: f(0)}}}, nil
		}, RegimeUnknown, "downstream_cx_drain_close"},
	} {
		cfg := baseConfig()
		cfg.DrainAtEnd = tc.drainAtEnd
		res, _, _, logs := run(t, cfg, tc.script)
		if res.Regime != tc.want || field(logs, "drain finished", "drain_regime") != string(tc.want) {
			t.Errorf("%s: regime %q (event %q), want %q", tc.name, res.Regime, field(logs, "drain finished", "drain_regime"), tc.want)
		}
		if got := field(logs, "drain finished", "drain_regime_why"); got != res.RegimeWhy || (tc.why == "" && got != "") || !strings.Contains(got, tc.why) {
			t.Errorf("%s: drain_regime_why %q (result %q), want %q", tc.name, got, res.RegimeWhy, tc.why)
		}
	}
	// No watch, no regime: nothing was read to judge it by.
	res, _, _, logs := run(t, baseConfig(), func(time.Duration) (mesh.Snapshot, error) { return mesh.Snapshot{}, refused })
	if res.Regime != "" || field(logs, "drain finished", "drain_regime") != "" {
		t.Errorf("no sidecar: regime %q", res.Regime)
	}
}
