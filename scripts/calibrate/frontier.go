package main

import (
	"fmt"
	"io"
	"math"
	"strings"
	"time"
)

// frontierRisks are the --risk values on the frontier (issue 39 item 6): the calibrated ones,
// then 10⁻⁴, replayed on the frontier's seeds only.
var frontierRisks = append(append([]float64(nil), risks...), 1e-4)

// maxSleep is the longest fixed sleep compared: a preStop `sleep S` for S = 1..maxSleep
// seconds, the usual answer to the problem meshdrain solves.
const maxSleep = 60

// point is meshdrain's tally at one risk on the frontier's drains.
type point struct {
	lost    int
	stopSum time.Duration
}

// frontier is one shape and family: meshdrain at each frontierRisks and every fixed sleep,
// facing the same seeded drains.
type frontier struct {
	shape, family string
	drains        int
	meshdrain     []point // by frontierRisks
	// sleepLost[S] counts the drains in which a request arrived after S seconds: a sleep of S
	// loses them (its stop is S in every drain).
	sleepLost [maxSleep + 1]int
}

// add tallies one drain: its outcomes at each frontierRisks, and which sleeps it defeats.
func (f *frontier) add(p drainPlan, outcomes []outcome) {
	f.drains++
	if f.meshdrain == nil {
		f.meshdrain = make([]point, len(outcomes))
	}
	for ri, o := range outcomes {
		f.meshdrain[ri].stopSum += o.stop
		if o.lost {
			f.meshdrain[ri].lost++
		}
	}
	if len(p.arrivals) == 0 {
		return
	}
	last := p.arrivals[len(p.arrivals)-1]
	for s := 1; s <= maxSleep && last > time.Duration(s)*time.Second; s++ {
		f.sleepLost[s]++
	}
}

func (f frontier) mdLoss(ri int) float64 { return float64(f.meshdrain[ri].lost) / float64(f.drains) }
func (f frontier) mdStop(ri int) float64 {
	return f.meshdrain[ri].stopSum.Seconds() / float64(f.drains)
}
func (f frontier) sleepLoss(s int) float64 { return float64(f.sleepLost[s]) / float64(f.drains) }

// dominatedBy is the shortest sleep that dominates meshdrain at risk ri (no later on average,
// no more losses, one of them strictly), 0 when none does.
func (f frontier) dominatedBy(ri int) int {
	stop, lost := f.mdStop(ri), f.meshdrain[ri].lost
	for s := 1; s <= maxSleep && float64(s) <= stop; s++ {
		if f.sleepLost[s] <= lost && (float64(s) < stop || f.sleepLost[s] < lost) {
			return s
		}
	}
	return 0
}

// nearestSleep is the shortest sleep that loses no more drains than meshdrain at risk ri:
// the sleep an operator would need for meshdrain's safety. 0 when no sleep up to maxSleep is
// that safe.
func (f frontier) nearestSleep(ri int) int {
	for s := 1; s <= maxSleep; s++ {
		if f.sleepLost[s] <= f.meshdrain[ri].lost {
			return s
		}
	}
	return 0
}

// sleepWithin is the shortest sleep that loses at most a share p of the drains: the sleep an
// operator who accepts meshdrain's stated risk would need. 0 when none up to maxSleep does.
func (f frontier) sleepWithin(p float64) int {
	for s := 1; s <= maxSleep; s++ {
		if f.sleepLoss(s) <= p {
			return s
		}
	}
	return 0
}

// closest is the risk at which the nearest sleep comes closest to meshdrain's mean stop,
// and that gap (sleep − mean stop, seconds; +Inf when no sleep is as safe at any risk).
func (f frontier) closest() (ri int, gap float64) {
	gap = math.Inf(1)
	for r := range frontierRisks {
		if s := f.nearestSleep(r); s > 0 && float64(s)-f.mdStop(r) < gap {
			ri, gap = r, float64(s)-f.mdStop(r)
		}
	}
	return ri, gap
}

// printFrontier writes the frontier table: per shape, family and risk, meshdrain's point, the
// shortest sleep that is as safe, and the gap between them.
func printFrontier(w io.Writer, fronts []frontier) {
	fmt.Fprintln(w, "| shape | lag family | --risk | drains | meshdrain mean stop (s) | meshdrain loss | shortest sleep as safe (s) | its loss | sleep − stop (s) | dominated by a sleep | shortest sleep losing ≤ --risk (s, its loss) |")
	fmt.Fprintln(w, "|---|---|---|---:|---:|---:|---:|---:|---:|---|---:|")
	for _, f := range fronts {
		for ri, p := range frontierRisks {
			s := f.nearestSleep(ri)
			sleep, loss, gap := "> 60", "-", "-"
			if s > 0 {
				sleep, loss, gap = fmt.Sprint(s), sci(f.sleepLoss(s)), fmt.Sprintf("%+.2f", float64(s)-f.mdStop(ri))
			}
			within := "> 60"
			if s := f.sleepWithin(p); s > 0 {
				within = fmt.Sprintf("%d, %s", s, sci(f.sleepLoss(s)))
			}
			fmt.Fprintf(w, "| %s | %s | %s | %d | %.2f | %s | %s | %s | %s | %s | %s |\n", f.shape, f.family, sci(p), f.drains,
				f.mdStop(ri), sci(f.mdLoss(ri)), sleep, loss, gap, dominated(f, ri), within)
		}
	}
}

func dominated(f frontier, ri int) string {
	if s := f.dominatedBy(ri); s > 0 {
		return fmt.Sprintf("yes: sleep %ds (loss %s)", s, sci(f.sleepLoss(s)))
	}
	return "no"
}

// printFrontierSummary writes one line per shape and family: whether any of meshdrain's
// points is dominated, and where a sleep comes closest.
func printFrontierSummary(w io.Writer, fronts []frontier) {
	fmt.Fprintln(w, "| shape | lag family | any point dominated | closest at --risk | meshdrain (stop s, loss) | sleep (s, loss) | sleep − stop (s) |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---:|")
	for _, f := range fronts {
		var dom []string
		for ri, p := range frontierRisks {
			if f.dominatedBy(ri) > 0 {
				dom = append(dom, sci(p))
			}
		}
		anyDominated := "no"
		if len(dom) > 0 {
			anyDominated = "yes, at " + strings.Join(dom, ", ")
		}
		ri, gap := f.closest()
		if math.IsInf(gap, 1) {
			fmt.Fprintf(w, "| %s | %s | %s | - | - | no sleep ≤ 60s as safe | - |\n", f.shape, f.family, anyDominated)
			continue
		}
		s := f.nearestSleep(ri)
		fmt.Fprintf(w, "| %s | %s | %s | %s | %.2f, %s | %d, %s | %+.2f |\n", f.shape, f.family, anyDominated, sci(frontierRisks[ri]),
			f.mdStop(ri), sci(f.mdLoss(ri)), s, sci(f.sleepLoss(s)), gap)
	}
}

// frontierDrawn are the shapes the frontier SVG draws: one with a mesh whose clients show
// they learnt, and one without a mesh where the figure must cover clients it cannot see.
var frontierDrawn = []string{"sidecars (b)", "none: per-request"}

// drawFrontierSVG draws, for each shape named, every family's fixed-sleep curve (loss share
// against the sleep, 1..60s) and meshdrain's points at each risk (loss share against the mean
// stop), the loss on a log scale from 10⁻⁵; a share of 0 is drawn on the bottom line.
func drawFrontierSVG(fronts []frontier, drawn []string) string {
	const (
		panelW, panelH = 380.0, 300.0
		left, top, gap = 60.0, 50.0, 60.0
		decadesLow     = -5.0
	)
	width, height := left+float64(len(drawn))*(panelW+gap)+120, top+panelH+70
	colours := []string{"#1f77b4", "#ff7f0e", "#2ca02c"}
	var b strings.Builder
	fmt.Fprintf(&b, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" font-family=\"sans-serif\" font-size=\"12\">\n", width, height)
	fmt.Fprintf(&b, "<rect width=\"%.0f\" height=\"%.0f\" fill=\"white\"/>\n", width, height)
	fmt.Fprintf(&b, "<text x=\"%.0f\" y=\"22\" font-size=\"14\">make calibrate: meshdrain at --risk 1e-1..1e-4 (marks) against a fixed sleep of 1..60s (lines), same drains</text>\n", left)
	familiesSeen := []string{}
	for pi, name := range drawn {
		x0 := left + float64(pi)*(panelW+gap)
		x := func(sec float64) float64 { return x0 + math.Min(sec, maxSleep)/maxSleep*panelW }
		y := func(share float64) float64 {
			d := decadesLow
			if share > 0 {
				d = math.Max(math.Log10(share), decadesLow)
			}
			return top + panelH - (d-decadesLow)/-decadesLow*panelH
		}
		fmt.Fprintf(&b, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"13\">%s</text>\n", x0, top-8, name)
		for d := decadesLow; d <= 0; d++ {
			label := fmt.Sprintf("1e%.0f", d)
			if d == decadesLow {
				label = "≤1e-5, 0"
			}
			fmt.Fprintf(&b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", x0, y(math.Pow(10, d)), x0+panelW, y(math.Pow(10, d)))
			fmt.Fprintf(&b, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n", x0-4, y(math.Pow(10, d))+4, label)
		}
		for sec := 0.0; sec <= maxSleep; sec += 10 {
			fmt.Fprintf(&b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", x(sec), top, x(sec), top+panelH)
			fmt.Fprintf(&b, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%.0f</text>\n", x(sec), top+panelH+16, sec)
		}
		fmt.Fprintf(&b, "<rect x=\"%.1f\" y=\"%.0f\" width=\"%.0f\" height=\"%.0f\" fill=\"none\" stroke=\"#444\"/>\n", x0, top, panelW, panelH)
		fmt.Fprintf(&b, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">stop (s): the sleep, or meshdrain's mean stop</text>\n", x0+panelW/2, top+panelH+34)
		for _, f := range fronts {
			if f.shape != name || f.drains == 0 {
				continue
			}
			if index(familiesSeen, f.family) < 0 {
				familiesSeen = append(familiesSeen, f.family)
			}
			colour := colours[index(familiesSeen, f.family)%len(colours)]
			var pts []string
			for s := 1; s <= maxSleep; s++ {
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(float64(s)), y(f.sleepLoss(s))))
			}
			fmt.Fprintf(&b, "<polyline points=\"%s\" fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\"/>\n", strings.Join(pts, " "), colour)
			for ri, p := range frontierRisks {
				cx, cy := x(f.mdStop(ri)), y(f.mdLoss(ri))
				b.WriteString(marker(index(familiesSeen, f.family), cx, cy, colour, "white"))
				fmt.Fprintf(&b, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"9\" fill=\"%s\">%s</text>\n", cx+6, cy-5, colour, sci(p))
			}
		}
	}
	lx := left + float64(len(drawn))*(panelW+gap) - gap + 16
	for i, f := range familiesSeen {
		ly := top + 10 + float64(i)*18
		b.WriteString(marker(i, lx+5, ly-4, colours[i%len(colours)], "white"))
		fmt.Fprintf(&b, "<text x=\"%.1f\" y=\"%.1f\">%s</text>\n", lx+16, ly, f)
	}
	b.WriteString("</svg>\n")
	return b.String()
}
