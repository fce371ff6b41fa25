package drain

import (
	"testing"
	"time"

	"github.com/meshdrain/meshdrain/pkg/mesh"
)

// clientsRule replays a sparse client (one request a second until last) against the rule,
// with per-client evidence from clients(at), polling every 200ms; it returns when the rule
// let the app stop and the decision, or the deadline.
func clientsRule(t *testing.T, cfg RuleConfig, last time.Duration, clients func(at time.Duration) *ClientCounts) (time.Duration, Decision) {
	t.Helper()
	var n float64
	r := NewRule(cfg, Observation{At: 0, Signal: mesh.SignalHTTPRequests, Arrivals: f(0), Active: f(0)})
	for at := 200 * ms; at <= cfg.Deadline; at += 200 * ms {
		if at <= last && at%time.Second == 0 {
			n++
		}
		d := r.Observe(Observation{At: at, Signal: mesh.SignalHTTPRequests, Arrivals: f(n), Active: f(0), Clients: clients(at)})
		if d.Reason != "" {
			return at, d
		}
	}
	return cfg.Deadline, Decision{}
}

func clientRuleConfig() RuleConfig {
	return RuleConfig{Quiet: time.Second, MinWait: 5 * time.Second, Deadline: 46 * time.Second, StreamsWait: time.Second}
}

// A client holding an idle drain-start connection keeps the app, however long the silence;
// once it closes the connection itself, --quiet alone is asked of the silence.
func TestHoldingClientHoldsLeftClientReleases(t *testing.T) {
	closeAt := 20 * time.Second
	clients := func(at time.Duration) *ClientCounts {
		if at < closeAt {
			return &ClientCounts{Holding: 1, Left: 1, Holders: []string{"10.0.0.7"}}
		}
		return &ClientCounts{Left: 2}
	}
	at, d := clientsRule(t, clientRuleConfig(), 8*time.Second, clients)
	if at != closeAt || d.Reason != ReasonQuiet || d.Term != TermClientsLeft || d.Window != time.Second {
		t.Errorf("stopped at %v with %+v; want at the close (%v), term clients-left, window 1s", at, d, closeAt)
	}
	// Without evidence the same traffic waits out the rate term: the evidence is what ends it.
	at, d = clientsRule(t, clientRuleConfig(), 8*time.Second, func(time.Duration) *ClientCounts { return nil })
	if at <= 8*time.Second+9*time.Second || d.Term != TermRate {
		t.Errorf("without evidence: stopped at %v with term %s; want the rate term (≥ 9.2 mean gaps after 8s)", at, d.Term)
	}
}

// Clients that left do not shorten the window while another client is still sending: its
// silence is judged as before.
func TestSendingClientKeepsTheRateTerm(t *testing.T) {
	clients := func(time.Duration) *ClientCounts { return &ClientCounts{Left: 3, Sending: 1} }
	at, d := clientsRule(t, clientRuleConfig(), 8*time.Second, clients)
	if d.Term == TermClientsLeft || at < 17*time.Second {
		t.Errorf("stopped at %v with term %s while a client may still send", at, d.Term)
	}
}

// Past the lag bound every client has applied the removal: --quiet of silence is enough, and
// a client still holding an idle connection (not a mesh sidecar) no longer holds the app.
func TestLagBound(t *testing.T) {
	cfg := clientRuleConfig()
	cfg.LagBound = 12 * time.Second
	holdForever := func(time.Duration) *ClientCounts {
		return &ClientCounts{Holding: 1, Left: 1, Holders: []string{"10.0.0.9"}}
	}
	at, d := clientsRule(t, cfg, 8*time.Second, holdForever)
	if at != 12*time.Second || d.Term != TermLagBound || d.Reason != ReasonQuiet {
		t.Errorf("stopped at %v with %+v; want at the lag bound 12s, term lag-bound", at, d)
	}
	// Traffic past the bound still delays the stop: silence of one window after it.
	at, d = clientsRule(t, cfg, 15*time.Second, func(time.Duration) *ClientCounts { return nil })
	if at != 16*time.Second || d.Term != TermLagBound {
		t.Errorf("traffic until 15s: stopped at %v with term %s; want 16s, lag-bound", at, d.Term)
	}
	// Holding never outlives the deadline.
	cfg.LagBound = 0
	if at, d := clientsRule(t, cfg, 0, holdForever); at != cfg.Deadline || d.Reason != "" {
		t.Errorf("a holder without a lag bound: stopped at %v (%s); want the deadline", at, d.Reason)
	}
}

// A --quiet raised for sparse clients (plan --rps-per-client) guards against clients that
// have not learnt yet: past the lag bound, or once every client left, the ordinary one is
// enough.
func TestSettledWindowIsTheOrdinaryQuiet(t *testing.T) {
	cfg := clientRuleConfig()
	cfg.Quiet = 9300 * ms
	cfg.LagBound = 8 * time.Second
	at, d := clientsRule(t, cfg, 8*time.Second, func(time.Duration) *ClientCounts { return nil })
	if at != 9*time.Second || d.Term != TermLagBound || d.Window != DefaultQuiet {
		t.Errorf("stopped at %v, term %s, window %v; want 9s, lag-bound, 1s", at, d.Term, d.Window)
	}
	cfg.LagBound = 0
	at, d = clientsRule(t, cfg, 8*time.Second, func(at time.Duration) *ClientCounts {
		if at < 8500*ms {
			return &ClientCounts{Holding: 2}
		}
		return &ClientCounts{Left: 2}
	})
	if at != 9*time.Second || d.Term != TermClientsLeft || d.Window != DefaultQuiet {
		t.Errorf("clients left: stopped at %v, term %s, window %v; want 9s, clients-left, 1s", at, d.Term, d.Window)
	}
}

// A client whose only open connection carries a stream begun before the drain looks held
// (nothing arrives on it). While no more clients hold than requests are open, the holders may
// all be those requests: the streams rule decides, as without evidence.
func TestHoldersExplainedByOpenRequestsDoNotHold(t *testing.T) {
	cfg := clientRuleConfig()
	r := NewRule(cfg, Observation{At: 0, Signal: mesh.SignalHTTPRequests, Arrivals: f(0), Active: f(1)})
	var d Decision
	for at := 200 * ms; at <= cfg.Deadline; at += 200 * ms {
		d = r.Observe(Observation{At: at, Signal: mesh.SignalHTTPRequests, Arrivals: f(0), Active: f(1),
			Clients: &ClientCounts{Holding: 1}})
		if d.Reason != "" {
			break
		}
	}
	if d.Reason != ReasonQuietStreams || d.HeldBy != 0 {
		t.Errorf("one holder, one open stream: %+v; want quiet-streams, not held", d)
	}
	// Two holders and one open request: one of them holds an idle connection.
	d = r.Observe(Observation{At: 30 * time.Second, Signal: mesh.SignalHTTPRequests, Arrivals: f(0), Active: f(1),
		Clients: &ClientCounts{Holding: 2, Left: 1}})
	if d.Reason != "" || d.HeldBy != 2 {
		t.Errorf("two holders, one open request: %+v; want held", d)
	}
}

// Counts read before the latest arrivals may not show who sent them: a client counted as
// left may have come back. They do not shorten the window until a read after the arrivals.
func TestStaleCountsDoNotShortenTheWindow(t *testing.T) {
	stale := func(time.Duration) *ClientCounts { return &ClientCounts{Left: 3, Stale: true} }
	at, d := clientsRule(t, clientRuleConfig(), 8*time.Second, stale)
	if d.Term == TermClientsLeft || at < 17*time.Second {
		t.Errorf("stopped at %v with term %s on stale counts", at, d.Term)
	}
}

// Where no client has been seen to let go by closing its connections, holders do not hold:
// the clients of a persistent-session service, or without a sidecar, keep their idle
// connections whatever they know. Silence decides, as without evidence.
func TestHoldersWithoutAnyDepartureDoNotHold(t *testing.T) {
	holders := func(time.Duration) *ClientCounts { return &ClientCounts{Holding: 50, Holders: []string{"10.0.0.9"}} }
	at, d := clientsRule(t, clientRuleConfig(), 8*time.Second, holders)
	silence, ds := clientsRule(t, clientRuleConfig(), 8*time.Second, func(time.Duration) *ClientCounts { return nil })
	if at != silence || d.Term != ds.Term || d.HeldBy != 0 {
		t.Errorf("holders, none left: stopped at %v (%s, held by %d); without evidence at %v (%s)", at, d.Term, d.HeldBy, silence, ds.Term)
	}
}
