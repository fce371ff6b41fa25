// Command calibrate is `make calibrate`: it checks that the risk figure the hook states
// (prestop --lag-dist and --risk, docs/decision-rule.md) is the share of drains it loses a
// request in (issue 39 item 4).
//
// For each traffic shape (shapes: regime (b) sidecars, Linkerd, and without a mesh the mixed,
// keep-alive, per-request and ingress shapes, their clients planned by podsim) and each lag
// family (families: lognormal, a heavy tail, a slow node among fast ones), it replays seeded
// drains through the decision rule alone, polled every 200 ms (no network, no real time),
// with the family's true distribution as --lag-dist, at --risk 10⁻¹, 10⁻² and 10⁻³ (the same
// seeds at each risk; twice as many at 10⁻³). A drain loses when a request that the plan
// sends to the pod arrives after the rule's stop. It prints the reliability table (losses
// against the mean risk stated at the stop) and draws it as an SVG.
//
// On the first --frontier-seeds drains of each shape and family it also draws the frontier
// (issue 39 item 6, frontier.go): meshdrain at --risk 10⁻¹..10⁻⁴ against a fixed sleep of
// 1..60s on the same drains. With --loop it closes the loop (item 5, loop.go): past drains'
// final events and a kube-proxy histogram of the same lag model, fitted by plan --lag-from's
// code, set the --lag-dist and --risk of new drains.
package main

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"sync"
	"time"

	"github.com/meshdrain/meshdrain/pkg/hook/risk"
)

// risks are the --risk values calibrated; the last gets seedsFactor times the seeds.
var risks = []float64{1e-1, 1e-2, 1e-3}

const seedsFactor = 2

func main() {
	seeds := flag.Int("seeds", 10000, "drains per shape, family and risk (twice as many at 10⁻³)")
	svg := flag.String("svg", "", "write the reliability diagram to this file")
	workers := flag.Int("workers", runtime.GOMAXPROCS(0), "drains replayed at once")
	frontierSeeds := flag.Int("frontier-seeds", 10000, "drains per shape and family (the first seeds) on which --risk 10⁻¹..10⁻⁴ meets a fixed sleep of 1..60s (issue 39 item 6); 0: no frontier")
	frontierSVG := flag.String("frontier-svg", "", "write the frontier of a few shapes to this file")
	loop := flag.Bool("loop", true, "close the loop (issue 39 item 5): learn the settings from past drains' final events and a histogram, then replay new drains with them")
	flag.Parse()
	began := time.Now()
	cells, fronts, err := calibrateWithFrontier(shapes(), families(), uint64(*seeds), uint64(max(*frontierSeeds, 0)), *workers)
	if err != nil {
		fmt.Fprintln(os.Stderr, "calibrate:", err)
		os.Exit(1)
	}
	printTable(os.Stdout, cells)
	if len(fronts) > 0 {
		fmt.Println()
		printFrontier(os.Stdout, fronts)
		fmt.Println()
		printFrontierSummary(os.Stdout, fronts)
		if *frontierSVG != "" {
			if err := os.WriteFile(*frontierSVG, []byte(drawFrontierSVG(fronts, frontierDrawn)), 0o644); err != nil {
				fmt.Fprintln(os.Stderr, "calibrate:", err)
				os.Exit(1)
			}
			fmt.Printf("wrote %s\n", *frontierSVG)
		}
	}
	if *loop {
		fmt.Println()
		rows, err := closeLoops(loopCases(), *workers)
		if err != nil {
			fmt.Fprintln(os.Stderr, "calibrate:", err)
			os.Exit(1)
		}
		printLoop(os.Stdout, rows)
	}
	if *svg != "" {
		if err := os.WriteFile(*svg, []byte(drawSVG(cells)), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "calibrate:", err)
			os.Exit(1)
		}
		fmt.Printf("wrote %s\n", *svg)
	}
	fmt.Printf("%d seeds per shape, family and risk (%d at 10⁻³), %d workers, %s\n", *seeds, *seeds*seedsFactor, *workers, time.Since(began).Round(time.Second))
}

// cell is the tally of one shape, family and risk.
type cell struct {
	shape, family string
	risk          float64
	drains, lost  int
	statedSum     float64
	stopSum       time.Duration
}

func (c cell) lossShare() float64  { return float64(c.lost) / float64(c.drains) }
func (c cell) meanStated() float64 { return c.statedSum / float64(c.drains) }
func (c cell) meanStop() float64   { return c.stopSum.Seconds() / float64(c.drains) }

// calibrate replays seeds drains of every shape and family at each risk (seedsFactor times
// as many at the last), the seeds spread over workers.
func calibrate(ss []shape, fs []family, seeds uint64, workers int) ([]cell, error) {
	cells, _, err := calibrateWithFrontier(ss, fs, seeds, 0, workers)
	return cells, err
}

// calibrateWithFrontier is calibrate, and on the first frontierSeeds seeds (at most seeds) of
// each shape and family the frontier: the same drains at every frontierRisks and under every
// fixed sleep.
func calibrateWithFrontier(ss []shape, fs []family, seeds, frontierSeeds uint64, workers int) ([]cell, []frontier, error) {
	frontierSeeds = min(frontierSeeds, seeds)
	dists := make([]risk.Distribution, len(fs))
	for i, f := range fs {
		d, err := f.distribution()
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", f.name, err)
		}
		dists[i] = d
	}
	cells := make([]cell, 0, len(ss)*len(fs)*len(risks))
	for _, s := range ss {
		for _, f := range fs {
			for _, p := range risks {
				cells = append(cells, cell{shape: s.name, family: f.name, risk: p})
			}
		}
	}
	var fronts []frontier
	if frontierSeeds > 0 {
		fronts = make([]frontier, len(ss)*len(fs))
	}
	type job struct{ si, fi int }
	jobs := make(chan job)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range max(workers, 1) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				local := make([]cell, len(risks))
				front := frontier{shape: ss[j.si].name, family: fs[j.fi].name}
				outcomes := make([]outcome, len(frontierRisks))
				for seed := uint64(1); seed <= seeds*seedsFactor; seed++ {
					plan := newDrainPlan(ss[j.si], fs[j.fi], seed)
					for ri, p := range risks {
						if ri < len(risks)-1 && seed > seeds {
							continue
						}
						o := plan.replay(ss[j.si], dists[j.fi], p)
						outcomes[ri] = o
						c := &local[ri]
						c.drains++
						c.statedSum += o.stated
						c.stopSum += o.stop
						if o.lost {
							c.lost++
						}
					}
					if seed <= frontierSeeds {
						for ri := len(risks); ri < len(frontierRisks); ri++ {
							outcomes[ri] = plan.replay(ss[j.si], dists[j.fi], frontierRisks[ri])
						}
						front.add(plan, outcomes)
					}
				}
				mu.Lock()
				if fronts != nil {
					fronts[j.si*len(fs)+j.fi] = front
				}
				for ri := range risks {
					c := &cells[(j.si*len(fs)+j.fi)*len(risks)+ri]
					c.drains, c.lost, c.statedSum, c.stopSum = local[ri].drains, local[ri].lost, local[ri].statedSum, local[ri].stopSum
				}
				mu.Unlock()
			}
		}()
	}
	for si := range ss {
		for fi := range fs {
			jobs <- job{si, fi}
		}
	}
	close(jobs)
	wg.Wait()
	return cells, fronts, nil
}
