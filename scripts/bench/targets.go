package main

import (
	"fmt"
	"strings"

	"github.com/meshdrain/meshdrain/pkg/sim/podsim"
)

// Issue 21's targets (issue 9's latency and allocation targets are withdrawn). In every shape
// and both regimes: nothing lost, and no later than the best fixed sleep that loses nothing.
// In regime (b), where clients keep their idle connections until they let go, these shapes
// stop within evidenceSlack of the floor.
var evidenceShapes = map[string]bool{"sparse": true, "clients-500": true, "clients-2000": true, "long-requests": true}

// evidenceSlack is 1.2 s plus one poll (200 ms).
const evidenceSlack = 1.4

// verdict checks meshdrain's regime (a) runs in the matrix table: nothing lost, and no later
// than the best loss-free sleep.
func verdict(r row) string {
	return judge(targetMisses(r, "meshdrain", false))
}

// evidenceVerdict checks both regimes against the targets.
func evidenceVerdict(r row) string {
	return judge(append(targetMisses(r, "meshdrain", false), targetMisses(r, deferred, true)...))
}

func judge(notes []string) string {
	if len(notes) == 0 {
		return "met"
	}
	return "NOT MET: " + strings.Join(dedupe(notes), "; ")
}

// targetMisses are the targets one regime's runs missed, seed by seed.
func targetMisses(r row, key string, regimeB bool) []string {
	sleep := bestSleep(r.results["meshdrain"])
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
	if m.AppStopS > sleep {
		notes = append(notes, fmt.Sprintf("%s %.1fs > sleep %.0fs", label, m.AppStopS, sleep))
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
