package status

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/meshdrain/meshdrain/pkg/hook/drain"
	"github.com/meshdrain/meshdrain/pkg/hook/risk"
)

// Risk is the figure prestop --lag-dist would state at this sample (its final event's risk
// and risk_from), from the same evidence and the same function (drain.RiskClients): the
// probability that some client still routes to the pod. status cannot see when the pod's
// preStop started, so the figure counts from status's first sample (Since), from which the
// clients are judged too: the figure of a hook that started then.
type Risk struct {
	Figure float64 `json:"figure"`
	// Level is --risk: the hook may stop once Figure is at most Level (and its other
	// conditions hold).
	Level float64 `json:"level"`
	// Since is status's first sample, taken as the preStop's start.
	Since      time.Time `json:"since"`
	Unseen     int       `json:"unseen"`
	Holding    int       `json:"holding"`
	Sending    int       `json:"sending"`
	NoEvidence int       `json:"no_evidence"`
}

// riskWatch computes the figure at every sample of a status run from the lag distribution
// (status --lag-dist), the clients as counted at the sample, and, where there are no
// per-client counts (a Linkerd proxy, --clients=false, an unreadable table), the requests:
// as the hook does without evidence, one client not seen yet and one sender at the last
// sample whose requests moved.
type riskWatch struct {
	lag   risk.Distribution
	level float64

	first       time.Time
	requests    *float64
	lastArrival time.Duration
	arrived     bool
	// firstRequests is the request counters' sum at the first sample: the senders' rate is
	// measured from it.
	firstRequests *float64
}

// fill sets the report's Risk; nothing without a distribution.
func (w *riskWatch) fill(r *Report) {
	if w.lag.IsZero() {
		return
	}
	if w.first.IsZero() {
		w.first = r.SampledAt
		if r.CountedSince != nil {
			// The kernel's clients count from its first read, which a one-shot status
			// takes --interval before the sample it shows.
			w.first = *r.CountedSince
		}
	}
	at := r.SampledAt.Sub(w.first)
	if total := requestsTotal(r); total != nil {
		if w.requests != nil && *total != *w.requests {
			w.lastArrival, w.arrived = at, true
		}
		w.requests = total
		if w.firstRequests == nil {
			w.firstRequests = total
		}
	}
	var rate float64
	if w.requests != nil && w.firstRequests != nil && at > 0 {
		rate = max(*w.requests-*w.firstRequests, 0) / at.Seconds()
	}
	since, from := drain.RiskClients(w.first, r.counts, w.lastArrival, w.arrived, rate)
	r.Risk = &Risk{Figure: w.lag.Figure(at, since), Level: w.level, Since: w.first,
		Unseen: from.Unseen, Holding: from.Holding, Sending: from.Sending, NoEvidence: from.NoEvidence}
}

// requestsTotal sums the inbound ports' request counters, nil when none is known.
func requestsTotal(r *Report) *float64 {
	var total *float64
	for _, p := range r.Inbound {
		if p.RequestsTotal != nil {
			sum := *p.RequestsTotal
			if total != nil {
				sum += *total
			}
			total = &sum
		}
	}
	return total
}

// writeRisk is the text report's risk line.
func writeRisk(b *strings.Builder, r Report) {
	k := r.Risk
	if k == nil {
		return
	}
	level := strconv.FormatFloat(k.Level, 'g', -1, 64)
	verdict := "above --risk " + level + ": a hook would not stop yet"
	if k.Figure <= k.Level {
		verdict = "within --risk " + level
	}
	fmt.Fprintf(b, "\nrisk:    %s (%s): what prestop --lag-dist would state now had its preStop started at status's first sample, %s ago;\n"+
		"         from %d client(s) not seen yet, %d holding, %d sending, %d without evidence\n",
		riskText(k.Figure), verdict, r.SampledAt.Sub(k.Since).Round(100*time.Millisecond), k.Unseen, k.Holding, k.Sending, k.NoEvidence)
}

// riskText is a figure with three significant digits: 0.000123, 0.0456, 1.
func riskText(p float64) string { return strconv.FormatFloat(p, 'g', 3, 64) }
