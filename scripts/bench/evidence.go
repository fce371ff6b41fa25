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

// bestSleep is the shortest whole-second sleep that loses nothing over the seeds, replayed
// from the recorded traffic rather than run: behind a sidecar that outlives the app (the
// recommended one), a sleep loses exactly the requests sent after it ends, so it must last
// past the last request sent to the pod (LastRequestS) in every seed. Whole seconds are
// what people write in a preStop.
func bestSleep(rs []podsim.Result) float64 {
	last := 0.0
	for _, r := range rs {
		last = max(last, r.LastRequestS)
	}
	return math.Max(1, math.Ceil(last+1e-9))
}

// planSleepCell is the plan's sleep, flagged where it would lose requests in some seed (it
// ends before the last request sent to the pod).
func planSleepCell(r row, rs []podsim.Result) string {
	if r.planSleep <= 0 {
		return "-"
	}
	cell := fmt.Sprintf("%.0fs", r.planSleep)
	if len(rs) > 0 && bestSleep(rs) > r.planSleep {
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
	fmt.Fprintf(w, "whole-second preStop sleep that loses nothing over the seeds, replayed from the recorded traffic. Ratio: meshdrain's\n")
	fmt.Fprintf(w, "app-stop time / the best sleep (≤ 1.0: meshdrain is no slower). Plan's sleep: the sleep that what plan is told gives, its\n")
	fmt.Fprintf(w, "lag bound in whole seconds (flagged where it ends before the last request of some seed); vs plan: app-stop time / it.\n")
	fmt.Fprintf(w, "Left: clients that left with deterministic evidence / all.\n\n")
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
	sleep := bestSleep(b)
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
