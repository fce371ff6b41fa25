// Command bench is `make bench`: meshdrain's benchmark matrix in one run and one report.
//
// For every traffic shape of podsim.Traffics() it replays the pod's deletion (with the
// sidecar `meshdrain plan` recommends and no client retries, so that every lost request is
// seen) under the preStop strategies none, sleep:5s, sleep:15s, meshdrain and the oracle
// (which stops the app the moment the last request that will ever reach the pod has been
// answered), and prints one table: the floor (the last client's endpoint update), each
// strategy's app-stop time and losses, and whether meshdrain met its targets. Then what one
// poll costs, measured side by side in the same run: the bytes of a filtered poll; meshdrain's
// own CPU and allocations per poll; the emulated Envoy's CPU per filtered poll against the
// unfiltered dump and against pilot-agent's own poll, at 110k stats; the binary's size and
// prestop's peak RSS.
//
// It needs nothing but Go and the meshdrain binary it is given.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/meshdrain/meshdrain/pkg/mesh"
	"github.com/meshdrain/meshdrain/pkg/mesh/envoy"
	"github.com/meshdrain/meshdrain/pkg/sim/podsim"
)

func main() {
	var (
		bin       = flag.String("meshdrain-bin", "bin/meshdrain", "the meshdrain binary: the preStop under test")
		simBin    = flag.String("sim-bin", "bin/meshdrain-sim", "the meshdrain-sim binary: the emulator of the cost measurements")
		seeds     = flag.String("seeds", "1,2,3", "seeds to replay each shape with (comma-separated); cells show the range over them")
		traffics  = flag.String("traffic", "", "only these shapes (comma-separated; default: all)")
		timeScale = flag.Float64("time-scale", 0.25, "simulator time scale")
		jsonOut   = flag.String("json", "", "also write every run's result to this file")
		costs     = flag.Bool("costs", true, "measure the poll costs")
	)
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *bin, *simBin, *seeds, *traffics, *timeScale, *jsonOut, *costs); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// strategies are the preStops compared, in the table's order.
var strategies = []string{"none", "sleep:5s", "sleep:15s", "meshdrain", "oracle"}

// row is one traffic shape over the seeds.
type row struct {
	traffic podsim.Traffic
	results map[string][]podsim.Result // by strategy, one per seed
}

func run(ctx context.Context, bin, simBin, seedList, only string, timeScale float64, jsonOut string, costs bool) error {
	bin, err := absBinary(bin)
	if err != nil {
		return err
	}
	var seeds []uint64
	for _, s := range strings.Split(seedList, ",") {
		n, err := strconv.ParseUint(strings.TrimSpace(s), 10, 64)
		if err != nil {
			return fmt.Errorf("--seeds %q: %w", seedList, err)
		}
		seeds = append(seeds, n)
	}
	var strats []podsim.Strategy
	for _, s := range strategies {
		st, err := podsim.ParseStrategy(s)
		if err != nil {
			return err
		}
		strats = append(strats, st)
	}
	started := time.Now()
	var rows []row
	for _, tr := range podsim.Traffics() {
		if only != "" && !contains(strings.Split(only, ","), tr.Name) {
			continue
		}
		r := row{traffic: tr, results: map[string][]podsim.Result{}}
		for _, seed := range seeds {
			sc := tr.Apply(podsim.UserScenario())
			sc.Retries, sc.Seed, sc.TimeScale, sc.MeshdrainBinary = 0, seed, timeScale, bin
			spec, err := podsim.RecommendedSidecar(sc)
			if err != nil {
				return fmt.Errorf("%s: %w", tr.Name, err)
			}
			runStart := time.Now()
			results, err := podsim.Run(ctx, podsim.Options{Scenario: sc, Strategies: strats, Sidecars: []podsim.SidecarSpec{spec}})
			if err != nil {
				return fmt.Errorf("%s seed %d: %w", tr.Name, seed, err)
			}
			for _, res := range results {
				r.results[res.Strategy] = append(r.results[res.Strategy], res)
				for _, w := range res.Warnings {
					fmt.Fprintf(os.Stderr, "bench: WARNING %s seed %d %s: %s\n", tr.Name, seed, res.Strategy, w)
				}
			}
			md := results[len(results)-2]
			fmt.Fprintf(os.Stderr, "bench: %-13s seed %d: floor %.2fs, meshdrain stop %.2fs (%s), lost %d; %.0fs\n",
				tr.Name, seed, md.LastClientLagS, md.AppStopS, endOf(md), md.ClientFailures, time.Since(runStart).Seconds())
		}
		rows = append(rows, r)
	}
	wall := time.Since(started)

	var c *costReport
	if costs {
		fmt.Fprintln(os.Stderr, "bench: measuring poll costs")
		if c, err = measureCosts(ctx, bin, simBin); err != nil {
			return fmt.Errorf("poll costs: %w", err)
		}
	}
	printReport(os.Stdout, rows, seeds, timeScale, wall, c)
	if jsonOut != "" {
		return writeJSON(jsonOut, rows, c)
	}
	return nil
}

func absBinary(bin string) (string, error) {
	if _, err := os.Stat(bin); err != nil {
		return "", fmt.Errorf("meshdrain binary: %w (run make build first)", err)
	}
	if strings.Contains(bin, "/") && !strings.HasPrefix(bin, "/") {
		wd, err := os.Getwd()
		if err != nil {
			return "", err
		}
		bin = wd + "/" + bin
	}
	return bin, nil
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

// cell is one strategy's app-stop time and losses over the seeds.
func cell(rs []podsim.Result) string {
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

func anyPositive(values []float64) bool {
	for _, v := range values {
		if v > 0 {
			return true
		}
	}
	return false
}

// Loss targets of issue 9: zero in these shapes, and never more than sleep:15s anywhere.
var mustNotLose = map[string]bool{"steady": true, "bursts": true, "client-bursts": true, "sparse": true,
	"late-client": true, "no-traffic": true, "tcp": true}

// verdict checks meshdrain against the targets in one traffic row.
func verdict(r row) (string, bool) {
	md, s15 := r.results["meshdrain"], r.results["sleep:15s"]
	var notes []string
	ok := true
	for i, m := range md {
		if mustNotLose[r.traffic.Name] && m.ClientFailures > 0 {
			notes, ok = append(notes, fmt.Sprintf("lost %d", m.ClientFailures)), false
		}
		if i < len(s15) && m.ClientFailures > s15[i].ClientFailures {
			notes, ok = append(notes, fmt.Sprintf("lost %d > sleep:15s %d", m.ClientFailures, s15[i].ClientFailures)), false
		}
		late := m.AppStopS - m.LastClientLagS
		switch {
		case r.traffic.Name == "streams":
			if m.Meshdrain != nil && m.Meshdrain.Reason == "deadline" {
				notes, ok = append(notes, "deadline"), false
			}
		case r.traffic.Name == "steady":
			if late > 1.2 {
				notes, ok = append(notes, fmt.Sprintf("%.1fs > 1.2s", late)), false
			}
		default:
			if late > m.LongestGapS+1.2 {
				notes, ok = append(notes, fmt.Sprintf("%.1fs > gap+1.2 = %.1fs", late, m.LongestGapS+1.2)), false
			}
		}
	}
	if ok {
		return "met", true
	}
	return "NOT MET: " + strings.Join(dedupe(notes), "; "), false
}

func dedupe(in []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, s := range in {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

func printReport(w io.Writer, rows []row, seeds []uint64, timeScale float64, wall time.Duration, c *costReport) {
	seedText := make([]string, len(seeds))
	for i, s := range seeds {
		seedText[i] = strconv.FormatUint(s, 10)
	}
	fmt.Fprintf(w, "meshdrain benchmark matrix: seeds %s, time scale %g, recommended sidecar (meshdrain plan), client retries 0; %.0fs of runs.\n",
		strings.Join(seedText, ","), timeScale, wall.Seconds())
	fmt.Fprintf(w, "Times are pod seconds from the deletion; a cell is the app-stop time · requests lost (by Envoy flag), as ranges over the seeds.\n\n")
	fmt.Fprintf(w, "| traffic | floor | own longest gap | %s | meshdrain − floor | meshdrain ended | targets |\n", strings.Join(strategies, " | "))
	fmt.Fprintf(w, "|---|---|---|%s---|---|---|\n", strings.Repeat("---|", len(strategies)))
	for _, r := range rows {
		md := r.results["meshdrain"]
		cells := make([]string, len(strategies))
		for i, s := range strategies {
			cells[i] = cell(r.results[s])
		}
		var ends []string
		for _, m := range md {
			ends = append(ends, endOf(m))
		}
		v, _ := verdict(r)
		fmt.Fprintf(w, "| %s | %ss | %ss | %s | %ss | %s | %s |\n", r.traffic.Name,
			span(collect(md, func(r podsim.Result) float64 { return r.LastClientLagS }), "%.1f"),
			span(collect(md, func(r podsim.Result) float64 { return r.LongestGapS }), "%.1f"),
			strings.Join(cells, " | "),
			span(collect(md, func(r podsim.Result) float64 { return r.AppStopS - r.LastClientLagS }), "%.1f"),
			strings.Join(dedupe(ends), "; "), v)
	}
	fmt.Fprintln(w)
	for _, r := range rows {
		fmt.Fprintf(w, "- %s: %s\n", r.traffic.Name, r.traffic.About)
	}
	if c == nil {
		return
	}
	fmt.Fprintf(w, "\nPoll costs (same run, side by side):\n\n")
	fmt.Fprintf(w, "| what | figure |\n|---|---|\n")
	for _, line := range c.lines() {
		fmt.Fprintf(w, "| %s | %s |\n", line[0], line[1])
	}
}

func writeJSON(path string, rows []row, c *costReport) error {
	type out struct {
		Traffic string                     `json:"traffic"`
		Results map[string][]podsim.Result `json:"results"`
	}
	doc := struct {
		Matrix []out       `json:"matrix"`
		Costs  *costReport `json:"costs,omitempty"`
	}{Costs: c}
	for _, r := range rows {
		for _, rs := range r.results {
			for i := range rs {
				rs[i].Timeline = nil
			}
		}
		doc.Matrix = append(doc.Matrix, out{r.traffic.Name, r.results})
	}
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// costReport is what one poll costs.
type costReport struct {
	Stats             int     `json:"stats"`
	FilteredBytes     int     `json:"filtered_bytes"`
	UnfilteredBytes   int     `json:"unfiltered_bytes"`
	UsedBytes         int     `json:"used_bytes"`
	EmulatorFilterMS  float64 `json:"emulator_filtered_ms"`
	EmulatorUsedMS    float64 `json:"emulator_usedonly_ms"`
	EmulatorOldMS     float64 `json:"emulator_old_filter_ms"`
	EmulatorPilotMS   float64 `json:"emulator_pilot_agent_ms"`
	EmulatorUnfiltMS  float64 `json:"emulator_unfiltered_ms"`
	ParseNS           float64 `json:"parse_ns"`
	ParseAllocs       int64   `json:"parse_allocs"`
	ParseBytes        int64   `json:"parse_bytes"`
	ExpfmtAllocs      int64   `json:"expfmt_allocs"`
	WatchNS           float64 `json:"watch_ns"`
	WatchAllocs       int64   `json:"watch_allocs"`
	WatchBytes        int64   `json:"watch_bytes"`
	PrestopCPUPerPoll float64 `json:"prestop_cpu_per_poll_ms"`
	PrestopPolls      int     `json:"prestop_polls"`
	PrestopMaxRSSKB   int64   `json:"prestop_max_rss_kb"`
	BinaryBytes       int64   `json:"binary_bytes"`
}

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

// oldFilter is the filter meshdrain sent before issue 9, for comparison: an ^ per alternative
// and an unanchored completions branch, which a regex engine without RE2's DFA (the
// emulator's Go regexp) tries at every position of every name.
const oldFilter = `(^http\.inbound_.*_[0-9]+;?\.(downstream_rq_total|downstream_rq_active|downstream_cx_active)$)|` +
	`(^cluster\.inbound\|[0-9]+\|.*\.(upstream_rq_total|upstream_rq_active|upstream_cx_active)$)|` +
	`(^listener\.[0-9a-fA-F._:\[\]]+_15006\.(downstream_cx_total|downstream_cx_active)$)|(^server\.state$)`

func measureCosts(ctx context.Context, bin, simBin string) (*costReport, error) {
	const clusters = 5000 // 22 stats each: 110k stats
	args := []string{"emulate", "--admin", "http://127.0.0.1:0", "--agent", "none", "--extra-clusters", strconv.Itoa(clusters), "--log-format", "json"}
	for p := 8080; p < 8090; p++ {
		args = append(args, "--inbound", fmt.Sprintf("%d=127.0.0.1:9", p))
	}
	emu := exec.CommandContext(ctx, simBin, args...)
	stdout, err := emu.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := emu.Start(); err != nil {
		return nil, err
	}
	defer func() { _ = emu.Process.Kill(); _ = emu.Wait() }()
	admin, inbounds, err := readEmulator(stdout, 10)
	if err != nil {
		return nil, err
	}
	go func() { _, _ = io.Copy(io.Discard, stdout) }()

	c := &costReport{}
	client := &http.Client{Timeout: time.Minute}
	get := func(path string) ([]byte, error) {
		resp, err := client.Get(admin + path)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("GET %s: %d %s", path, resp.StatusCode, body)
		}
		return body, err
	}
	// One request through every inbound port (its app refuses: a 503), so that their stats
	// are used, as a serving pod's are, and the usedonly answer holds them.
	for _, addr := range inbounds {
		if resp, err := client.Get("http://" + addr + "/"); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}
	filtered := "/stats/prometheus?filter=" + url.QueryEscape(envoy.StatsFilter(mesh.Selector{}))
	used := "/stats/prometheus?usedonly&filter=" + url.QueryEscape(envoy.StatsFilter(mesh.Selector{}))
	old := "/stats/prometheus?filter=" + url.QueryEscape(oldFilter)
	pilot := "/stats?usedonly&filter=" + url.QueryEscape("downstream_cx_active$")
	unfiltered := "/stats/prometheus"
	payload, err := get(filtered)
	if err != nil {
		return nil, err
	}
	dump, err := get(unfiltered)
	if err != nil {
		return nil, err
	}
	usedPayload, err := get(used)
	if err != nil {
		return nil, err
	}
	c.FilteredBytes, c.UsedBytes, c.UnfilteredBytes = len(payload), len(usedPayload), len(dump)
	c.Stats = bytes.Count(dump, []byte("\n")) - bytes.Count(dump, []byte("# TYPE"))
	if text, err := get("/stats"); err == nil {
		c.Stats = bytes.Count(text, []byte("\n"))
	}

	// The emulator's own CPU, from /proc, over interleaved rounds: the machine is shared and
	// noisy, so the queries are measured side by side and compared as ratios. /proc counts
	// whole clock ticks (10 ms), so a round of the cheap polls is 100 of them: a tick is then
	// 0.1 ms of a poll.
	pid := emu.Process.Pid
	measure := func(path string, n int) (float64, error) {
		before, err := procCPU(pid)
		if err != nil {
			return 0, err
		}
		for range n {
			if _, err := get(path); err != nil {
				return 0, err
			}
		}
		after, err := procCPU(pid)
		return float64(after-before) / float64(n), err
	}
	samples := map[string][]float64{}
	for range 5 {
		for _, q := range []struct {
			name, path string
			n          int
		}{{"filtered", filtered, 100}, {"used", used, 100}, {"pilot", pilot, 100}, {"old", old, 5}, {"unfiltered", unfiltered, 5}} {
			ms, err := measure(q.path, q.n)
			if err != nil {
				return nil, err
			}
			samples[q.name] = append(samples[q.name], ms)
		}
	}
	c.EmulatorFilterMS, c.EmulatorUsedMS, c.EmulatorPilotMS = median(samples["filtered"]), median(samples["used"]), median(samples["pilot"])
	c.EmulatorOldMS, c.EmulatorUnfiltMS = median(samples["old"]), median(samples["unfiltered"])

	// meshdrain's own CPU per poll: the real response parsed, normalised and read.
	parse := testing.Benchmark(func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			snap, err := envoy.Parse(bytes.NewReader(payload), mesh.Selector{})
			if err != nil {
				b.Fatal(err)
			}
			_ = snap.Read()
		}
	})
	c.ParseNS, c.ParseAllocs, c.ParseBytes = float64(parse.NsPerOp()), parse.AllocsPerOp(), parse.AllocedBytesPerOp()
	// The watch poll: the usedonly answer parsed, completed with the picture (the complete
	// answer), normalised and read.
	picture, err := envoy.ParseFamilies(bytes.NewReader(payload))
	if err != nil {
		return nil, err
	}
	watch := testing.Benchmark(func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			answer, err := envoy.ParseFamilies(bytes.NewReader(usedPayload))
			if err != nil {
				b.Fatal(err)
			}
			merged, ok := envoy.CompleteWith(picture, answer)
			if !ok {
				b.Fatal("the usedonly answer does not complete the complete one")
			}
			_ = envoy.Normalise(merged, mesh.Selector{}).Read()
		}
	})
	c.WatchNS, c.WatchAllocs, c.WatchBytes = float64(watch.NsPerOp()), watch.AllocsPerOp(), watch.AllocedBytesPerOp()
	c.ExpfmtAllocs = expfmtAllocs(payload)

	// The real prestop process, dry-run against the same emulator, twice (2s and 6s): the
	// difference of their CPU over the difference of their polls is the CPU of one poll,
	// without the process's start. Peak RSS from /proc (VmHWM): a child's rusage maxrss counts
	// the parent's pages it shared before exec.
	var cpus []time.Duration
	var polls []int
	for _, d := range []string{"2s", "6s"} {
		cpu, n, hwm, err := runPrestop(ctx, bin, admin, d)
		if err != nil {
			return nil, err
		}
		cpus, polls = append(cpus, cpu), append(polls, n)
		c.PrestopMaxRSSKB = max(c.PrestopMaxRSSKB, hwm)
	}
	if polls[1] <= polls[0] {
		return nil, fmt.Errorf("prestop polled %d then %d times", polls[0], polls[1])
	}
	c.PrestopPolls = polls[1]
	c.PrestopCPUPerPoll = float64((cpus[1] - cpus[0]).Microseconds()) / 1000 / float64(polls[1]-polls[0])
	if st, err := os.Stat(bin); err == nil {
		c.BinaryBytes = st.Size()
	}
	return c, nil
}

// runPrestop runs prestop --dry-run for d and returns its CPU, its polls and its peak RSS.
func runPrestop(ctx context.Context, bin, admin, d string) (time.Duration, int, int64, error) {
	pre := exec.CommandContext(ctx, bin, "prestop", "--admin", admin, "--dry-run", "--grace-period", "10s", "--deadline", d,
		"--min-wait", d, "--poll", "20ms", "--connect-timeout", "5s", "--log-format", "json")
	var stderr bytes.Buffer
	pre.Stderr = &stderr
	if err := pre.Start(); err != nil {
		return 0, 0, 0, err
	}
	var hwm int64
	done := make(chan error, 1)
	go func() { done <- pre.Wait() }()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	var err error
wait:
	for {
		select {
		case err = <-done:
			break wait
		case <-tick.C:
			if kb := vmHWM(pre.Process.Pid); kb > hwm {
				hwm = kb
			}
		}
	}
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		return 0, 0, 0, fmt.Errorf("prestop: %w", err)
	}
	polls := finalPolls(stderr.Bytes())
	if polls == 0 {
		return 0, 0, 0, fmt.Errorf("prestop reported no polls: %s", stderr.String())
	}
	return pre.ProcessState.UserTime() + pre.ProcessState.SystemTime(), polls, hwm, nil
}

// vmHWM is a process's peak resident set in KiB, from /proc/PID/status; 0 when unknown.
func vmHWM(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb
		}
	}
	return 0
}

// readEmulator reads the emulator's admin URL and the listen addresses of its n inbound ports
// from what it prints at start ("admin: URL", then "inbound PORT: ADDR -> APP").
func readEmulator(r io.Reader, n int) (string, []string, error) {
	var admin string
	var inbounds []string
	scanner := bufio.NewScanner(r)
	for scanner.Scan() {
		line := scanner.Text()
		if u, ok := strings.CutPrefix(line, "admin: "); ok {
			admin = strings.TrimSpace(u)
		}
		if rest, ok := strings.CutPrefix(line, "inbound "); ok {
			if _, mapping, ok := strings.Cut(rest, ": "); ok {
				addr, _, _ := strings.Cut(mapping, " -> ")
				inbounds = append(inbounds, strings.TrimSpace(addr))
			}
		}
		if admin != "" && len(inbounds) == n {
			return admin, inbounds, nil
		}
	}
	return "", nil, fmt.Errorf("the emulator printed admin URL %q and %d of %d inbound addresses", admin, len(inbounds), n)
}

// procCPU is a process's user+system CPU in milliseconds, from /proc/PID/stat.
func procCPU(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// Fields after the command name (which may hold spaces) start after the last ')'.
	fields := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(fields) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %q", pid, b)
	}
	utime, _ := strconv.ParseInt(fields[11], 10, 64)
	stime, _ := strconv.ParseInt(fields[12], 10, 64)
	const ticksPerSecond = 100 // USER_HZ on Linux
	return (utime + stime) * 1000 / ticksPerSecond, nil
}

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}

// finalPolls reads the polls field of prestop's final event.
func finalPolls(stderr []byte) int {
	lines := bytes.Split(stderr, []byte("\n"))
	for i := len(lines) - 1; i >= 0; i-- {
		var ev struct {
			Msg   string `json:"msg"`
			Polls int    `json:"polls"`
		}
		if json.Unmarshal(lines[i], &ev) == nil && ev.Msg == "drain finished" {
			return ev.Polls
		}
	}
	return 0
}

// expfmtAllocs is expfmt's own allocations for the payload, with a reused parser: the floor of
// a poll's allocations as long as expfmt parses the Prometheus text.
func expfmtAllocs(payload []byte) int64 {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	return testing.Benchmark(func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := parser.TextToMetricFamilies(bytes.NewReader(payload)); err != nil {
				b.Fatal(err)
			}
		}
	}).AllocsPerOp()
}
