package main

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/meshdrain/meshdrain/pkg/sim/podsim"
)

// The distributions given to the rule are the families' own: their quantiles where the CDF
// says.
func TestFamiliesQuantiles(t *testing.T) {
	want := map[string]time.Duration{"lognormal": 1500 * time.Millisecond, "pareto": time.Duration(0.4 * math.Pow(2, 0.4) * float64(time.Second))}
	for _, f := range families() {
		d, err := f.distribution()
		if err != nil {
			t.Fatalf("%s: %v", f.name, err)
		}
		if w, ok := want[f.name]; ok {
			if got := d.Quantile(0.5); got < w-time.Millisecond || got > w+time.Millisecond {
				t.Errorf("%s: median %v, want %v", f.name, got, w)
			}
		}
		if d.Last() != lagCap {
			t.Errorf("%s: last lag %v, want the cap %v", f.name, d.Last(), lagCap)
		}
	}
}

// A few seeds of every shape: the rule stops, states a figure at most the risk when it stops
// before the deadline, and a looser risk never stops later on average.
func TestCalibrateFewSeeds(t *testing.T) {
	cells, err := calibrate(shapes(), families()[:1], 3, 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(cells) != len(shapes())*len(risks) {
		t.Fatalf("%d cells", len(cells))
	}
	for i, c := range cells {
		if c.drains == 0 || c.meanStop() <= 0 {
			t.Errorf("%s %s %g: %d drains, mean stop %.2fs", c.shape, c.family, c.risk, c.drains, c.meanStop())
		}
		if c.meanStop() < deadline.Seconds() && c.meanStated() > c.risk {
			t.Errorf("%s %s %g: stated %g above the risk", c.shape, c.family, c.risk, c.meanStated())
		}
		if i%len(risks) > 0 && c.meanStop() < cells[i-1].meanStop()-poll.Seconds() {
			t.Errorf("%s %s: risk %g stops at %.2fs on average, before risk %g (%.2fs)", c.shape, c.family, c.risk, c.meanStop(), cells[i-1].risk, cells[i-1].meanStop())
		}
	}
	var table strings.Builder
	printTable(&table, cells)
	if !strings.Contains(table.String(), "| none: per-request | lognormal | 1.0e-03 | 6 |") {
		t.Errorf("table:\n%s", table.String())
	}
	if svg := drawSVG(cells); !strings.HasPrefix(svg, "<svg") || !strings.Contains(svg, "sidecars (b)") {
		t.Errorf("svg: %.200s", svg)
	}
}

// The replay sees a loss when there is one: a client without a mesh that sends at 1s, then
// stays silent past where the figure lets the app stop (0.1 at 8.4s), and sends again at 30s.
func TestReplaySeesALoss(t *testing.T) {
	var s shape
	for _, sh := range shapes() {
		if sh.name == "none: per-request" {
			s = sh
		}
	}
	lag, err := families()[0].distribution()
	if err != nil {
		t.Fatal(err)
	}
	p := drainPlan{clients: []podsim.PlannedClient{{Lag: 31 * time.Second, Arrivals: []time.Duration{time.Second, 30 * time.Second}}},
		arrivals: []time.Duration{time.Second, 30 * time.Second}}
	o := p.replay(s, lag, 0.1)
	if !o.lost || o.stop >= 30*time.Second || o.stated > 0.1 {
		t.Errorf("%+v: want a stop before 30s at a figure <= 0.1, and the request at 30s lost", o)
	}
	p.clients[0].Arrivals, p.arrivals = p.arrivals[:1], p.arrivals[:1]
	if o := p.replay(s, lag, 0.1); o.lost {
		t.Errorf("%+v: lost without a request after the stop", o)
	}
}
