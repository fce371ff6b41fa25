package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/meshdrain/meshdrain/pkg/sim/podsim"
)

// printReport writes the report docs/benchmarks.md pastes: the matrix table, the per-client
// evidence table, what each shape is, then the fallback shapes and the poll costs if they
// were run.
func printReport(w io.Writer, rows []row, seeds []uint64, timeScale float64, wall time.Duration, fb *fallbackReport, c *costReport) {
	printMatrix(w, rows, seeds, timeScale, wall)
	printEvidence(w, rows)
	fmt.Fprintln(w)
	for _, r := range rows {
		fmt.Fprintf(w, "- %s: %s\n", r.traffic.Name, r.traffic.About)
	}
	if fb != nil {
		printFallback(w, fb)
	}
	if c != nil {
		printCosts(w, c)
	}
}

func printMatrix(w io.Writer, rows []row, seeds []uint64, timeScale float64, wall time.Duration) {
	seedText := make([]string, len(seeds))
	for i, s := range seeds {
		seedText[i] = strconv.FormatUint(s, 10)
	}
	fmt.Fprintf(w, "meshdrain benchmark matrix: seeds %s, time scale %g, the sidecar meshdrain plan writes by default (regime b: istio-proxy's preStop\n",
		strings.Join(seedText, ","), timeScale)
	fmt.Fprintf(w, "meshdrain hold; classic, and meshdrain also native), client retries 0; %.0fs of runs.\n", wall.Seconds())
	fmt.Fprintf(w, "Times are pod seconds from the deletion; a cell is the app-stop time · requests lost (by Envoy flag) · when the pod was gone,\n")
	fmt.Fprintf(w, "as ranges over the seeds.\n")
	fmt.Fprintf(w, "Pod gone: deletion to the last container's exit, with meshdrain behind plan's route, classic · native · today's regime (a)\n")
	fmt.Fprintf(w, "(plan --defer-sidecar-drain=false, classic: the proxy lives its terminationDrainDuration).\n\n")
	fmt.Fprintf(w, "| traffic | floor | own longest gap | %s | meshdrain native | meshdrain − floor (classic · native) | pod gone (classic · native · regime a) | meshdrain ended | targets |\n", strings.Join(strategies, " | "))
	fmt.Fprintf(w, "|---|---|---|%s---|---|---|---|---|\n", strings.Repeat("---|", len(strategies)))
	for _, r := range rows {
		fmt.Fprintf(w, "| %s |\n", strings.Join(matrixRow(r), " | "))
	}
}

// matrixRow is one shape's cells: the floor and the shape's own longest pause, read from
// meshdrain's runs (every strategy replays the same traffic), then a cell per strategy, then
// meshdrain's distance to the floor, how its waits ended and the verdict.
func matrixRow(r row) []string {
	md := r.results["meshdrain"]
	cells := []string{r.traffic.Name,
		span(collect(md, func(r podsim.Result) float64 { return r.LastClientLagS }), "%.1f") + "s",
		span(collect(md, func(r podsim.Result) float64 { return r.LongestGapS }), "%.1f") + "s"}
	for _, s := range strategies {
		cells = append(cells, cell(r.results[s]))
	}
	cells = append(cells, cell(r.results[native]))
	var ends []string
	for _, m := range md {
		ends = append(ends, endOf(m))
	}
	toFloor := func(r podsim.Result) float64 { return r.AppStopS - r.LastClientLagS }
	gone := func(r podsim.Result) float64 { return r.PodGoneS }
	return append(cells,
		seconds(md, toFloor)+" · "+seconds(r.results[native], toFloor),
		seconds(md, gone)+" · "+seconds(r.results[native], gone)+" · "+seconds(r.results[regimeA], gone),
		strings.Join(dedupe(ends), "; "),
		verdict(r))
}

// seconds is a figure of the runs over the seeds, "-" without runs.
func seconds(rs []podsim.Result, f func(podsim.Result) float64) string {
	if len(rs) == 0 {
		return "-"
	}
	return span(collect(rs, f), "%.1f") + "s"
}

// cell is one strategy's app-stop time, losses and pod-gone time over the seeds.
func cell(rs []podsim.Result) string {
	if len(rs) == 0 {
		return "-"
	}
	return stopAndLost(rs) + " · gone " + seconds(rs, func(r podsim.Result) float64 { return r.PodGoneS })
}

// stopAndLost is the app-stop time and the losses (by Envoy flag) over the seeds.
func stopAndLost(rs []podsim.Result) string {
	stop := span(collect(rs, func(r podsim.Result) float64 { return r.AppStopS }), "%.1f") + "s"
	lost := span(collect(rs, func(r podsim.Result) float64 { return float64(r.ClientFailures) }), "%.0f")
	var kinds []string
	var uf, uc, ut, other []float64
	for _, r := range rs {
		a, b, c, d := losses(r)
		uf, uc, ut, other = append(uf, float64(a)), append(uc, float64(b)), append(ut, float64(c)), append(other, float64(d))
	}
	for _, k := range []struct {
		name   string
		values []float64
	}{{"UF", uf}, {"UC", uc}, {"UT", ut}, {"other", other}} {
		if anyPositive(k.values) {
			kinds = append(kinds, k.name+" "+span(k.values, "%.0f"))
		}
	}
	if len(kinds) == 0 {
		return stop + " · " + lost
	}
	return stop + " · " + lost + " (" + strings.Join(kinds, ", ") + ")"
}

// losses splits a run's lost requests into Envoy's response flags: UF (the app refused:
// a 503 or a refused connection), UC (cut in flight), UT (route timeout).
func losses(r podsim.Result) (uf, uc, ut, other int) {
	for kind, n := range r.FailuresByKind {
		switch {
		case strings.HasPrefix(kind, "503 UF"), kind == "503 (not retried)":
			uf += n
		case strings.HasPrefix(kind, "503 UC"), kind == "stream cut":
			uc += n
		case strings.HasPrefix(kind, "504 UT"):
			ut += n
		case strings.HasPrefix(kind, "TCP closed"):
			// A TCP port has no code: the sidecar's access log says which it was.
			if r.SidecarUC > 0 && r.SidecarUF == 0 {
				uc += n
			} else {
				uf += n
			}
		default:
			other += n
		}
	}
	return uf, uc, ut, other
}

// span prints the range of values over the seeds: "1.2", "1.2–1.5".
func span(values []float64, format string) string {
	if len(values) == 0 {
		return "-"
	}
	lo, hi := values[0], values[0]
	for _, v := range values {
		lo, hi = min(lo, v), max(hi, v)
	}
	a, b := fmt.Sprintf(format, lo), fmt.Sprintf(format, hi)
	if a == b {
		return a
	}
	return a + "–" + b
}

func collect(rs []podsim.Result, f func(podsim.Result) float64) []float64 {
	out := make([]float64, len(rs))
	for i, r := range rs {
		out[i] = f(r)
	}
	return out
}

func anyPositive(values []float64) bool {
	for _, v := range values {
		if v > 0 {
			return true
		}
	}
	return false
}

func printCosts(w io.Writer, c *costReport) {
	fmt.Fprintf(w, "\nPoll costs (same run, side by side):\n\n")
	fmt.Fprintf(w, "| what | figure |\n|---|---|\n")
	for _, line := range c.lines() {
		fmt.Fprintf(w, "| %s | %s |\n", line[0], line[1])
	}
}

// lines are the cost table's rows, each emulator figure also as a ratio to pilot-agent's
// poll or to meshdrain's watch poll: the machine is shared and noisy, and a ratio of figures
// measured side by side holds where the figures alone drift.
func (c *costReport) lines() [][2]string {
	return [][2]string{
		{"bytes of one filtered poll, 10 inbound ports, " + strconv.Itoa(c.Stats) + " stats", fmt.Sprintf("%d B complete, %d B usedonly (unfiltered /stats/prometheus: %d B)", c.FilteredBytes, c.UsedBytes, c.UnfilteredBytes)},
		{"meshdrain CPU per poll: parse + normalise + read of that response (in-process)", fmt.Sprintf("%.3f ms, %d allocations, %d B (expfmt alone: %d allocations)", c.ParseNS/1e6, c.ParseAllocs, c.ParseBytes, c.ExpfmtAllocs)},
		{"… of a watch poll: the usedonly response parsed, completed with the complete one, normalised and read", fmt.Sprintf("%.3f ms, %d allocations, %d B", c.WatchNS/1e6, c.WatchAllocs, c.WatchBytes)},
		{"meshdrain prestop process CPU per poll (user+sys of a 6s dry run less a 2s one, per extra poll)", fmt.Sprintf("%.3f ms (%d polls in 6s)", c.PrestopCPUPerPoll, c.PrestopPolls)},
		{"prestop peak RSS", fmt.Sprintf("%.1f MiB", float64(c.PrestopMaxRSSKB)/1024)},
		{"emulated Envoy CPU per watch poll (meshdrain's filter, usedonly)", fmt.Sprintf("%.1f ms (%.2f× pilot-agent's poll)", c.EmulatorUsedMS, c.EmulatorUsedMS/c.EmulatorPilotMS)},
		{"… per complete read (meshdrain's filter; the first poll and one per quiet decision)", fmt.Sprintf("%.1f ms (%.2f× pilot-agent's poll)", c.EmulatorFilterMS, c.EmulatorFilterMS/c.EmulatorPilotMS)},
		{"… pilot-agent's poll (/stats?usedonly&filter=downstream_cx_active$)", fmt.Sprintf("%.1f ms", c.EmulatorPilotMS)},
		{"… the unfiltered dump (/stats/prometheus)", fmt.Sprintf("%.1f ms (meshdrain's watch poll: %.3f×)", c.EmulatorUnfiltMS, c.EmulatorUsedMS/c.EmulatorUnfiltMS)},
		{"… the previous filter (an ^ per alternative)", fmt.Sprintf("%.1f ms (meshdrain's watch poll: %.3f×)", c.EmulatorOldMS, c.EmulatorUsedMS/c.EmulatorOldMS)},
		{"binary size", fmt.Sprintf("%d B (%.2f MiB)", c.BinaryBytes, float64(c.BinaryBytes)/(1<<20))},
	}
}

// writeJSON writes every run's result and the costs, without the runs' timelines: a full
// matrix holds over a hundred runs, and the timelines are for reading one run at a time
// (meshdrain-sim simulate).
func writeJSON(path string, rows []row, fb *fallbackReport, c *costReport) error {
	return writeJSONWith(path, rows, fb, c, nil)
}

// writeJSONWith is writeJSON with the meshless runs, if any.
func writeJSONWith(path string, rows []row, fb *fallbackReport, c *costReport, ml *meshlessReport) error {
	type out struct {
		Traffic    string                     `json:"traffic"`
		PlanSleepS float64                    `json:"plan_sleep_s,omitempty"`
		Results    map[string][]podsim.Result `json:"results"`
	}
	doc := struct {
		Matrix   []out          `json:"matrix"`
		Fallback []fallbackJSON `json:"fallback,omitempty"`
		Meshless []meshlessJSON `json:"meshless,omitempty"`
		Costs    *costReport    `json:"costs,omitempty"`
	}{Costs: c}
	if fb != nil {
		doc.Fallback = fb.json()
	}
	if ml != nil {
		doc.Meshless = ml.json()
	}
	for _, r := range rows {
		for _, rs := range r.results {
			for i := range rs {
				rs[i].Timeline = nil
			}
		}
		doc.Matrix = append(doc.Matrix, out{r.traffic.Name, r.planSleep, r.results})
	}
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}
