package main

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/meshdrain/meshdrain/pkg/hook/drain"
	"github.com/meshdrain/meshdrain/pkg/hook/evidence"
	"github.com/meshdrain/meshdrain/pkg/hook/risk"
	"github.com/meshdrain/meshdrain/pkg/operator/lag"
	"github.com/meshdrain/meshdrain/pkg/operator/plan"
)

// The loop closed (issue 39 item 5): pastDrains drains run at a guess write their final
// events; plan --lag-from's own code learns --lag-dist and --risk from them (and, apart, from
// a kube-proxy histogram of the same model); newDrains drains then run with what it learnt.
// Their seeds are apart from each other and from the calibration's.
const (
	pastDrains    = 200
	newDrains     = 1000
	pastSeedBase  = 1_000_000
	newSeedBase   = 2_000_000
	loopP99       = 100 * time.Millisecond // plan needs one; it sets nothing the rule uses here
	guessLagBound = 10 * time.Second
)

// loopRisks are the --risk values plan is asked for in the loop.
var loopRisks = []float64{1e-2, 1e-3}

// guess is how the past drains ran, before anyone learnt the fleet's lag.
type guess struct {
	name string
	cfg  drain.RuleConfig
}

// wideGuess is the cautious past's --lag-dist: a tail to the minute.
const wideGuess = "0:0s,0.5:3s,0.99:30s,1:60s"

// guesses are the two pasts: a cautious one (a wide --lag-dist at --risk 10⁻³, which waits
// out the clients' tail, so that the events see every client learn) and today's guess
// (--eds-lag-bound 10s with --min-wait 5s, which stops past the bound whether or not the
// clients have shown they learnt: its late clients are cut, and missing from the events).
func guesses() []guess {
	base := drain.RuleConfig{Start: start, Quiet: drain.DefaultQuiet, Deadline: deadline, StreamsWait: drain.DefaultStreamsWait}
	wideLag, err := risk.Parse(wideGuess)
	if err != nil {
		panic(err) // a constant
	}
	wide := base
	wide.Lag, wide.Risk = wideLag, 1e-3
	bound := base
	bound.LagBound, bound.MinWait = guessLagBound, drain.DefaultMinWait
	return []guess{{"--lag-dist " + wideGuess, wide}, {"--eds-lag-bound 10s", bound}}
}

// loopCase is one model the loop is closed on: a shape and a lag family.
type loopCase struct {
	shape  shape
	family family
}

// loopCases are regime (b) sidecars (every client's let-go), Linkerd (no client named: one
// last arrival per drain) and the meshless mixed shape (last new connection, last request),
// each under the lognormal and the slow-node families.
func loopCases() []loopCase {
	var out []loopCase
	for _, s := range shapes() {
		if s.name != "sidecars (b)" && s.name != "linkerd" && s.name != "none: mixed" {
			continue
		}
		for _, f := range families() {
			if f.name == "lognormal" || f.name == "slow-node" {
				out = append(out, loopCase{s, f})
			}
		}
	}
	return out
}

// loopRow is one model, past and risk: what was learnt and how the new drains fared.
type loopRow struct {
	shape, family, guess string
	risk                 float64
	// samples and censored are what lag.ReadEvents gave from the past drains' events.
	samples, censored int
	// trueQuantile is the model's Quantile(1 − risk) for one client; learnt and fromHistogram
	// plan's eds-lag from the events and from the histogram.
	trueQuantile, learnt, fromHistogram time.Duration
	learntDist, histogramDist           string
	warnings                            []string
	// withLearnt and withHistogram are the new drains run with each source's settings.
	withLearnt, withHistogram tally
}

// tally is a run of drains.
type tally struct {
	// deadlines are the drains the deadline ended: the figure never came down to the risk.
	drains, lost, deadlines int
	statedSum               float64
	stopSum                 time.Duration
}

func (t *tally) add(o outcome) {
	t.drains++
	t.statedSum += o.stated
	t.stopSum += o.stop
	if o.lost {
		t.lost++
	}
	if o.stop >= deadline {
		t.deadlines++
	}
}

func (t tally) lossShare() float64  { return float64(t.lost) / float64(t.drains) }
func (t tally) meanStated() float64 { return t.statedSum / float64(t.drains) }
func (t tally) meanStop() float64   { return t.stopSum.Seconds() / float64(t.drains) }

// closeLoops runs every case, the cases spread over workers, rows in the cases' order.
func closeLoops(cases []loopCase, workers int) ([]loopRow, error) {
	results := make([][]loopRow, len(cases))
	errs := make([]error, len(cases))
	jobs := make(chan int)
	var wg sync.WaitGroup
	for range max(workers, 1) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				results[i], errs[i] = closeLoop(cases[i], pastDrains, newDrains)
			}
		}()
	}
	for i := range cases {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	var rows []loopRow
	for i, r := range results {
		if errs[i] != nil {
			return nil, fmt.Errorf("%s %s: %w", cases[i].shape.name, cases[i].family.name, errs[i])
		}
		rows = append(rows, r...)
	}
	return rows, nil
}

// closeLoop closes the loop on one model, for every guess and risk: past drains, their
// events read back and fitted as plan --lag-from fits them, new drains with the result.
func closeLoop(c loopCase, past, fresh int) ([]loopRow, error) {
	pastPlans := make([]drainPlan, past)
	for i := range pastPlans {
		pastPlans[i] = newDrainPlan(c.shape, c.family, pastSeedBase+uint64(i)+1)
	}
	newPlans := make([]drainPlan, fresh)
	for i := range newPlans {
		newPlans[i] = newDrainPlan(c.shape, c.family, newSeedBase+uint64(i)+1)
	}
	histogram, err := modelHistogram(pastPlans)
	if err != nil {
		return nil, err
	}
	histogramSource := lag.Source{Name: "kube-proxy histogram", Kind: lag.KubeProxyProgramming, Histogram: &histogram}
	type learnt struct {
		dist   risk.Distribution
		edsLag time.Duration
		fit    lag.Fit
		tally  tally
	}
	// The histogram does not depend on the past's guess: its settings and new drains once
	// per risk.
	fromHistogram := make([]learnt, len(loopRisks))
	for ri, p := range loopRisks {
		l, edsLag, err := planSettings([]lag.Source{histogramSource}, p)
		if err != nil {
			return nil, fmt.Errorf("histogram: %w", err)
		}
		fromHistogram[ri] = learnt{dist: l.Dist(), edsLag: edsLag, fit: l.Fit, tally: replayAll(newPlans, c.shape, l.Dist(), p)}
	}
	var rows []loopRow
	for _, g := range guesses() {
		var events bytes.Buffer
		for _, p := range pastPlans {
			o, d := p.replayRule(c.shape, g.cfg)
			if err := writeFinalEvent(&events, c.shape, p, g.cfg, o, d); err != nil {
				return nil, err
			}
		}
		samples, skipped, err := lag.ReadEvents(&events)
		if err != nil {
			return nil, err
		}
		source := lag.Source{Name: "past drains", Kind: lag.KindEvents, Samples: samples, Skipped: skipped}
		for ri, p := range loopRisks {
			l, edsLag, err := planSettings([]lag.Source{source}, p)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", g.name, err)
			}
			h := fromHistogram[ri]
			rows = append(rows, loopRow{shape: c.shape.name, family: c.family.name, guess: g.name, risk: p,
				samples: len(samples), censored: samples.Censored(), trueQuantile: c.family.quantile(1 - p),
				learnt: edsLag, fromHistogram: h.edsLag, learntDist: l.Dist().String(), histogramDist: h.dist.String(),
				warnings: l.Fit.Warnings, withLearnt: replayAll(newPlans, c.shape, l.Dist(), p), withHistogram: h.tally})
		}
	}
	return rows, nil
}

// planSettings are what plan --lag-from writes for sources at riskP: the fit (--lag-dist)
// and the eds-lag plan sizes on (Quantile(1 − risk), rounded up), from plan's own code.
func planSettings(sources []lag.Source, riskP float64) (*plan.LagFrom, time.Duration, error) {
	l, err := plan.NewLagFrom(sources, riskP)
	if err != nil {
		return nil, 0, err
	}
	p, err := plan.Recommend(plan.Input{P99: loopP99, LagFrom: l})
	if err != nil {
		return nil, 0, err
	}
	return l, p.Input.EDSLag, nil
}

// replayAll runs the drains with --lag-dist lag and --risk riskP.
func replayAll(plans []drainPlan, s shape, lagDist risk.Distribution, riskP float64) tally {
	var t tally
	for _, p := range plans {
		t.add(p.replay(s, lagDist, riskP))
	}
	return t
}

// readEvery is how often the socket table is read in regime (b): a client's let-go is seen
// at the first read after it.
const readEvery = evidence.ReadPolls * poll

// learntOf is each client's evidence that it learnt, as the hook reads it by the stop:
// regime (b), its let-go at the table's next read; without a mesh, its last arrival (its
// last new connection when it opens one per request, else its last request on a kept
// connection); Linkerd names no client.
func learntOf(s shape, p drainPlan, stop time.Duration) []drain.Learnt {
	var out []drain.Learnt
	for i, cl := range p.clients {
		addr := fmt.Sprintf("10.0.%d.%d", i/250, i%250+1)
		switch s.evidence {
		case poolsLetGo:
			seen := (cl.Lag + readEvery - 1) / readEvery * readEvery
			if seen <= stop {
				out = append(out, drain.Learnt{Client: addr, At: start.Add(seen), Evidence: drain.EvidenceLetGo})
			}
		case kernel:
			if n := count(cl.Arrivals, stop); n > 0 {
				kind := drain.EvidenceLastRequest
				if cl.Kind == "per-request" {
					kind = drain.EvidenceLastNewConnection
				}
				out = append(out, drain.Learnt{Client: addr, At: start.Add(cl.Arrivals[n-1]), Evidence: kind})
			}
		}
	}
	return out
}

// writeFinalEvent writes the drain's final event the way the hook does (zap's JSON, the
// hook's field names): reason, cut_by, mesh, lag_bound_ms, last_arrival_ms and, where the
// evidence names its clients, clients_learnt (drain.LearntFields).
func writeFinalEvent(w io.Writer, s shape, p drainPlan, cfg drain.RuleConfig, o outcome, d drain.Decision) error {
	reason := d.Reason
	if reason == "" {
		reason = drain.ReasonDeadline
	}
	res := drain.Result{Reason: reason, WindowTerm: d.Term, Clients: o.clients}
	meshName := string(s.sc.Mesh)
	fields := []zap.Field{zap.String("component", "prestop"), zap.String("reason", string(reason)),
		zap.String("mesh", meshName), zap.String("cut_by", res.CutBy()),
		zap.Int64("last_arrival_ms", p.arrivals[max(count(p.arrivals, o.stop)-1, 0)].Milliseconds())}
	if cfg.LagBound > 0 {
		fields = append(fields, zap.Int64("lag_bound_ms", cfg.LagBound.Milliseconds()))
	}
	if s.evidence != lastRequest {
		fields = append(fields, drain.LearntFields(start, learntOf(s, p, o.stop))...)
	}
	enc := zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig())
	core := zapcore.NewCore(enc, zapcore.AddSync(w), zapcore.InfoLevel)
	zap.New(core).Info("drain finished", fields...)
	return nil
}

// kubeProxyBounds are kube-proxy's kubeproxy_network_programming_duration_seconds bucket
// bounds (testdata/kube-proxy-1.29.metrics), +Inf apart.
var kubeProxyBounds = func() []float64 {
	b := []float64{0, 0.25, 0.5}
	for s := 1; s <= 60; s++ {
		b = append(b, float64(s))
	}
	for s := 65; s <= 120; s += 5 {
		b = append(b, float64(s))
	}
	for s := 150; s <= 300; s += 30 {
		b = append(b, float64(s))
	}
	return b
}()

// modelHistogram is the model's draws (every past drain's clients' true lags; without a mesh
// one per node) as kube-proxy would export them, written in the text format and read back
// with lag.ReadHistogram.
func modelHistogram(plans []drainPlan) (lag.Histogram, error) {
	var lags []float64
	var sum float64
	for _, p := range plans {
		seenNode := map[int]bool{}
		for _, c := range p.clients {
			if c.Kind != "" {
				// Without a mesh a client's lag is its node's kube-proxy's, which observes
				// each endpoint change once; an ingress controller's own lag is not in it.
				if c.Kind == "ingress" || seenNode[c.Node] {
					continue
				}
				seenNode[c.Node] = true
			}
			lags = append(lags, c.Lag.Seconds())
			sum += c.Lag.Seconds()
		}
	}
	sort.Float64s(lags)
	name := lag.KubeProxyProgramming
	var b strings.Builder
	fmt.Fprintf(&b, "# HELP %s In Cluster Network Programming Latency in seconds\n# TYPE %s histogram\n", name, name)
	for _, bound := range kubeProxyBounds {
		n := sort.Search(len(lags), func(i int) bool { return lags[i] > bound })
		fmt.Fprintf(&b, "%s_bucket{le=\"%g\"} %d\n", name, bound, n)
	}
	fmt.Fprintf(&b, "%s_bucket{le=\"+Inf\"} %d\n%s_sum %g\n%s_count %d\n", name, len(lags), name, sum, name, len(lags))
	return lag.ReadHistogram(strings.NewReader(b.String()), name)
}

// printLoop writes the loop's table: what was learnt against the model's truth, and the new
// drains' losses against twice the risk they stated.
func printLoop(w io.Writer, rows []loopRow) {
	fmt.Fprintf(w, "| shape | lag family | past drains ran at | --risk | samples (censored) | model's Q(1−risk) | eds-lag learnt (÷ model) | from histogram (÷ model, ÷ learnt) | %d new drains: lost | mean stated | lost ≤ 2 × stated | mean stop (s) | at the deadline | with histogram's: lost, stated, stop, at the deadline |\n", newDrains)
	fmt.Fprintln(w, "|---|---|---|---|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|")
	for _, r := range rows {
		ratio := func(a, b time.Duration) string { return fmt.Sprintf("%.2f", a.Seconds()/b.Seconds()) }
		within := "yes"
		if r.withLearnt.lossShare() > 2*r.withLearnt.meanStated() {
			within = "no"
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %d (%d) | %s | %s (%s) | %s (%s, %s) | %d | %s | %s | %.2f | %d | %d, %s, %.2f, %d |\n",
			r.shape, r.family, r.guess, sci(r.risk), r.samples, r.censored, fmtSeconds(r.trueQuantile),
			fmtSeconds(r.learnt), ratio(r.learnt, r.trueQuantile), fmtSeconds(r.fromHistogram), ratio(r.fromHistogram, r.trueQuantile), ratio(r.fromHistogram, r.learnt),
			r.withLearnt.lost, sci(r.withLearnt.meanStated()), within, r.withLearnt.meanStop(), r.withLearnt.deadlines,
			r.withHistogram.lost, sci(r.withHistogram.meanStated()), r.withHistogram.meanStop(), r.withHistogram.deadlines)
	}
}

func fmtSeconds(d time.Duration) string {
	return fmt.Sprintf("%.2fs", math.Round(d.Seconds()*100)/100)
}
