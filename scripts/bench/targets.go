package main

import (
	"fmt"
	"strings"

	"github.com/meshdrain/meshdrain/pkg/sim/podsim"
)

// Issue 21's targets, as decided (its ratio to the hindsight-best whole-second sleep is
// withdrawn: in a shape whose last request comes late, that sleep is the last request rounded
// up, which no rule that waits for evidence can meet). In every shape and both regimes:
// nothing lost, and no later than the best clean sleep on the grid + sleepSlack. In regime
// (b), where clients keep their idle connections until they let go, these shapes stop within
// evidenceSlack of the floor.
var evidenceShapes = map[string]bool{"sparse": true, "clients-500": true, "clients-2000": true, "long-requests": true}

// evidenceSlack is 1.2 s plus one poll (200 ms).
const evidenceSlack = 1.4

// Issue 26's targets for the matrix table, plan's default route (regime b), classic and
// native: nothing lost in any shape; in these shapes meshdrain stops within stopSlack of the
// floor; and in every shape the pod is gone no later than behind today's route, regime (a),
// in the same seed.
var stopShapes = map[string]bool{"steady": true, "bursts": true, "client-bursts": true, "sparse": true, "late-client": true,
	"clients-500": true, "clients-2000": true}

const stopSlack = 1.2

// verdict checks plan's default route in the matrix table against issue 26's targets.
func verdict(r row) string {
	var notes []string
	a := r.results[regimeA]
	for _, route := range []struct{ key, label string }{{"meshdrain", "classic"}, {native, "native"}} {
		for i, m := range r.results[route.key] {
			if m.ClientFailures > 0 {
				notes = append(notes, fmt.Sprintf("%s lost %d", route.label, m.ClientFailures))
			}
			if stopShapes[r.traffic.Name] && m.AppStopS-m.LastClientLagS > stopSlack {
				notes = append(notes, fmt.Sprintf("%s %.1fs after the floor > %.1fs", route.label, m.AppStopS-m.LastClientLagS, stopSlack))
			}
			if i < len(a) && m.PodGoneS > a[i].PodGoneS {
				notes = append(notes, fmt.Sprintf("%s pod gone %.1fs > regime (a) %.1fs", route.label, m.PodGoneS, a[i].PodGoneS))
			}
		}
	}
	return judge(notes)
}

// evidenceVerdict checks both regimes against issue 21's targets as decided.
func evidenceVerdict(r row) string {
	return judge(append(targetMisses(r, regimeA, false), targetMisses(r, "meshdrain", true)...))
}

func judge(notes []string) string {
	if len(notes) == 0 {
		return "met"
	}
	return "NOT MET: " + strings.Join(dedupe(notes), "; ")
}

// targetMisses are the targets one regime's runs missed, seed by seed.
func targetMisses(r row, key string, regimeB bool) []string {
	sleep := bestCleanSleep(r.results["meshdrain"])
	label := "(a)"
	if regimeB {
		label = "(b)"
	}
	var notes []string
	for _, m := range r.results[key] {
		notes = append(notes, runMisses(r.traffic.Name, label, m, sleep, regimeB)...)
	}
	return notes
}

func runMisses(traffic, label string, m podsim.Result, sleep float64, regimeB bool) []string {
	var notes []string
	if m.ClientFailures > 0 {
		notes = append(notes, fmt.Sprintf("%s lost %d", label, m.ClientFailures))
	}
	if m.AppStopS > sleep+sleepSlack {
		notes = append(notes, fmt.Sprintf("%s %.1fs > sleep %.0fs + %.1f", label, m.AppStopS, sleep, sleepSlack))
	}
	if regimeB && evidenceShapes[traffic] && m.AppStopS-m.LastClientLagS > evidenceSlack {
		notes = append(notes, fmt.Sprintf("%s %.1fs after the floor > %.1fs", label, m.AppStopS-m.LastClientLagS, evidenceSlack))
	}
	return notes
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
