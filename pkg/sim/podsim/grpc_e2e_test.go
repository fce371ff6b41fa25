package podsim_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/meshdrain/meshdrain/pkg/sim/podsim"
)

// On a grpc port (one multiplexed HTTP/2 connection per client) meshdrain loses nothing in
// either drain regime. Where the sidecar's drain is deferred (regime b) each client's
// connection, idle since the watch began or busy until its last stream, is closed by the
// client at its EDS update, and meshdrain sees clients leave; where the sidecar drains at the
// deletion (regime a) its GOAWAY goes to every connection that carries a request, which its
// client then closes, and the evidence must not decide (docs/facts.md §6b). Nothing here is a
// claim about how soon, so one replay is judged whatever the machine's load did to pod time.
func TestGRPCBothRegimes(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: builds the binary and runs the simulator")
	}
	bin := buildMeshdrain(t)
	tr, err := podsim.TrafficByName("grpc")
	if err != nil {
		t.Fatal(err)
	}
	// A light load (10 streams a second from each of 20 clients), as in the other end-to-end
	// tests that run the simulator in the test's own process.
	sc := tr.Apply(podsim.UserScenario())
	scale := timeScales(0.25)[0]
	sc.QPS, sc.Clients, sc.TimeScale, sc.Retries, sc.Seed, sc.MeshdrainBinary = 200, 20, scale, 0, 1, bin
	drains, err := podsim.RegimeASidecar(sc)
	if err != nil {
		t.Fatal(err)
	}
	deferred, err := podsim.RecommendedSidecar(sc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(480*scale*float64(time.Second))+60*time.Second)
	defer cancel()
	results, err := podsim.Run(ctx, podsim.Options{Scenario: sc, Strategies: []podsim.Strategy{{Kind: podsim.StrategyMeshdrain}}, Sidecars: []podsim.SidecarSpec{drains, deferred}})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range results {
		if r.ClientFailures != 0 {
			t.Errorf("%s: %d client failures, want 0", r.Sidecar, r.ClientFailures)
		}
		if r.Meshdrain == nil {
			t.Errorf("%s: no final event", r.Sidecar)
			continue
		}
		term, _ := r.Meshdrain.Raw["window_term"].(string)
		left, _ := r.Meshdrain.Raw["clients_left"].(float64)
		t.Logf("%s (%s): window_term %s, clients_left %.0f, stop %.2fs, floor %.2fs", r.Sidecar, r.DrainRegime, term, left, r.AppStopS, r.LastClientLagS)
		switch {
		case strings.HasPrefix(r.DrainRegime, "drain regime (b)"):
			if left == 0 {
				t.Errorf("%s, regime (b): no client seen to leave; each closes its connection at its EDS update", r.Sidecar)
			}
		case r.Meshdrain.RequestsAfterDrain > 0:
			if term == "clients-left" {
				t.Errorf("%s, regime (a): the window was set by clients-left although every connection that carried a request was sent a GOAWAY", r.Sidecar)
			}
		}
	}
}
