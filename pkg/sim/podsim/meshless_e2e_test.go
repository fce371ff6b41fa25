package podsim_test

import (
	"context"
	"fmt"
	"math"
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
