// Command bench is `make bench`: meshdrain's benchmark matrix in one run and one report.
//
// For every traffic shape of podsim.Traffics() it replays the pod's deletion (with the
// sidecar `meshdrain plan` recommends and no client retries, so that every lost request is
// seen) under the preStop strategies none, sleep:5s, sleep:15s, meshdrain and the oracle
// (which stops the app the moment the last request that will ever reach the pod has been
// answered), and prints one table: the floor (the last client's endpoint update), each
// strategy's app-stop time and losses, and whether meshdrain met its targets. Then the
// fallback shapes: clients whose connections tell the pod nothing, replayed with meshdrain's
// per-client evidence and without it. Then a pod without a sidecar (podsim.MeshlessTraffics,
// prestop --mesh none) against the best clean sleep on a 5 s grid. Then what one poll costs, measured side by side in the same run: the bytes of a filtered poll; meshdrain's
// own CPU and allocations per poll; the emulated Envoy's CPU per filtered poll against the
// unfiltered dump and against pilot-agent's own poll, at 110k stats; the binary's size and
// prestop's peak RSS.
//
// It needs nothing but Go and the binaries it is given. The parts read one at a time:
// main.go (flags, and the run in order), matrix.go (the shapes × strategies runs),
// targets.go (issue 21's targets), evidence.go (the per-client evidence table), meshless.go
// (a pod without a sidecar: prestop --mesh none against the best clean sleep), fallback.go
// (the clients whose connections tell the pod nothing: meshdrain with its per-client evidence
// against meshdrain without), costs.go (what a poll costs), emulator.go (the emulated
// Envoy those costs are measured on), prestop.go (the prestop process's own CPU and memory)
// and report.go (the tables and the JSON).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/meshdrain/meshdrain/pkg/sim/podsim"
)

// options are the bench's flags; the defaults are `make bench`'s run.
type options struct {
	meshdrainBin  string
	simBin        string
	seeds         string
	traffic       string
	timeScale     float64
	jsonOut       string
	costs         bool
	fallback      bool
	fallbackOnly  bool
	fallbackSeeds int
	meshless      bool
	meshlessOnly  bool
	meshlessShape string
	abruptSeeds   int
}

func (o *options) register(fs *flag.FlagSet) {
	fs.StringVar(&o.meshdrainBin, "meshdrain-bin", "bin/meshdrain", "the meshdrain binary: the preStop under test")
	fs.StringVar(&o.simBin, "sim-bin", "bin/meshdrain-sim", "the meshdrain-sim binary: the emulator of the cost measurements")
	fs.StringVar(&o.seeds, "seeds", "1,2,3", "seeds to replay each shape with (comma-separated); cells show the range over them")
	fs.StringVar(&o.traffic, "traffic", "", "only these shapes (comma-separated; default: all)")
	fs.Float64Var(&o.timeScale, "time-scale", 0.25, "simulator time scale")
	fs.StringVar(&o.jsonOut, "json", "", "also write every run's result to this file")
	fs.BoolVar(&o.costs, "costs", true, "measure the poll costs")
	fs.BoolVar(&o.fallback, "fallback", true, "replay the fallback shapes (clients whose connections tell the pod nothing) after the matrix")
	fs.BoolVar(&o.fallbackOnly, "fallback-only", false, "replay only the fallback shapes: no matrix, no poll costs")
	fs.IntVar(&o.fallbackSeeds, "fallback-seeds", 2, "replay the fallback shapes with the first N of --seeds (about 75s a seed)")
	fs.BoolVar(&o.meshless, "meshless", true, "replay the pod without a sidecar (prestop --mesh none) after the fallback shapes")
	fs.BoolVar(&o.meshlessOnly, "meshless-only", false, "replay only the pod without a sidecar: no matrix, no fallback, no poll costs")
	fs.StringVar(&o.meshlessShape, "meshless-traffic", "", "only these meshless shapes (comma-separated; default: all of mixed, per-request, keep-alive, ingress, no-traffic)")
	fs.IntVar(&o.abruptSeeds, "abrupt-seeds", 1, "replay the meshless shapes with an abrupt app with the first N of --seeds")
}

func main() {
	var opts options
	opts.register(flag.CommandLine)
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, opts); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// run is the bench in its order: the matrix, then the fallback shapes, then the poll costs,
// then the report, so that the costs are measured on a machine the runs no longer load.
func run(ctx context.Context, opts options) error {
	bin, err := absBinary(opts.meshdrainBin)
	if err != nil {
		return err
	}
	seeds, err := parseSeeds(opts.seeds)
	if err != nil {
		return err
	}
	if opts.fallbackSeeds < 1 {
		return fmt.Errorf("--fallback-seeds %d: want at least 1", opts.fallbackSeeds)
	}
	strats, err := parseStrategies(strategies)
	if err != nil {
		return err
	}
	m := matrix{meshdrainBin: bin, seeds: seeds, timeScale: opts.timeScale, strategies: strats}
	if opts.meshlessOnly {
		ml, err := m.runMeshless(ctx, opts.simBin, opts.meshlessShape, opts.abruptSeeds)
		if err != nil {
			return err
		}
		printMeshless(os.Stdout, ml)
		if opts.jsonOut != "" {
			return writeJSONWith(opts.jsonOut, nil, nil, nil, ml)
		}
		return nil
	}
	if opts.fallbackOnly {
		fb, err := m.runFallback(ctx, opts.fallbackSeeds)
		if err != nil {
			return err
		}
		printFallback(os.Stdout, fb)
		if opts.jsonOut != "" {
			return writeJSON(opts.jsonOut, nil, fb, nil)
		}
		return nil
	}
	started := time.Now()
	rows, err := m.run(ctx, opts.traffic)
	if err != nil {
		return err
	}
	wall := time.Since(started)

	var fb *fallbackReport
	if opts.fallback {
		if fb, err = m.runFallback(ctx, opts.fallbackSeeds); err != nil {
			return err
		}
	}

	var ml *meshlessReport
	if opts.meshless {
		if ml, err = m.runMeshless(ctx, opts.simBin, opts.meshlessShape, opts.abruptSeeds); err != nil {
			return err
		}
	}

	var c *costReport
	if opts.costs {
		fmt.Fprintln(os.Stderr, "bench: measuring poll costs")
		if c, err = measureCosts(ctx, bin, opts.simBin); err != nil {
			return fmt.Errorf("poll costs: %w", err)
		}
	}
	printReport(os.Stdout, rows, seeds, opts.timeScale, wall, fb, nil)
	if ml != nil {
		printMeshless(os.Stdout, ml)
	}
	if c != nil {
		printCosts(os.Stdout, c)
	}
	if opts.jsonOut != "" {
		return writeJSONWith(opts.jsonOut, rows, fb, c, ml)
	}
	return nil
}

// absBinary checks that the preStop binary exists before any run, so that a missing build
// fails at once rather than in the first simulated pod, and returns its absolute path.
func absBinary(bin string) (string, error) {
	if _, err := os.Stat(bin); err != nil {
		return "", fmt.Errorf("--meshdrain-bin: %w (run make build first)", err)
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

func parseSeeds(list string) ([]uint64, error) {
	var seeds []uint64
	for _, s := range strings.Split(list, ",") {
		n, err := strconv.ParseUint(strings.TrimSpace(s), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("--seeds %q: %w", list, err)
		}
		seeds = append(seeds, n)
	}
	return seeds, nil
}

func parseStrategies(names []string) ([]podsim.Strategy, error) {
	var strats []podsim.Strategy
	for _, s := range names {
		st, err := podsim.ParseStrategy(s)
		if err != nil {
			return nil, err
		}
		strats = append(strats, st)
	}
	return strats, nil
}
