package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"strings"
	"time"

	"github.com/meshdrain/meshdrain/pkg/sim/podsim"
)

// strategies are the preStops compared, in the table's order.
var strategies = []string{"none", "sleep:5s", "sleep:15s", "meshdrain", "oracle"}

// row is one traffic shape over the seeds.
type row struct {
	traffic podsim.Traffic
	results map[string][]podsim.Result // by strategy, one per seed
	// planSleep is the preStop sleep that what plan is told gives: its lag bound (the last
	// client's EDS lag, with room), in whole seconds of pod time.
	planSleep float64
}

// matrix is what every run of the matrix shares: the preStop binary, the seeds, the time
// scale and the strategies compared.
type matrix struct {
	meshdrainBin string
	seeds        []uint64
	timeScale    float64
	strategies   []podsim.Strategy
}

// run replays the shapes named in only (comma-separated; empty: every shape), in
// podsim.Traffics()'s order, one row each.
func (m matrix) run(ctx context.Context, only string) ([]row, error) {
	var rows []row
	for _, tr := range podsim.Traffics() {
		if only != "" && !contains(strings.Split(only, ","), tr.Name) {
			continue
		}
		r, err := m.runShape(ctx, tr)
		if err != nil {
			return nil, err
		}
		rows = append(rows, r)
	}
	return rows, nil
}

// runShape replays one shape with every seed.
func (m matrix) runShape(ctx context.Context, tr podsim.Traffic) (row, error) {
	r := row{traffic: tr, results: map[string][]podsim.Result{}}
	for _, seed := range m.seeds {
		results, err := m.runSeed(ctx, tr, seed)
		if err != nil {
			return row{}, err
		}
		for _, res := range results {
			r.results[res.Strategy] = append(r.results[res.Strategy], res)
		}
	}
	spec, err := podsim.RecommendedSidecar(tr.Apply(podsim.UserScenario()))
	if err != nil {
		return row{}, fmt.Errorf("%s: %w", tr.Name, err)
	}
	r.planSleep = math.Ceil(spec.MeshdrainLagBound.Seconds())
	return r, nil
}

// runSeed replays one shape with one seed under every strategy, with the sidecar `meshdrain
// plan` writes for it by default (regime b, classic) and no client retries, so that every
// request the pod fails is counted; then meshdrain behind plan's native route and its opt-out
// (regime a). It says on stderr what the run saw, as it goes: a full matrix lasts many minutes.
func (m matrix) runSeed(ctx context.Context, tr podsim.Traffic, seed uint64) ([]podsim.Result, error) {
	sc := tr.Apply(podsim.UserScenario())
	sc.Retries, sc.Seed, sc.TimeScale, sc.MeshdrainBinary = 0, seed, m.timeScale, m.meshdrainBin
	spec, err := podsim.RecommendedSidecar(sc)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", tr.Name, err)
	}
	started := time.Now()
	results, err := podsim.Run(ctx, podsim.Options{Scenario: sc, Strategies: m.strategies, Sidecars: []podsim.SidecarSpec{spec}})
	if err != nil {
		return nil, fmt.Errorf("%s seed %d: %w", tr.Name, seed, err)
	}
	for _, res := range results {
		for _, w := range res.Warnings {
			fmt.Fprintf(os.Stderr, "bench: WARNING %s seed %d %s: %s\n", tr.Name, seed, res.Strategy, w)
		}
	}
	if hasMeshdrain(m.strategies) {
		routes, err := m.runRoutes(ctx, sc)
		if err != nil {
			return nil, fmt.Errorf("%s seed %d, plan's native route and regime (a): %w", tr.Name, seed, err)
		}
		for _, res := range routes {
			fmt.Fprintf(os.Stderr, "bench: %-13s seed %d: %s: meshdrain stop %.2fs (%s), pod gone %.2fs, lost %d\n", tr.Name, seed, res.Strategy, res.AppStopS, endOf(res), res.PodGoneS, res.ClientFailures)
		}
		results = append(results, routes...)
	}
	for _, md := range results {
		if md.Strategy != "meshdrain" {
			continue
		}
		fmt.Fprintf(os.Stderr, "bench: %-13s seed %d: floor %.2fs, meshdrain stop %.2fs (%s), pod gone %.2fs, lost %d; %.0fs\n",
			tr.Name, seed, md.LastClientLagS, md.AppStopS, endOf(md), md.PodGoneS, md.ClientFailures, time.Since(started).Seconds())
	}
	return results, nil
}

func hasMeshdrain(strategies []podsim.Strategy) bool {
	for _, s := range strategies {
		if s.Kind == podsim.StrategyMeshdrain {
			return true
		}
	}
	return false
}

func contains(list []string, s string) bool {
	for _, item := range list {
		if strings.TrimSpace(item) == s {
			return true
		}
	}
	return false
}

// endOf is how meshdrain's wait ended: its reason, and the term that set its window.
func endOf(r podsim.Result) string {
	if r.Meshdrain == nil {
		return "-"
	}
	term, _ := r.Meshdrain.Raw["window_term"].(string)
	if term == "" || r.Meshdrain.Reason == "sidecar-gone" {
		return r.Meshdrain.Reason
	}
	return r.Meshdrain.Reason + ", " + term
}
