package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"strings"

	"github.com/meshdrain/meshdrain/pkg/sim/podsim"
)

// The results keys of meshdrain behind plan's other routes (the matrix's own "meshdrain" is
// plan's default: regime (b), classic): regime (b) on a native sidecar, and the opt-out,
// regime (a) (plan --defer-sidecar-drain=false: the sidecar drains at the deletion), which
// was plan's default route before regime (b).
const (
	native  = "meshdrain/native"
	regimeA = "meshdrain/regime-a"
)

// runRoutes replays one shape and seed with meshdrain behind plan's native route and its
// opt-out, in one podsim.Run (so that one run's waiting overlaps the next one's traffic).
func (m matrix) runRoutes(ctx context.Context, sc podsim.Scenario) ([]podsim.Result, error) {
	b, err := podsim.RecommendedNativeSidecar(sc)
	if err != nil {
		return nil, err
	}
	a, err := podsim.RegimeASidecar(sc)
	if err != nil {
		return nil, err
	}
	results, err := podsim.Run(ctx, podsim.Options{Scenario: sc, Strategies: []podsim.Strategy{{Kind: podsim.StrategyMeshdrain}}, Sidecars: []podsim.SidecarSpec{b, a}})
	for i := range results {
		results[i].Strategy = map[string]string{b.Name: native, a.Name: regimeA}[results[i].Sidecar]
	}
	return results, err
}

// The sleeps meshdrain is set against are those people write in a preStop: 5, 10, 15 s. The
// best of them is chosen in hindsight from the recorded traffic, so no rule can be expected to
// match it, only to come within a quiet window and a poll of it (sleepSlack); the sleep plan
// would write from the same lag bound is the one a user would have guessed without meshdrain.
const (
	sleepGrid  = 5.0
	sleepSlack = 1.2
)

// lastRequest is the latest request sent to the pod over the runs, pod seconds.
func lastRequest(rs []podsim.Result) float64 {
	last := 0.0
	for _, r := range rs {
		last = max(last, r.LastRequestS)
	}
	return last
}

// bestCleanSleep is the shortest sleep on the grid that loses nothing over the seeds,
// replayed from the recorded traffic rather than run, and never 0 (that is no preStop). Behind
// a sidecar that outlives the app (the recommended one), a sleep loses exactly the requests
// sent after it ends; without a sidecar, with a graceful app, exactly those whose clients had
// not yet learned (a keep-alive client's later requests ride its connection until the app
// closes it, and its next connection goes where its synced node sends it;
// TestMeshlessPodOnRealSockets in pkg/sim/podsim checks that on real sockets). Either way it
// must last past the last request sent to the pod in every seed.
func bestCleanSleep(rs []podsim.Result) float64 {
	return sleepGrid * math.Max(1, math.Ceil((lastRequest(rs)+1e-9)/sleepGrid))
}

// planSleepCell is the plan's sleep, flagged where it would lose requests in some seed (it
// ends before the last request sent to the pod).
func planSleepCell(r row, rs []podsim.Result) string {
	if r.planSleep <= 0 {
		return "-"
	}
	cell := fmt.Sprintf("%.0fs", r.planSleep)
	if len(rs) > 0 && lastRequest(rs) >= r.planSleep {
		cell += " (loses requests)"
	}
	return cell
}

// evidenceOf is the share of clients that left with deterministic evidence in one run, and
// the counts behind it, from meshdrain's final event.
func evidenceOf(r podsim.Result) (left, silence, holding int, ok bool) {
	if r.Meshdrain == nil || r.Meshdrain.Raw["clients_left"] == nil {
		return 0, 0, 0, false
	}
	num := func(k string) int { v, _ := r.Meshdrain.Raw[k].(float64); return int(v) }
	return num("clients_left"), num("clients_by_silence"), num("clients_holding"), true
}

// printEvidence writes the per-client evidence table: both drain regimes against the best
// fixed sleep that loses nothing, as a ratio of app-stop times.
func printEvidence(w io.Writer, rows []row) {
	fmt.Fprintf(w, "\nPer-client evidence: regime (a) the sidecar drains at the deletion (plan --defer-sidecar-drain=false, classic); regime (b) its\n")
	fmt.Fprintf(w, "drain is deferred until meshdrain decides (plan's default: istio-proxy's preStop meshdrain hold, classic). Best sleep: the shortest\n")
	fmt.Fprintf(w, "preStop sleep on a %.0f s grid that loses nothing over the seeds, replayed from the recorded traffic. Ratio: meshdrain's\n", sleepGrid)
	fmt.Fprintf(w, "app-stop time / the best sleep. Plan's sleep: the sleep that what plan is told gives, its lag bound in whole seconds\n")
	fmt.Fprintf(w, "(flagged where it ends before the last request of some seed); vs plan: app-stop time / it. Left: clients that left with\n")
	fmt.Fprintf(w, "deterministic evidence / all. Targets: 0 lost; stop ≤ best sleep + %.1fs; in regime (b), sparse, clients-500,\n", sleepSlack)
	fmt.Fprintf(w, "clients-2000 and long-requests stop ≤ floor + %.1fs.\n\n", evidenceSlack)
	fmt.Fprintf(w, "| traffic | floor | best sleep | plan's sleep | (a) stop − floor | (a) lost | (a) ratio | (a) vs plan | (a) left | (b) stop − floor | (b) lost | (b) ratio | (b) vs plan | (b) left | targets |\n")
	fmt.Fprintf(w, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		fmt.Fprintf(w, "| %s |\n", strings.Join(evidenceRow(r), " | "))
	}
}

func evidenceRow(r row) []string {
	// The floor and the best sleep are the traffic's, which every run of a seed replays: read
	// from the matrix's own runs.
	a, b := r.results[regimeA], r.results["meshdrain"]
	sleep := bestCleanSleep(b)
	cells := []string{r.traffic.Name,
		span(collect(b, func(r podsim.Result) float64 { return r.LastClientLagS }), "%.1f") + "s",
		fmt.Sprintf("%.0fs", sleep), planSleepCell(r, b)}
	for _, rs := range [][]podsim.Result{a, b} {
		if len(rs) == 0 {
			cells = append(cells, "-", "-", "-", "-", "-")
			continue
		}
		vsPlan := "-"
		if r.planSleep > 0 {
			vsPlan = span(collect(rs, func(m podsim.Result) float64 { return m.AppStopS / r.planSleep }), "%.2f")
		}
		cells = append(cells,
			span(collect(rs, func(r podsim.Result) float64 { return r.AppStopS - r.LastClientLagS }), "%.1f")+"s",
			span(collect(rs, func(r podsim.Result) float64 { return float64(r.ClientFailures) }), "%.0f"),
			span(collect(rs, func(r podsim.Result) float64 { return r.AppStopS / sleep }), "%.2f"),
			vsPlan,
			leftShare(rs))
	}
	return append(cells, evidenceVerdict(r))
}

// leftShare is the clients that left with evidence over all clients, summed over the seeds.
func leftShare(rs []podsim.Result) string {
	var left, all int
	seen := false
	for _, r := range rs {
		l, s, h, ok := evidenceOf(r)
		if !ok {
			continue
		}
		seen = true
		left, all = left+l, all+l+s+h
	}
	if !seen {
		return "-"
	}
	if all == 0 {
		return "0/0"
	}
	return fmt.Sprintf("%d/%d (%.0f%%)", left, all, 100*float64(left)/float64(all))
}
