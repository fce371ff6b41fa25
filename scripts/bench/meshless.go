package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/meshdrain/meshdrain/pkg/sim/podsim"
)

// The meshless table (issue 28): a pod without a sidecar, whose clients reach the app through
// their node's kube-proxy or an ingress, and meshdrain prestop --mesh none reading the kernel.
// It is kept small, because the whole bench must stay under 30 minutes on 2 cores: meshdrain
// with a graceful app over the seeds, the same with an abrupt app over the first seed, and the
// best clean sleep replayed from the recorded traffic rather than run. Each run is
// `meshdrain-sim simulate --mesh none`, which runs in a network namespace of its own where the
// kernel allows one: the hook reads the namespace's TCP counters, which in this machine's
// namespace count every other program's accepts too.

// meshlessSlack is how much later than the floor, or the lag bound, a stop may come: the
// issue's 1.2 s (a quiet window and a poll).
const meshlessSlack = 1.2

// meshlessDense are the shapes whose clients open connections or send densely and then stop
// choosing the pod: meshdrain must stop within meshlessSlack of the floor. The shapes with
// keep-alive clients are bounded by the lag bound instead: those clients never learn, and
// the app's graceful shutdown, not the hook, moves them.
var meshlessDense = map[string]bool{"per-request": true, "ingress": true}

// meshlessRow is one shape: meshdrain with a graceful app per seed, and with an abrupt app.
type meshlessRow struct {
	traffic  podsim.Traffic
	seeds    []uint64 // of the graceful runs
	graceful []podsim.Result
	abrupt   []podsim.Result
	// withApp are the graceful runs again, each seed, with the app's own request counter read
	// beside the kernel (--app-metrics): side by side with graceful.
	withApp  []podsim.Result
	lagBound float64 // the lag bound meshdrain was given (--eds-lag-bound), pod seconds
}

// meshlessReport is the section.
type meshlessReport struct {
	rows               []meshlessRow
	seeds, abruptSeeds []uint64
	timeScale          float64
	wall               time.Duration
}

// runMeshless replays each meshless shape (MeshlessTraffics, or those named in only) with
// every seed and a graceful app, and with the first abruptSeeds seeds and an abrupt app.
func (m matrix) runMeshless(ctx context.Context, simBin, only string, abruptSeeds int) (*meshlessReport, error) {
	started := time.Now()
	ml := &meshlessReport{seeds: m.seeds, abruptSeeds: m.seeds[:min(abruptSeeds, len(m.seeds))], timeScale: m.timeScale}
	for _, tr := range podsim.MeshlessTraffics() {
		if only != "" && !contains(strings.Split(only, ","), tr.Name) {
			continue
		}
		row := meshlessRow{traffic: tr, seeds: m.seeds}
		for _, seed := range m.seeds {
			// The kernel alone and with the app's counter, one after the other: the same
			// seed's traffic, side by side.
			res, spec, err := m.runMeshlessSeed(ctx, simBin, tr, seed, podsim.AppGraceful, false)
			if err != nil {
				return nil, err
			}
			row.graceful, row.lagBound = append(row.graceful, res), spec.MeshdrainLagBound.Seconds()
			if res, _, err = m.runMeshlessSeed(ctx, simBin, tr, seed, podsim.AppGraceful, true); err != nil {
				return nil, err
			}
			row.withApp = append(row.withApp, res)
		}
		for _, seed := range ml.abruptSeeds {
			res, _, err := m.runMeshlessSeed(ctx, simBin, tr, seed, podsim.AppImmediate, false)
			if err != nil {
				return nil, err
			}
			row.abrupt = append(row.abrupt, res)
		}
		ml.rows = append(ml.rows, row)
	}
	ml.wall = time.Since(started)
	return ml, nil
}

// runMeshlessSeed replays one shape and seed with meshdrain as the preStop of a pod without a
// sidecar, the app shutting down as given, with `meshdrain-sim simulate --mesh none`; with
// appMetrics, meshdrain also reads the app's own request counter (--app-metrics).
func (m matrix) runMeshlessSeed(ctx context.Context, simBin string, tr podsim.Traffic, seed uint64, shutdown podsim.AppShutdown, appMetrics bool) (podsim.Result, podsim.SidecarSpec, error) {
	sc := tr.Apply(podsim.MeshlessScenario())
	sc.Seed, sc.TimeScale, sc.AppShutdown, sc.Meshless.AppMetrics = seed, m.timeScale, shutdown, appMetrics
	spec, err := podsim.MeshlessPod(sc)
	if err != nil {
		return podsim.Result{}, spec, fmt.Errorf("meshless %s: %w", tr.Name, err)
	}
	args := []string{"simulate", "--mesh", "none", "--traffic", tr.Name, "--strategy", "meshdrain",
		"--seed", strconv.FormatUint(seed, 10), "--time-scale", strconv.FormatFloat(m.timeScale, 'g', -1, 64),
		"--app-shutdown", string(shutdown), "--meshdrain-bin", m.meshdrainBin, "-o", "json"}
	if appMetrics {
		args = append(args, "--app-metrics")
	}
	cmd := exec.CommandContext(ctx, simBin, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return podsim.Result{}, spec, fmt.Errorf("meshless %s seed %d: %s: %w\n%s", tr.Name, seed, simBin, err, stderr.String())
	}
	var report podsim.Report
	if err := json.Unmarshal(out, &report); err != nil || len(report.Results) != 1 {
		return podsim.Result{}, spec, fmt.Errorf("meshless %s seed %d: %d results (%v) in %q", tr.Name, seed, len(report.Results), err, out)
	}
	res := report.Results[0]
	for _, w := range res.Warnings {
		fmt.Fprintf(os.Stderr, "bench: WARNING meshless %s seed %d %s app: %s\n", tr.Name, seed, shutdown, w)
	}
	with := ""
	if appMetrics {
		with = " +app-metrics"
	}
	fmt.Fprintf(os.Stderr, "bench: meshless %-11s seed %d, %-9s app%s: floor %.2fs, last request %.2fs, meshdrain stop %.2fs (%s), lost %d %v\n",
		tr.Name, seed, shutdown, with, res.LastClientLagS, res.LastRequestS, res.AppStopS, endOf(res), res.ClientFailures, res.FailuresByKind)
	return res, spec, nil
}

// printMeshless writes the meshless table.
func printMeshless(w io.Writer, ml *meshlessReport) {
	fmt.Fprintf(w, "\nWithout a sidecar (issue 28): clients reach the app through their node's kube-proxy (5 nodes, each syncing at its own\n")
	fmt.Fprintf(w, "lag) or an ingress routed per request; meshdrain prestop --mesh none reads the kernel. Seeds %s (graceful app), %s\n", seedList(ml.seeds), seedList(ml.abruptSeeds))
	fmt.Fprintf(w, "(abrupt app: it closes its listener and every connection at SIGTERM), time scale %g; %.0fs of runs. Best sleep: the\n", ml.timeScale, ml.wall.Seconds())
	fmt.Fprintf(w, "shortest sleep on a %.0f s grid that loses nothing over the seeds with a graceful app, replayed from this run's recorded\n", sleepGrid)
	fmt.Fprintf(w, "traffic; ratio: meshdrain's app-stop time / it. Targets: 0 lost with a graceful app; stop ≤ best sleep + %.1fs; where\n", sleepSlack)
	fmt.Fprintf(w, "clients open connections densely (per-request, ingress) stop ≤ floor + %.1fs, elsewhere (keep-alive clients never\n", meshlessSlack)
	fmt.Fprintf(w, "learn) stop ≤ lag bound + %.1fs. --app-metrics: the same seeds with the app's own request counter read beside the\n", meshlessSlack)
	fmt.Fprintf(w, "kernel (simulate --app-metrics), run right after each: its stop, lost, and stop / the kernel alone's, seed by seed.\n\n")
	fmt.Fprintf(w, "| traffic | floor | lag bound | best sleep | meshdrain stop | stop − floor | lost | ratio | ended | abrupt app: lost | --app-metrics: stop · lost · / kernel | targets |\n")
	fmt.Fprintf(w, "|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range ml.rows {
		fmt.Fprintf(w, "| %s |\n", strings.Join(meshlessCells(r), " | "))
	}
	fmt.Fprintln(w)
	for _, r := range ml.rows {
		fmt.Fprintf(w, "- %s: %s\n", r.traffic.Name, r.traffic.About)
	}
}

func meshlessCells(r meshlessRow) []string {
	sleep := bestCleanSleep(r.graceful)
	var ends []string
	for _, res := range r.graceful {
		ends = append(ends, endOf(res))
	}
	return []string{r.traffic.Name,
		span(collect(r.graceful, func(r podsim.Result) float64 { return r.LastClientLagS }), "%.1f") + "s",
		fmt.Sprintf("%.1fs", r.lagBound),
		fmt.Sprintf("%.0fs", sleep),
		span(collect(r.graceful, func(r podsim.Result) float64 { return r.AppStopS }), "%.1f") + "s",
		span(collect(r.graceful, func(r podsim.Result) float64 { return r.AppStopS - r.LastClientLagS }), "%.1f") + "s",
		span(collect(r.graceful, func(r podsim.Result) float64 { return float64(r.ClientFailures) }), "%.0f"),
		span(collect(r.graceful, func(r podsim.Result) float64 { return r.AppStopS / sleep }), "%.2f"),
		strings.Join(dedupe(ends), "; "),
		abruptCell(r.abrupt),
		withAppCell(r),
		meshlessVerdict(r, sleep),
	}
}

// withAppCell is the runs with --app-metrics: their stops, losses, and each stop over the
// same seed's stop with the kernel alone.
func withAppCell(r meshlessRow) string {
	if len(r.withApp) == 0 {
		return "-"
	}
	var ratios []float64
	for i, res := range r.withApp {
		if i < len(r.graceful) && r.graceful[i].AppStopS > 0 {
			ratios = append(ratios, res.AppStopS/r.graceful[i].AppStopS)
		}
	}
	return span(collect(r.withApp, func(r podsim.Result) float64 { return r.AppStopS }), "%.1f") + "s · " +
		span(collect(r.withApp, func(r podsim.Result) float64 { return float64(r.ClientFailures) }), "%.0f") + " · " +
		span(ratios, "%.2f")
}

// abruptCell is what an abrupt app lost, by kind as the clients saw it.
func abruptCell(rs []podsim.Result) string {
	if len(rs) == 0 {
		return "-"
	}
	kinds := map[string][]float64{}
	var names []string
	for _, r := range rs {
		for k := range r.FailuresByKind {
			if _, seen := kinds[k]; !seen {
				names = append(names, k)
			}
			kinds[k] = append(kinds[k], float64(r.FailuresByKind[k]))
		}
	}
	cell := span(collect(rs, func(r podsim.Result) float64 { return float64(r.ClientFailures) }), "%.0f")
	if len(names) == 0 {
		return cell
	}
	sort.Strings(names)
	var parts []string
	for _, k := range names {
		parts = append(parts, k+" "+span(kinds[k], "%.0f"))
	}
	return cell + " (" + strings.Join(parts, ", ") + ")"
}

// meshlessVerdict checks each seed's graceful run against the targets.
func meshlessVerdict(r meshlessRow, sleep float64) string {
	var notes []string
	for i, res := range r.graceful {
		seed := r.seeds[i]
		if res.Meshdrain == nil || res.PreStopError != "" {
			notes = append(notes, fmt.Sprintf("seed %d: preStop failed (%s)", seed, res.PreStopError))
		}
		if res.ClientFailures > 0 {
			notes = append(notes, fmt.Sprintf("seed %d lost %d", seed, res.ClientFailures))
		}
		if res.AppStopS > sleep+sleepSlack {
			notes = append(notes, fmt.Sprintf("%.1fs > sleep %.0fs + %.1f", res.AppStopS, sleep, sleepSlack))
		}
		switch {
		case meshlessDense[r.traffic.Name] && res.AppStopS-res.LastClientLagS > meshlessSlack:
			note := fmt.Sprintf("%.1fs after the floor > %.1f", res.AppStopS-res.LastClientLagS, meshlessSlack)
			if minWait := minWaitOf(res); minWait > res.LastClientLagS && res.AppStopS <= minWait+meshlessSlack {
				note += fmt.Sprintf(" (--min-wait %.0fs)", minWait)
			}
			notes = append(notes, note)
		case !meshlessDense[r.traffic.Name] && res.AppStopS > r.lagBound+meshlessSlack:
			notes = append(notes, fmt.Sprintf("%.1fs > lag bound %.1fs + %.1f", res.AppStopS, r.lagBound, meshlessSlack))
		}
		if len(res.Warnings) > 0 {
			notes = append(notes, fmt.Sprintf("seed %d did not keep pod time", seed))
		}
	}
	for i, res := range r.withApp {
		// The app's counter is no target of its own, but it must lose nothing either.
		if res.Meshdrain == nil || res.PreStopError != "" {
			notes = append(notes, fmt.Sprintf("seed %d with --app-metrics: preStop failed (%s)", r.seeds[i], res.PreStopError))
		}
		if res.ClientFailures > 0 {
			notes = append(notes, fmt.Sprintf("seed %d with --app-metrics lost %d", r.seeds[i], res.ClientFailures))
		}
	}
	if len(notes) == 0 {
		return "met"
	}
	return "NOT MET: " + strings.Join(dedupe(notes), "; ")
}

// meshlessJSON is one meshless run in the JSON, without its timeline.
type meshlessJSON struct {
	Shape string        `json:"shape"`
	App   string        `json:"app"`
	Seed  uint64        `json:"seed"`
	Run   podsim.Result `json:"run"`
}

func (ml *meshlessReport) json() []meshlessJSON {
	var out []meshlessJSON
	for _, r := range ml.rows {
		for i, res := range r.graceful {
			res.Timeline = nil
			out = append(out, meshlessJSON{r.traffic.Name, string(podsim.AppGraceful), ml.seeds[i], res})
		}
		for i, res := range r.abrupt {
			res.Timeline = nil
			out = append(out, meshlessJSON{r.traffic.Name, "abrupt", ml.abruptSeeds[i], res})
		}
		for i, res := range r.withApp {
			res.Timeline = nil
			out = append(out, meshlessJSON{r.traffic.Name, string(podsim.AppGraceful) + "+app-metrics", ml.seeds[i], res})
		}
	}
	return out
}

// minWaitOf is the --min-wait meshdrain ran with, in pod seconds (0 when unknown).
func minWaitOf(r podsim.Result) float64 {
	if r.Meshdrain == nil || r.Meshdrain.ElapsedMS <= 0 {
		return 0
	}
	args := r.Meshdrain.Args
	for i := 0; i+1 < len(args); i++ {
		if args[i] == "--min-wait" {
			d, err := time.ParseDuration(args[i+1])
			if err != nil {
				return 0
			}
			return d.Seconds() * r.Meshdrain.ElapsedPodS / (r.Meshdrain.ElapsedMS / 1000)
		}
	}
	return 0
}
