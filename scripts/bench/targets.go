package main

import (
	"fmt"
	"strings"

	"github.com/meshdrain/meshdrain/pkg/sim/podsim"
)

// Loss targets of issue 9: zero in these shapes, and never more than sleep:15s anywhere.
var mustNotLose = map[string]bool{"steady": true, "bursts": true, "client-bursts": true, "sparse": true,
	"late-client": true, "no-traffic": true, "tcp": true}

// verdict checks meshdrain against the targets in one traffic row: "met", or
// "NOT MET: " and every miss once, seed by seed.
func verdict(r row) string {
	s15 := r.results["sleep:15s"]
	var notes []string
	for i, m := range r.results["meshdrain"] {
		var sleep15 *podsim.Result
		if i < len(s15) {
			sleep15 = &s15[i]
		}
		notes = append(notes, lossMisses(r.traffic.Name, m, sleep15)...)
		notes = append(notes, latencyMisses(r.traffic.Name, m)...)
	}
	if len(notes) == 0 {
		return "met"
	}
	return "NOT MET: " + strings.Join(dedupe(notes), "; ")
}

// lossMisses are the loss targets meshdrain missed in one seed: anything lost where nothing
// may be, and more lost than sleep:15s lost with the same seed (nil: not run).
func lossMisses(traffic string, m podsim.Result, sleep15 *podsim.Result) []string {
	var notes []string
	if mustNotLose[traffic] && m.ClientFailures > 0 {
		notes = append(notes, fmt.Sprintf("lost %d", m.ClientFailures))
	}
	if sleep15 != nil && m.ClientFailures > sleep15.ClientFailures {
		notes = append(notes, fmt.Sprintf("lost %d > sleep:15s %d", m.ClientFailures, sleep15.ClientFailures))
	}
	return notes
}

// latencyMisses are the latency targets meshdrain missed in one seed, measured from the
// floor: a stream must never hold the drain to its deadline; the reference shape stops
// within 1.2s; every other shape within its own longest pause + 1.2s, since no rule that
// reads silence can tell a pause from the end faster than the pause.
func latencyMisses(traffic string, m podsim.Result) []string {
	late := m.AppStopS - m.LastClientLagS
	switch {
	case traffic == "streams":
		if m.Meshdrain != nil && m.Meshdrain.Reason == "deadline" {
			return []string{"deadline"}
		}
	case traffic == "steady":
		if late > 1.2 {
			return []string{fmt.Sprintf("%.1fs > 1.2s", late)}
		}
	default:
		if late > m.LongestGapS+1.2 {
			return []string{fmt.Sprintf("%.1fs > gap+1.2 = %.1fs", late, m.LongestGapS+1.2)}
		}
	}
	return nil
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
