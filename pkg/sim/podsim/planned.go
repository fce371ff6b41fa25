package podsim

import (
	"math/rand/v2"
	"time"
)

// LagModel draws lags other than the scenario's lognormals, for the calibration of the risk
// figure against lag families the simulator does not run (scripts/calibrate): a heavy tail,
// a slow node among fast ones. i is what the lag belongs to: a mesh's client, a node's
// kube-proxy (without a mesh), or an ingress (its client index); r is its own random stream.
type LagModel interface {
	Lag(r *rand.Rand, i int) time.Duration
}

// drawLag is lags' draw when there is a model, else dist's.
func drawLag(lags LagModel, dist Dist, r *rand.Rand, i int) time.Duration {
	if lags != nil {
		return lags.Lag(r, i)
	}
	return dist.Sample(r)
}

// PlannedClient is one client of a drain as planned before it runs: when it learns of the
// removal and the requests it sends to the pod until then.
type PlannedClient struct {
	// Kind is a meshless client's kind (per-request, keep-alive, ingress); "" for a mesh's
	// client sidecar.
	Kind string
	// Node is the client's node without a mesh (its kube-proxy's lag is its own).
	Node int
	// Lag is when the client learns, from t0 (capped at a minute, as the simulator's).
	Lag time.Duration
	// Arrivals are its requests that reach the pod whatever the strategy, from t0: those
	// after t0 and before it learns (a keep-alive client's later requests on its old
	// connections are served by the app's graceful shutdown, and no client's learning).
	Arrivals []time.Duration
}

// PlanDrain is sc's clients as the simulator plans them for the seed sc.Seed, with the lags
// drawn by lags (nil: the scenario's), for rule-only replays that need no network.
func PlanDrain(sc Scenario, lags LagModel) []PlannedClient {
	plans := planClientsWith(sc, lags)
	out := make([]PlannedClient, len(plans))
	for i, p := range plans {
		c := PlannedClient{Kind: string(p.kind), Lag: p.lag}
		if sc.meshless() && sc.Meshless.Nodes > 0 {
			c.Node = i % sc.Meshless.Nodes
		}
		for _, at := range p.toPod(sc.Warmup) {
			if at >= sc.Warmup {
				c.Arrivals = append(c.Arrivals, at-sc.Warmup)
			}
		}
		out[i] = c
	}
	return out
}
