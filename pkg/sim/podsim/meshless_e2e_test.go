package podsim_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/meshdrain/meshdrain/pkg/sim/podsim"
)

// meshlessTestScenario is the mixed meshless shape at a quarter of its rate (each client's
// rate, and so its pauses, unchanged: a quarter of the clients), light on a shared machine.
func meshlessTestScenario(t *testing.T, scale float64) podsim.Scenario {
	t.Helper()
	sc := podsim.MeshlessScenario()
	sc.QPS, sc.TimeScale = 100, scale
	sc.Meshless.PerRequest, sc.Meshless.Holders, sc.Meshless.Ingress = 4, 3, 1
	sc.Clients = 8
	if err := sc.Validate(); err != nil {
		t.Fatal(err)
	}
	return sc
}

// runMeshless replays sc under strategies with the pod without a sidecar.
func runMeshless(t *testing.T, sc podsim.Scenario, strategies ...podsim.Strategy) []podsim.Result {
	t.Helper()
	spec, err := podsim.MeshlessPod(sc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(200*sc.TimeScale*float64(time.Second))+30*time.Second)
	defer cancel()
	results, err := podsim.Run(ctx, podsim.Options{Scenario: sc, Strategies: strategies, Sidecars: []podsim.SidecarSpec{spec}})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range results {
		t.Logf("time scale %g, %s: %d requests, lost %d %v, app stop %.2fs, floor %.2fs, last request %.2fs",
			sc.TimeScale, r.Strategy, r.Requests, r.ClientFailures, r.FailuresByKind, r.AppStopS, r.LastClientLagS, r.LastRequestS)
	}
	return results
}

// TestMeshlessPodOnRealSockets replays a pod without a sidecar on loopback: clients of every
// kind from their own addresses, the kubelet's probes from the node's. Without a preStop the
// app stops while clients still reach it, and they see refused connections (or the ingress's
// 502); a sleep past the last request to the pod loses nothing with a graceful app, which
// lets the keep-alive clients finish on their connections; the same sleep with an abrupt app
// cuts the requests in flight, reported as resets (the ingress's as 502s). What a sleep loses
// depends on when the clients sent, so it is judged on a replay whose clients kept pod time
// (untilTimely), or with their measured lateness allowed for.
func TestMeshlessPodOnRealSockets(t *testing.T) {
	if testing.Short() {
		t.Skip("real sockets and timers")
	}
	// Every request that reaches the pod whatever the strategy is sent before its client's
	// lag: the floor (the last lag) bounds them.
	floor := podsim.NewReport(meshlessTestScenario(t, 1), nil, nil, 0).Scenario.LastClientLagS
	past := time.Duration(math.Ceil(floor+2)) * time.Second
	strategies := []podsim.Strategy{{Kind: podsim.StrategyNone}, {Kind: podsim.StrategySleep, Sleep: past}}

	results := untilTimely(t, 0.25, func(scale float64, late []podsim.Result) []podsim.Result {
		run := strategies
		if late != nil {
			run = nil
			for _, r := range late {
				s, err := podsim.ParseStrategy(r.Strategy)
				if err != nil {
					t.Fatal(err)
				}
				run = append(run, s)
			}
		}
		return runMeshless(t, meshlessTestScenario(t, scale), run...)
	})
	none := results["none/no-sidecar"]
	if none.ClientFailures == 0 || none.FailuresByKind["connection refused"]+none.FailuresByKind["ingress 502"] == 0 {
		t.Errorf("none: lost %d %v; want refused connections or ingress 502s: clients reach the app after it stopped (floor %.2fs)",
			none.ClientFailures, none.FailuresByKind, none.LastClientLagS)
	}
	sleep := results[fmt.Sprintf("sleep:%s/no-sidecar", fmtSeconds(past))]
	switch {
	case len(sleep.Warnings) > 0 && sleep.Lateness.ClientSendS > 1:
		t.Logf("sleep:%s did not keep pod time even at time scale %g (clients %.2fs late): its losses are not judged", past, sleep.Scale, sleep.Lateness.ClientSendS)
	case sleep.ClientFailures != 0:
		t.Errorf("sleep:%s, past the last request to the pod (%.2fs), lost %d %v with a graceful app; want 0", past, sleep.LastRequestS, sleep.ClientFailures, sleep.FailuresByKind)
	}

	// An abrupt app: requests in flight are cut at SIGTERM, whatever the sleep. Long requests
	// keep enough of them in flight for the cut to meet some on any replay.
	abrupt := meshlessTestScenario(t, 0.25)
	abrupt.AppShutdown, abrupt.P99 = podsim.AppImmediate, 3*time.Second
	r := runMeshless(t, abrupt, podsim.Strategy{Kind: podsim.StrategySleep, Sleep: past})[0]
	if r.FailuresByKind["connection reset"]+r.FailuresByKind["ingress 502"] == 0 || r.FailuresByKind["connection refused"] != 0 {
		t.Errorf("abrupt app after sleep:%s: lost %v; want resets (and ingress 502s), no refused connection", past, r.FailuresByKind)
	}
}

// fmtSeconds is a whole-second duration as a strategy's name spells it.
func fmtSeconds(d time.Duration) string { return fmt.Sprintf("%ds", int(d.Seconds())) }

// TestMeshlessMeshdrainEndToEnd runs `meshdrain-sim simulate --mesh none` with the real
// meshdrain binary as the preStop (prestop --mesh none, reading the kernel in the simulator's
// own network namespace where the kernel allows one) and checks the claims of issue 28 for a
// pod without a sidecar: nothing lost with a graceful app; the keep-alive clients, which never
// learn, are named in the final event and do not keep the hook past the lag bound (plus its
// window, two polls and what the row measured). Timing is judged on a replay that kept pod
// time (untilTimely).
func TestMeshlessMeshdrainEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: builds the binaries and runs the simulator")
	}
	bin := buildMeshdrain(t)
	var report podsim.Report
	results := untilTimely(t, 0.25, func(scale float64, _ []podsim.Result) []podsim.Result {
		report = simulateReport(t, bin, scale, "--mesh", "none", "--strategy", "meshdrain", "--clients", "12", "--qps", "150")
		return report.Results
	})
	md, ok := results["meshdrain/no-sidecar"]
	if !ok || md.Meshdrain == nil {
		t.Fatalf("no meshdrain row with a final event: %+v", results)
	}
	raw, _ := json.Marshal(md.Meshdrain.Raw)
	t.Logf("time scale %g: stop %.2fs, floor %.2fs, lost %d %v; final event %s", md.Scale, md.AppStopS, md.LastClientLagS, md.ClientFailures, md.FailuresByKind, raw)
	late := len(md.Warnings) > 0 && md.Lateness.ClientSendS > 1
	if md.ClientFailures != 0 && !late {
		t.Errorf("meshdrain with a graceful app lost %d %v; want 0", md.ClientFailures, md.FailuresByKind)
	}
	if md.AppStopS < md.LastClientLagS {
		t.Errorf("meshdrain told the app to stop at %.2fs, before the last client learned at %.2fs", md.AppStopS, md.LastClientLagS)
	}
	m := report.Scenario.Meshless
	if m == nil || m.Holders == 0 {
		t.Fatalf("scenario %+v: want keep-alive clients", report.Scenario)
	}
	for i := m.PerRequest; i < m.PerRequest+m.Holders; i++ {
		if ip := fmt.Sprintf("127.0.0.%d", 2+i); !strings.Contains(string(raw), `"`+ip+`"`) {
			t.Errorf("keep-alive client %s is not named in the final event", ip)
		}
	}
	stopsByTheLagBound(t, md)
}

// stopsByTheLagBound checks that the keep-alive clients, which never learn, did not keep the
// hook past the lag bound plus its window, two polls and what the row measured.
func stopsByTheLagBound(t *testing.T, md replayed) {
	t.Helper()
	bound := argSeconds(t, md.Meshdrain.Args, "--eds-lag-bound") / md.Scale
	window, _ := md.Meshdrain.Raw["window_ms"].(float64)
	poll := argSeconds(t, md.Meshdrain.Args, "--poll") / md.Scale
	margin := window/1000/md.Scale + 2*poll
	if allow := stopAllowance(md, margin); md.AppStopS > bound+margin+0.1+allow {
		t.Errorf("meshdrain stopped the app at %.2fs, past the lag bound %.2fs + its window and two polls (%.2fs) + %.2fs for the delays it measured",
			md.AppStopS, bound, margin, allow)
	}
}

// argSeconds is a duration flag's value in args, in seconds.
func argSeconds(t *testing.T, args []string, flag string) float64 {
	t.Helper()
	for i := 0; i+1 < len(args); i++ {
		if args[i] == flag {
			d, err := time.ParseDuration(args[i+1])
			if err != nil {
				t.Fatalf("%s %q: %v", flag, args[i+1], err)
			}
			return d.Seconds()
		}
	}
	t.Fatalf("meshdrain ran without %s: %v", flag, args)
	return 0
}

// TestMeshlessAppMetricsEndToEnd is the same pod with the app's own request counter read
// beside the kernel (simulate --app-metrics: prestop --app-metrics on the app's own port,
// the probes' and the metrics' paths left out): nothing lost, the counter read at every poll
// and counted, the hook's own connections to the app's port never named as a client's, and
// the keep-alive clients still not keeping the hook past the lag bound.
func TestMeshlessAppMetricsEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: builds the binaries and runs the simulator")
	}
	bin := buildMeshdrain(t)
	results := untilTimely(t, 0.25, func(scale float64, _ []podsim.Result) []podsim.Result {
		return simulateReport(t, bin, scale, "--mesh", "none", "--strategy", "meshdrain", "--clients", "12", "--qps", "150", "--app-metrics").Results
	})
	md, ok := results["meshdrain/no-sidecar"]
	if !ok || md.Meshdrain == nil {
		t.Fatalf("no meshdrain row with a final event: %+v", results)
	}
	raw, _ := json.Marshal(md.Meshdrain.Raw)
	t.Logf("time scale %g: stop %.2fs, floor %.2fs, lost %d %v; final event %s", md.Scale, md.AppStopS, md.LastClientLagS, md.ClientFailures, md.FailuresByKind, raw)
	if late := len(md.Warnings) > 0 && md.Lateness.ClientSendS > 1; md.ClientFailures != 0 && !late {
		t.Errorf("meshdrain with a graceful app lost %d %v; want 0", md.ClientFailures, md.FailuresByKind)
	}
	reads, _ := md.Meshdrain.Raw["app_metrics_reads"].(float64)
	requests, _ := md.Meshdrain.Raw["app_requests"].(float64)
	// A read may time out on a busy machine (--connect-timeout is 0.5s at time scale 0.25).
	failed, _ := md.Meshdrain.Raw["app_metrics_failed"].(float64)
	if reads < 2 || requests < 1 || failed > reads/4 {
		t.Errorf("app metrics: %v reads, %v failed, %v requests: want the counter read at every poll and counting the clients' requests",
			reads, failed, requests)
	}
	for _, field := range []string{"clients_never_learn", "clients_opening_past_bound"} {
		if names, _ := json.Marshal(md.Meshdrain.Raw[field]); strings.Contains(string(names), `"127.0.0.1"`) {
			t.Errorf("%s names the hook's own address: %s", field, names)
		}
	}
	stopsByTheLagBound(t, md)
}
