package podsim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"strings"
	"time"
)

// Shape is the pattern of the clients' arrivals. Real traffic is rarely the steady Poisson
// stream of many independent callers: cron-like jobs and fan-outs send in bursts, batch
// clients send at their own rhythm, small services see a request now and then. Each shape
// is a way for silence to lie about the clients having left.
type Shape string

const (
	// ShapeSteady: each client's callers send independently (Poisson arrivals).
	ShapeSteady Shape = "steady"
	// ShapeBursts: every client sends its share of a burst at the same instants, every
	// BurstPeriod (a fan-out, a scheduler tick): the pod sees bursts and silence between.
	ShapeBursts Shape = "bursts"
	// ShapeClientBursts: each client bursts every BurstPeriod at its own phase: as clients
	// leave, the pauses between bursts grow.
	ShapeClientBursts Shape = "client-bursts"
)

// Protocols of the pod's port, as the sidecar proxies it. On a grpc port (Istio's http2 and
// grpc port names) the clients' sidecars speak HTTP/2 to the pod's, one multiplexed
// connection each (h2Pool).
const (
	ProtocolHTTP = "http"
	ProtocolTCP  = "tcp"
	ProtocolGRPC = "grpc"
)

// burstSpread is how long one client takes to send a burst: its requests leave within it.
const burstSpread = 20 * time.Millisecond

// Traffic is a named scenario of the benchmark matrix: the reference workload changed in
// the one way its name says.
type Traffic struct {
	Name string
	// About says what the shape is and why it matters, for the output.
	About string
	apply func(*Scenario)
}

// Apply returns base changed as the traffic says.
func (t Traffic) Apply(base Scenario) Scenario {
	t.apply(&base)
	base.Traffic = t.Name
	return base
}

// Traffics are the shapes of the benchmark matrix (issue 9), each a change of the reference
// scenario (UserScenario).
func Traffics() []Traffic {
	return []Traffic{
		{"steady", "the reference: 800 QPS of Poisson arrivals from 50 client sidecars", func(*Scenario) {}},
		{"bursts", "all 50 clients send together every 2s, 100 QPS on average", func(sc *Scenario) {
			sc.Shape, sc.BurstPeriod, sc.QPS = ShapeBursts, 2*time.Second, 100
		}},
		{"client-bursts", "each client bursts every 3s at its own phase, 800 QPS", func(sc *Scenario) {
			sc.Shape, sc.BurstPeriod = ShapeClientBursts, 3*time.Second
		}},
		{"sparse", "2 QPS from 2 clients, both learning at 8s", func(sc *Scenario) {
			sc.QPS, sc.Clients, sc.EDSLag = 2, 2, Dist{Median: 8 * time.Second, P99: 8 * time.Second}
			sc.PlanKnowsRate = true
		}},
		{"late-client", "400 QPS from 20 clients that learn within ~1.5s, and one client sending every 1.5s that learns at 4.5s", func(sc *Scenario) {
			sc.QPS, sc.Clients = 400, 20
			sc.EDSLag = Dist{Median: 500 * time.Millisecond, P99: 1500 * time.Millisecond}
			sc.LateClientLag, sc.LateClientPeriod = 4500*time.Millisecond, 1500*time.Millisecond
		}},
		{"no-traffic", "a nearly idle service: 0.3 QPS from 3 clients, learning within ~4s", func(sc *Scenario) {
			sc.QPS, sc.Clients = 0.3, 3
			sc.EDSLag = Dist{Median: 1500 * time.Millisecond, P99: 4 * time.Second}
		}},
		{"clients-500", "800 QPS spread over 500 client sidecars (1.6 QPS each)", func(sc *Scenario) { sc.Clients, sc.PlanKnowsRate = 500, true }},
		{"clients-2000", "800 QPS spread over 2000 client sidecars (0.4 QPS each)", func(sc *Scenario) { sc.Clients, sc.PlanKnowsRate = 2000, true }},
		// 100 QPS keep ~550 requests in flight: more, and a 2-core machine falls behind pod time.
		{"long-requests", "100 QPS of requests with P99 20s (1000 threads, app drain 25s)", func(sc *Scenario) {
			sc.QPS, sc.P99, sc.Threads, sc.AppDrain = 100, 20*time.Second, 1000, 25*time.Second
			sc.PlanKnowsRate = true
		}},
		{"streams", "the reference plus one long-lived stream (WebSocket-like) that ends when the app closes it", func(sc *Scenario) {
			sc.Streams = 1
		}},
		{"tcp", "the reference on a TCP port (the sidecar proxies bytes): one connection per request", func(sc *Scenario) {
			sc.Protocol = ProtocolTCP
		}},
		{"grpc", "the reference on a grpc port: each client sidecar multiplexes its requests on one HTTP/2 connection", func(sc *Scenario) {
			sc.Protocol = ProtocolGRPC
		}},
	}
}

// TrafficByName returns the named traffic.
func TrafficByName(name string) (Traffic, error) {
	var names []string
	for _, t := range Traffics() {
		if t.Name == name {
			return t, nil
		}
		names = append(names, t.Name)
	}
	return Traffic{}, fmt.Errorf("traffic %q: want one of %s", name, strings.Join(names, ", "))
}

// burstArrivals are a client's bursts: every period from phase, perBurst requests each
// (on average: the fraction is drawn), sent within burstSpread, until end.
func burstArrivals(r *rand.Rand, phase, period time.Duration, perBurst float64, end time.Duration) []time.Duration {
	var out []time.Duration
	for b := phase; b < end; b += period {
		n := int(math.Floor(perBurst))
		if r.Float64() < perBurst-float64(n) {
			n++
		}
		for range n {
			if at := b + time.Duration(r.Float64()*float64(burstSpread)); at < end {
				out = append(out, at)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// periodicArrivals are one request every period from a random phase until end.
func periodicArrivals(r *rand.Rand, period, end time.Duration) []time.Duration {
	var out []time.Duration
	for at := time.Duration(r.Float64() * float64(period)); at < end; at += period {
		out = append(out, at)
	}
	return out
}
