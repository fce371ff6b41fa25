package podsim_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/meshdrain/meshdrain/pkg/sim/podsim"
)

// A pod asks for regime (b), meshdrain --drain-at end, but its sidecar still drains at the
// deletion (the override of its preStop is missing): clients then close right after each
// response that says Connection: close, and those closes are no departures. meshdrain sees
// the sidecar's drain closes, gives the per-client evidence up, says why in its final event,
// and silence decides: nothing is lost.
func TestDeferredDrainThatIsNotDeferred(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: builds the binary and runs the simulator")
	}
	bin := buildMeshdrain(t)
	sc := podsim.UserScenario()
	sc.QPS, sc.Clients, sc.TimeScale, sc.Retries, sc.Seed, sc.MeshdrainBinary = 400, 25, 0.25, 0, 1, bin
	spec, err := podsim.RecommendedSidecar(sc)
	if err != nil {
		t.Fatal(err)
	}
	spec.MeshdrainDrainAtEnd = true
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	results, err := podsim.Run(ctx, podsim.Options{Scenario: sc, Strategies: []podsim.Strategy{{Kind: podsim.StrategyMeshdrain}}, Sidecars: []podsim.SidecarSpec{spec}})
	if err != nil {
		t.Fatal(err)
	}
	r := results[0]
	if r.ClientFailures != 0 {
		t.Errorf("%d client failures, want 0", r.ClientFailures)
	}
	if r.Meshdrain == nil {
		t.Fatal("no final event")
	}
	ev, _ := r.Meshdrain.Raw["client_evidence"].(string)
	if !strings.HasPrefix(ev, "unavailable: the sidecar drains although meshdrain defers its drain") {
		t.Errorf("client_evidence %q: want the evidence given up because the sidecar drains", ev)
	}
	if term, _ := r.Meshdrain.Raw["window_term"].(string); term == "clients-left" {
		t.Errorf("window set by clients-left: the evidence decided though the sidecar drained")
	}
}
