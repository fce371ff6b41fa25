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
	flag.Parse()
	began := time.Now()
	cells, err := calibrate(shapes(), families(), uint64(*seeds), *workers)
	if err != nil {
		fmt.Fprintln(os.Stderr, "calibrate:", err)
		os.Exit(1)
	}
	printTable(os.Stdout, cells)
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
	dists := make([]risk.Distribution, len(fs))
	for i, f := range fs {
		d, err := f.distribution()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f.name, err)
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
				for seed := uint64(1); seed <= seeds*seedsFactor; seed++ {
					plan := newDrainPlan(ss[j.si], fs[j.fi], seed)
					for ri, p := range risks {
						if ri < len(risks)-1 && seed > seeds {
							continue
						}
						o := plan.replay(ss[j.si], dists[j.fi], p)
						c := &local[ri]
						c.drains++
						c.statedSum += o.stated
						c.stopSum += o.stop
						if o.lost {
							c.lost++
						}
					}
				}
				mu.Lock()
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
	return cells, nil
}
