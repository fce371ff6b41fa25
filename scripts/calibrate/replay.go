package main

import (
	"sort"
	"time"

	"github.com/meshdrain/meshdrain/pkg/hook/drain"
	"github.com/meshdrain/meshdrain/pkg/hook/evidence"
	"github.com/meshdrain/meshdrain/pkg/hook/risk"
	"github.com/meshdrain/meshdrain/pkg/mesh"
	"github.com/meshdrain/meshdrain/pkg/sim/podsim"
)

// evidenceKind is what the hook sees of each client in a shape, as the rule gets it
// (drain.ClientCounts).
type evidenceKind int

const (
	// poolsLetGo: regime (b), the sidecar's drain deferred: every client's sidecar keeps an
	// idle pooled connection (Holding) until it applies the removal, then closes it (Left),
	// seen at the socket table's next read.
	poolsLetGo evidenceKind = iota
	// lastRequest: Linkerd's proxy, which closes no pool on removal: a client is Sending once
	// it has sent in the drain (no evidence before), with the latest send of all of them.
	lastRequest
	// kernel: without a sidecar, the kernel's clients: Sending once a client has sent in the
	// drain, no evidence before; no time of the last send (the rule takes the last arrival).
	kernel
)

// shape is a traffic shape of the calibration: a podsim scenario and what the hook sees.
type shape struct {
	name     string
	sc       podsim.Scenario
	evidence evidenceKind
}

// shapes are issue 39 item 4's: regime (b) sidecars, Linkerd, and without a mesh the mixed,
// keep-alive, per-request and ingress shapes, each as podsim plans its clients.
func shapes() []shape {
	traffic := func(ts []podsim.Traffic, name string) podsim.Traffic {
		for _, t := range ts {
			if t.Name == name {
				return t
			}
		}
		panic("no traffic " + name)
	}
	steady := traffic(podsim.Traffics(), "steady").Apply(podsim.UserScenario())
	linkerd := steady
	linkerd.Mesh = mesh.Linkerd
	out := []shape{{"sidecars (b)", steady, poolsLetGo}, {"linkerd", linkerd, lastRequest}}
	for _, name := range []string{"mixed", "keep-alive", "per-request", "ingress"} {
		out = append(out, shape{"none: " + name, traffic(podsim.MeshlessTraffics(), name).Apply(podsim.MeshlessScenario()), kernel})
	}
	return out
}

// Replay settings: prestop's defaults, --min-wait 0 (its default with --lag-dist), and a
// deadline past the families' tails, so that the figure decides rather than the deadline.
const (
	poll     = drain.DefaultPoll
	deadline = 60 * time.Second
)

// drainPlan is one seeded drain's clients, replayed at each risk.
type drainPlan struct {
	clients  []podsim.PlannedClient
	arrivals []time.Duration // every client's, sorted
}

func newDrainPlan(s shape, f family, seed uint64) drainPlan {
	sc := s.sc
	sc.Seed = seed
	p := drainPlan{clients: podsim.PlanDrain(sc, f.model(seed))}
	for _, c := range p.clients {
		p.arrivals = append(p.arrivals, c.Arrivals...)
	}
	sort.Slice(p.arrivals, func(i, j int) bool { return p.arrivals[i] < p.arrivals[j] })
	return p
}

// count is how many arrivals came by at.
func count(arrivals []time.Duration, at time.Duration) int {
	return sort.Search(len(arrivals), func(i int) bool { return arrivals[i] > at })
}

// outcome is one replayed drain: when the rule stopped the app, the figure it stated then,
// and whether a request arrived after the stop.
type outcome struct {
	stop   time.Duration
	stated float64
	lost   bool
	// clients are the counts of the last poll, as the hook's result keeps them (Result.Clients).
	clients *drain.ClientCounts
}

// start is the drain's start on the evidence's clock.
var start = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// replay runs the rule over p, polled every poll, at risk p.
func (p drainPlan) replay(s shape, lag risk.Distribution, riskP float64) outcome {
	o, _ := p.replayRule(s, drain.RuleConfig{Start: start, Quiet: drain.DefaultQuiet, Deadline: deadline,
		StreamsWait: drain.DefaultStreamsWait, Lag: lag, Risk: riskP})
	return o
}

// replayRule runs the rule set by cfg over p, polled every poll, and gives the outcome and the
// rule's last decision (its Reason "" when the deadline ended the wait).
func (p drainPlan) replayRule(s shape, cfg drain.RuleConfig) (outcome, drain.Decision) {
	counts := func(at time.Duration) *drain.ClientCounts {
		c := &drain.ClientCounts{}
		var last time.Duration
		for _, cl := range p.clients {
			switch {
			case s.evidence == poolsLetGo && cl.Lag > at:
				c.Holding++
			case s.evidence == poolsLetGo:
				c.Left++
			case len(cl.Arrivals) > 0 && cl.Arrivals[0] <= at:
				c.Sending++
				last = max(last, cl.Arrivals[count(cl.Arrivals, at)-1])
			default:
				c.NoEvidence++
			}
		}
		if s.evidence == lastRequest && c.Sending > 0 {
			c.LastSent = start.Add(last)
		}
		return c
	}
	observe := func(at time.Duration, c *drain.ClientCounts) drain.Observation {
		n := float64(count(p.arrivals, at))
		return drain.Observation{At: at, Signal: mesh.SignalHTTPRequests, Arrivals: &n, Active: new(float64), Clients: c}
	}
	// The socket table is read every ReadPolls polls; between reads its counts stand, stale
	// once requests arrived since. The kernel's clients are read at every poll.
	every := evidence.ReadPolls
	if s.evidence == kernel {
		every = 1
	}
	table, readAt := counts(0), time.Duration(0)
	rule := drain.NewRule(cfg, observe(0, table))
	var d drain.Decision
	var last drain.ClientCounts
	stop := cfg.Deadline
	for i := 1; time.Duration(i)*poll <= cfg.Deadline; i++ {
		at := time.Duration(i) * poll
		if i%every == 0 {
			table, readAt = counts(at), at
		}
		last = *table
		last.Stale = count(p.arrivals, at) > count(p.arrivals, readAt)
		if d = rule.Observe(observe(at, &last)); d.Reason != "" {
			stop = at
			break
		}
	}
	o := outcome{stop: stop, lost: count(p.arrivals, stop) < len(p.arrivals), clients: &last}
	if d.Risk != nil {
		o.stated = *d.Risk
	}
	return o, d
}
