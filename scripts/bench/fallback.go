package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/meshdrain/meshdrain/pkg/hook/drain"
	"github.com/meshdrain/meshdrain/pkg/sim/podsim"
)

// The fallback shapes are issue 21's clients whose connections tell the pod nothing: a client
// that opens a connection per request holds nothing to close, a persistent-session client and
// a client without a sidecar keep theirs idle past the removal. For them meshdrain must do
// what it did before it read the socket table (--client-evidence off, "today"), and its final
// event must say that silence decided.

// The final event's client_evidence: the socket table was read, or the evidence was off.
const (
	evidenceRead = "socket-table"
	evidenceOff  = "off"
)

// asTodaySlack is how far from today's run (same seed, pod seconds) a run with the evidence
// may stop before the verdict says by how much: the two runs replay the same traffic but not
// the same scheduling (a loaded 2-core machine moves a stop by a second or more). What the
// verdict judges is the window: set by silence, never by the evidence.
const asTodaySlack = 1.0

// fallbackShape is one row: a matrix shape with its clients' connections changed ("" keeps the
// shape's own).
type fallbackShape struct {
	traffic string
	conns   podsim.ClientConns
}

func (s fallbackShape) name() string {
	if s.conns == "" {
		return s.traffic
	}
	return s.traffic + ", " + string(s.conns)
}

// fallbackShapes are the rows, in the table's order. The tcp shape keeps its own
// connections: one per request.
var fallbackShapes = []fallbackShape{
	{"steady", podsim.ConnsPerRequest},
	{"steady", podsim.ConnsPersistentSession},
	{"steady", podsim.ConnsNoSidecar},
	{"tcp", ""},
}

// fallbackRun is one seed of a row: meshdrain today (regime (a), --client-evidence off) and
// with the evidence in both regimes.
type fallbackRun struct {
	seed        uint64
	today, a, b podsim.Result
}

// fallbackRow is one shape over the seeds.
type fallbackRow struct {
	shape string
	runs  []fallbackRun
}

// fallbackReport is the section: its rows, the seeds they were replayed with (the first of
// the matrix's allSeeds) and how long the runs took.
type fallbackReport struct {
	rows            []fallbackRow
	seeds, allSeeds []uint64
	timeScale       float64
	wall            time.Duration
}

// runFallback replays every fallback shape with the first n of the matrix's seeds: a seed of
// the four shapes takes about 75 s on a 2-core machine, and the whole bench must stay under
// 30 minutes.
func (m matrix) runFallback(ctx context.Context, n int) (*fallbackReport, error) {
	started := time.Now()
	fb := &fallbackReport{seeds: m.seeds[:min(n, len(m.seeds))], allSeeds: m.seeds, timeScale: m.timeScale}
	for _, shape := range fallbackShapes {
		tr, err := podsim.TrafficByName(shape.traffic)
		if err != nil {
			return nil, err
		}
		row := fallbackRow{shape: shape.name()}
		for _, seed := range fb.seeds {
			run, err := m.runFallbackSeed(ctx, tr, shape, seed)
			if err != nil {
				return nil, fmt.Errorf("fallback %s seed %d: %w", shape.name(), seed, err)
			}
			row.runs = append(row.runs, run)
		}
		fb.rows = append(fb.rows, row)
	}
	fb.wall = time.Since(started)
	return fb, nil
}

// runFallbackSeed replays one shape and seed three ways in one podsim.Run (so that one run's
// waiting overlaps the next one's traffic): regime (a) with the evidence off, then regime (a)
// and regime (b) with meshdrain's default evidence. It says on stderr what each saw.
func (m matrix) runFallbackSeed(ctx context.Context, tr podsim.Traffic, shape fallbackShape, seed uint64) (fallbackRun, error) {
	sc := tr.Apply(podsim.UserScenario())
	if shape.conns != "" {
		sc.ClientConns = shape.conns
	}
	sc.Retries, sc.Seed, sc.TimeScale, sc.MeshdrainBinary = 0, seed, m.timeScale, m.meshdrainBin
	a, err := podsim.RegimeASidecar(sc)
	if err != nil {
		return fallbackRun{}, err
	}
	b, err := podsim.RecommendedSidecar(sc)
	if err != nil {
		return fallbackRun{}, err
	}
	today := a
	today.Name, today.MeshdrainClientEvidence = a.Name+"/evidence-off", evidenceOff
	started := time.Now()
	results, err := podsim.Run(ctx, podsim.Options{Scenario: sc, Strategies: []podsim.Strategy{{Kind: podsim.StrategyMeshdrain}},
		Sidecars: []podsim.SidecarSpec{today, a, b}})
	if err != nil {
		return fallbackRun{}, err
	}
	if len(results) != 3 {
		return fallbackRun{}, fmt.Errorf("%d results, want 3", len(results))
	}
	run := fallbackRun{seed: seed, today: results[0], a: results[1], b: results[2]}
	for _, r := range []struct {
		label string
		res   podsim.Result
	}{{"today", run.today}, {"(a)", run.a}, {"(b)", run.b}} {
		for _, w := range r.res.Warnings {
			fmt.Fprintf(os.Stderr, "bench: WARNING fallback %s seed %d %s: %s\n", shape.name(), seed, r.label, w)
		}
		fmt.Fprintf(os.Stderr, "bench: fallback %-26s seed %d: %-5s floor %.2fs, stop %.2fs (%s; %s), lost %d\n",
			shape.name(), seed, r.label, r.res.LastClientLagS, r.res.AppStopS, endOf(r.res), finalEvent(r.res), r.res.ClientFailures)
	}
	fmt.Fprintf(os.Stderr, "bench: fallback %-26s seed %d: %.0fs\n", shape.name(), seed, time.Since(started).Seconds())
	return run, nil
}

// finalEvent is what one run's final event said of the clients.
func finalEvent(r podsim.Result) string {
	if r.Meshdrain == nil {
		return "no final event"
	}
	ev, _ := r.Meshdrain.Raw["client_evidence"].(string)
	if ev == "" {
		ev = "-"
	}
	if left, silence, holding, ok := evidenceOf(r); ok {
		return fmt.Sprintf("%s, left %d, by silence %d, holding %d", ev, left, silence, holding)
	}
	return ev
}

// printFallback writes the fallback table.
func printFallback(w io.Writer, fb *fallbackReport) {
	seeds := seedList(fb.seeds)
	if len(fb.seeds) < len(fb.allSeeds) {
		seeds += fmt.Sprintf(" (of the matrix's %s: all of them would not fit the bench's 30 minutes)", seedList(fb.allSeeds))
	}
	fmt.Fprintf(w, "\nFallback shapes: clients whose connections tell the pod nothing (one per request, a persistent session, no sidecar,\n")
	fmt.Fprintf(w, "a TCP port). Seeds %s, time scale %g, client retries 0; %.0fs of runs.\n", seeds, fb.timeScale, fb.wall.Seconds())
	fmt.Fprintf(w, "Today: regime (a) with --client-evidence off (silence alone decides); (a), (b): both regimes with the evidence (auto).\n")
	fmt.Fprintf(w, "Final event: client_evidence, clients left/by silence/holding and window_term, over the seeds. Silence decided: no\n")
	fmt.Fprintf(w, "window set by the evidence (%s), nothing lost: the rule of today decided. A stop more than %.1fs from today's with the\n", drain.TermClientsLeft, asTodaySlack)
	fmt.Fprintf(w, "same seed is said after the verdict (runs replay the same traffic, not the same scheduling).\n\n")
	fmt.Fprintf(w, "| variant | floor | today stop − floor | today lost | (a) stop − floor | (a) lost | (b) stop − floor | (b) lost | final event | verdict |\n")
	fmt.Fprintf(w, "|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range fb.rows {
		fmt.Fprintf(w, "| %s |\n", strings.Join(fallbackCells(r), " | "))
	}
}

func fallbackCells(r fallbackRow) []string {
	today, a, b := r.regime(func(f fallbackRun) podsim.Result { return f.today }), r.regime(func(f fallbackRun) podsim.Result { return f.a }), r.regime(func(f fallbackRun) podsim.Result { return f.b })
	cells := []string{r.shape, span(collect(today, func(r podsim.Result) float64 { return r.LastClientLagS }), "%.1f") + "s"}
	for _, rs := range [][]podsim.Result{today, a, b} {
		cells = append(cells,
			span(collect(rs, func(r podsim.Result) float64 { return r.AppStopS - r.LastClientLagS }), "%.1f")+"s",
			span(collect(rs, func(r podsim.Result) float64 { return float64(r.ClientFailures) }), "%.0f"))
	}
	events := []string{"today: " + eventSummary(today), "(a): " + eventSummary(a), "(b): " + eventSummary(b)}
	verdict := judgeFallback(fallbackMisses(r))
	if longer := heldLonger(r); longer > asTodaySlack {
		verdict += fmt.Sprintf("; up to %.1fs after today's stop", longer)
	}
	if earlier := -minDiff(r); earlier > asTodaySlack {
		verdict += fmt.Sprintf("; up to %.1fs before today's stop", earlier)
	}
	return append(cells, strings.Join(events, "; "), verdict)
}

// minDiff is the least difference between a run with the evidence and today's with the same
// seed (negative: it stopped earlier).
func minDiff(r fallbackRow) float64 {
	least := 0.0
	for _, f := range r.runs {
		least = min(least, f.a.AppStopS-f.today.AppStopS, f.b.AppStopS-f.today.AppStopS)
	}
	return least
}

// heldLonger is the most any run with the evidence stopped after today's with the same seed.
func heldLonger(r fallbackRow) float64 {
	longest := 0.0
	for _, f := range r.runs {
		longest = max(longest, f.a.AppStopS-f.today.AppStopS, f.b.AppStopS-f.today.AppStopS)
	}
	return longest
}

func seedList(seeds []uint64) string {
	text := make([]string, len(seeds))
	for i, s := range seeds {
		text[i] = strconv.FormatUint(s, 10)
	}
	return strings.Join(text, ",")
}

// regime is one of the three runs of every seed.
func (r fallbackRow) regime(pick func(fallbackRun) podsim.Result) []podsim.Result {
	out := make([]podsim.Result, len(r.runs))
	for i, f := range r.runs {
		out[i] = pick(f)
	}
	return out
}

// eventSummary is what one regime's final events said over the seeds.
func eventSummary(rs []podsim.Result) string {
	var evidence, terms []string
	var left, silence, holding []float64
	for _, r := range rs {
		if r.Meshdrain == nil {
			evidence = append(evidence, "no final event")
			continue
		}
		ev, _ := r.Meshdrain.Raw["client_evidence"].(string)
		term, _ := r.Meshdrain.Raw["window_term"].(string)
		evidence, terms = append(evidence, orDash(ev)), append(terms, orDash(term))
		if l, s, h, ok := evidenceOf(r); ok {
			left, silence, holding = append(left, float64(l)), append(silence, float64(s)), append(holding, float64(h))
		}
	}
	out := strings.Join(dedupe(evidence), "/")
	if len(left) > 0 {
		out += fmt.Sprintf(" %s/%s/%s", span(left, "%.0f"), span(silence, "%.0f"), span(holding, "%.0f"))
	}
	if len(terms) > 0 {
		out += ", " + strings.Join(dedupe(terms), "/")
	}
	return out
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// fallbackMisses are what kept a row from behaving as today with silence deciding, seed by
// seed.
func fallbackMisses(r fallbackRow) []string {
	var notes []string
	for _, f := range r.runs {
		for _, run := range []struct {
			label string
			res   podsim.Result
			want  string // the final event's client_evidence
		}{{"today", f.today, evidenceOff}, {"(a)", f.a, evidenceRead}, {"(b)", f.b, evidenceRead}} {
			notes = append(notes, fallbackRunMisses(run.label, f.seed, run.res, run.want)...)
		}
	}
	return notes
}

// fallbackRunMisses checks one run: it lost nothing, its final event came, says that the
// evidence was what the run asked for (a table that cannot be read would make "silence
// decided" say nothing) and that the evidence did not set the window.
func fallbackRunMisses(label string, seed uint64, r podsim.Result, wantEvidence string) []string {
	var notes []string
	if r.ClientFailures > 0 {
		notes = append(notes, fmt.Sprintf("%s seed %d lost %d", label, seed, r.ClientFailures))
	}
	if r.Meshdrain == nil || r.Meshdrain.Raw == nil {
		return append(notes, fmt.Sprintf("%s seed %d: no final event", label, seed))
	}
	if ev, _ := r.Meshdrain.Raw["client_evidence"].(string); ev != wantEvidence {
		notes = append(notes, fmt.Sprintf("%s seed %d: client_evidence %q, want %q", label, seed, ev, wantEvidence))
	}
	if term, _ := r.Meshdrain.Raw["window_term"].(string); term == string(drain.TermClientsLeft) {
		notes = append(notes, fmt.Sprintf("%s seed %d: window set by %s", label, seed, term))
	}
	return notes
}

func judgeFallback(notes []string) string {
	if len(notes) == 0 {
		return "silence decided, as today"
	}
	return "NOT MET: " + strings.Join(dedupe(notes), "; ")
}

// fallbackJSON is one fallback run in the JSON, its results without their timelines.
type fallbackJSON struct {
	Shape string        `json:"shape"`
	Seed  uint64        `json:"seed"`
	Today podsim.Result `json:"today"`
	A     podsim.Result `json:"regime_a"`
	B     podsim.Result `json:"regime_b"`
}

func (fb *fallbackReport) json() []fallbackJSON {
	var out []fallbackJSON
	for _, r := range fb.rows {
		for _, f := range r.runs {
			j := fallbackJSON{Shape: r.shape, Seed: f.seed, Today: f.today, A: f.a, B: f.b}
			j.Today.Timeline, j.A.Timeline, j.B.Timeline = nil, nil, nil
			out = append(out, j)
		}
	}
	return out
}
