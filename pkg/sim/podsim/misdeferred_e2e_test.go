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
	rows := untilTimely(t, 0.25, func(scale float64, _ []podsim.Result) []podsim.Result {
		// A light load (10 requests a second from each of 20 clients): this simulator runs
		// in the test's own process, race-built under -race, and any traffic shows the drain.
		sc := podsim.UserScenario()
		sc.QPS, sc.Clients, sc.TimeScale, sc.Retries, sc.Seed, sc.MeshdrainBinary = 200, 20, scale, 0, 1, bin
		spec, err := podsim.RegimeASidecar(sc)
		if err != nil {
			t.Fatal(err)
		}
		spec.MeshdrainDrainAtEnd = true
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(240*scale*float64(time.Second))+30*time.Second)
		defer cancel()
		results, err := podsim.Run(ctx, podsim.Options{Scenario: sc, Strategies: []podsim.Strategy{{Kind: podsim.StrategyMeshdrain}}, Sidecars: []podsim.SidecarSpec{spec}})
		if err != nil {
			t.Fatal(err)
		}
		r := results[0]
		if r.ClientFailures != 0 {
			t.Errorf("time scale %g: %d client failures, want 0", scale, r.ClientFailures)
		}
		if r.Meshdrain == nil {
			t.Fatal("no final event")
		}
		return results
	})
	// The scenario is the sidecar draining at the deletion while the clients still send to
	// a pod meshdrain watches. A replay that kept pod time is that; one that did not, even at
	// real time, is if pilot-agent's drain call was answered before the last client stopped
	// and requests arrived after meshdrain's watch began.
	r := rows["meshdrain/regime-a"]
	if l := r.Lateness; l.AgentDrainS == nil || *l.AgentDrainS >= r.LastClientLagS || r.Meshdrain.RequestsAfterDrain == 0 {
		t.Fatalf("pilot-agent's drain call at the deletion answered at %v (error %q; the last client stopped at %.2fs), %.0f requests after meshdrain's watch began, at time scale %g: the scenario did not happen",
			l.AgentDrainS, l.AgentDrainError, r.LastClientLagS, r.Meshdrain.RequestsAfterDrain, r.Scale)
	}
	ev, _ := r.Meshdrain.Raw["client_evidence"].(string)
	if !strings.HasPrefix(ev, "unavailable: the sidecar drains although meshdrain defers its drain") {
		t.Errorf("client_evidence %q: want the evidence given up because the sidecar drains", ev)
	}
	if term, _ := r.Meshdrain.Raw["window_term"].(string); term == "clients-left" {
		t.Errorf("window set by clients-left: the evidence decided though the sidecar drained")
	}
}
