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
			return &ClientCounts{Holding: 1, Left: 1}
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
		return &ClientCounts{Holding: 1, Left: 1}
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
	holders := func(time.Duration) *ClientCounts { return &ClientCounts{Holding: 50} }
	at, d := clientsRule(t, clientRuleConfig(), 8*time.Second, holders)
	silence, ds := clientsRule(t, clientRuleConfig(), 8*time.Second, func(time.Duration) *ClientCounts { return nil })
	if at != silence || d.Term != ds.Term || d.HeldBy != 0 {
		t.Errorf("holders, none left: stopped at %v (%s, held by %d); without evidence at %v (%s)", at, d.Term, d.HeldBy, silence, ds.Term)
	}
}

// Clients that sent during the drain without showing a pool (their closes say nothing) are
// judged each by its own silence when the operator stated how a client sends (ClientQuiet):
// once every pooling client has left, the wait ends --settled-quiet after the last arrival or
// ClientQuiet after such a client last sent, whichever is later; never later than the window
// of the traffic as a whole; and as before when nobody stated it, or the counts are stale.
func TestUnpooledSendersJudgedByTheirOwnSilence(t *testing.T) {
	cfg := RuleConfig{Start: t0, Quiet: 5800 * ms, SettledQuiet: time.Second, MinWait: 5 * time.Second, Deadline: 46 * time.Second,
		StreamsWait: time.Second, ClientQuiet: 5800 * ms}
	// Arrivals every second until 8s; then the pooling clients have all left. The traffic's
	// own window is its rate term: 8 arrivals in 8s, 17.3s of silence.
	aggregate := 8*time.Second + 17400*ms
	run := func(cfg RuleConfig, lastSent time.Duration, stale bool) (time.Duration, Decision) {
		t.Helper()
		var n float64
		r := NewRule(cfg, Observation{At: 0, Signal: mesh.SignalHTTPRequests, Arrivals: f(0), Active: f(0)})
		for at := 200 * ms; at <= cfg.Deadline; at += 200 * ms {
			if at <= 8*time.Second && at%time.Second == 0 {
				n++
			}
			sent := t0.Add(lastSent)
			counts := &ClientCounts{Left: 9, Sending: 1, Holding: 1, LastSent: sent}
			if at > 8*time.Second {
				counts = &ClientCounts{Left: 10, Sending: 1, Stale: stale, LastSent: sent}
			}
			d := r.Observe(Observation{At: at, Signal: mesh.SignalHTTPRequests, Arrivals: f(n), Active: f(0), Clients: counts})
			if d.Reason != "" {
				return at, d
			}
		}
		return cfg.Deadline, Decision{}
	}
	for _, c := range []struct {
		name     string
		cfg      func(RuleConfig) RuleConfig
		lastSent time.Duration
		stale    bool
		wantAt   time.Duration
		wantTerm WindowTerm
	}{
		{"sent long ago: --settled-quiet after the last arrival", nil, 3 * time.Second, false, 9 * time.Second, TermClientsLeft},
		{"sent late: its own silence", nil, 7 * time.Second, false, 12800 * ms, TermClientSilence},
		{"nobody stated how clients send: the traffic's window", func(c RuleConfig) RuleConfig { c.ClientQuiet = 0; return c }, 3 * time.Second, false, aggregate, TermRate},
		{"its own silence longer than the traffic's window", func(c RuleConfig) RuleConfig { c.ClientQuiet = 23 * time.Second; return c }, 7 * time.Second, false, aggregate, TermRate},
		{"stale counts", nil, 3 * time.Second, true, aggregate, TermRate},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := cfg
			if c.cfg != nil {
				cfg = c.cfg(cfg)
			}
			at, d := run(cfg, c.lastSent, c.stale)
			if at != c.wantAt || d.Term != c.wantTerm || d.Reason != ReasonQuiet {
				t.Errorf("stopped at %v with %s (term %s, window %v); want %v, term %s", at, d.Reason, d.Term, d.Window, c.wantAt, c.wantTerm)
			}
		})
	}
}

// ClientQuiet comes only from what the operator stated: a schedule keeps --quiet (at least
// the period and a poll), a rate gives its Poisson silence, never less than --quiet.
func TestClientQuiet(t *testing.T) {
	for _, c := range []struct {
		quiet, period time.Duration
		rate          float64
		want          time.Duration
	}{
		{time.Second, 0, 0, 0},
		{3200 * ms, 3 * time.Second, 0, 3200 * ms},
		{time.Second, 0, 1.6, PoissonQuiet(1.6)},
		{5800 * ms, 0, 1.6, 5800 * ms},
		{10 * time.Second, 0, 1.6, 10 * time.Second},
		{3200 * ms, 3 * time.Second, 0.4, PoissonQuiet(0.4)},
		{time.Second, 0, 1e-12, 24 * time.Hour}, // too low a rate to overflow: capped, not negative
	} {
		if got := ClientQuiet(c.quiet, c.period, c.rate); got != c.want {
			t.Errorf("ClientQuiet(%v, %v, %g) = %v, want %v", c.quiet, c.period, c.rate, got, c.want)
		}
	}
}

// Without a sidecar, past the lag bound, the settled window runs from the latest activity that
// may have come from a client still learning (LastLearning): the data that clients routed per
// connection sent until the bound, on connections they go on sending on, does not delay it.
func TestPastTheBoundTheSilenceRunsFromTheLastLearningClient(t *testing.T) {
	cfg := clientRuleConfig()
	cfg.LagBound, cfg.Start = 7400*ms, t0
	run := func(lastLearning time.Duration) (time.Duration, Decision) {
		var n float64
		r := NewRule(cfg, Observation{At: 0, Signal: mesh.SignalKernel, Arrivals: f(0), Active: f(0)})
		for at := 200 * ms; at <= cfg.Deadline; at += 200 * ms {
			if at <= 7200*ms {
				n++ // a holder's data, every poll until the bound
			}
			o := Observation{At: at, Signal: mesh.SignalKernel, Arrivals: f(n), Active: f(0)}
			if lastLearning > 0 {
				o.Clients = &ClientCounts{Sending: 2, LastLearning: t0.Add(lastLearning)}
			}
			if d := r.Observe(o); d.Reason != "" {
				return at, d
			}
		}
		return cfg.Deadline, Decision{}
	}
	if at, d := run(0); at != 8200*ms || d.Term != TermLagBound {
		t.Errorf("without LastLearning: stopped at %v (term %s), want one window after the holder's last data, 8.2s", at, d.Term)
	}
	if at, d := run(3 * time.Second); at != cfg.LagBound || d.Term != TermLagBound {
		t.Errorf("learning clients last active at 3s: stopped at %v (term %s), want at the bound %v", at, d.Term, cfg.LagBound)
	}
}

// Where only completions are counted, a client's own silence gets the latency allowance too:
// a request it sent on a reused connection moves nothing until it completes.
func TestOwnSilenceKeepsTheLatencyAllowance(t *testing.T) {
	cfg := RuleConfig{Start: t0, Quiet: 5800 * ms, LatencyAllowance: time.Second, SettledQuiet: time.Second, MinWait: 5 * time.Second,
		Deadline: 46 * time.Second, StreamsWait: time.Second, ClientQuiet: 5800 * ms}
	var n float64
	r := NewRule(cfg, Observation{At: 0, Signal: mesh.SignalCompletedRequests, Arrivals: f(0)})
	for at := 200 * ms; at <= cfg.Deadline; at += 200 * ms {
		if at <= 8*time.Second && at%time.Second == 0 {
			n++
		}
		counts := &ClientCounts{Left: 10, Sending: 1, LastSent: t0.Add(7 * time.Second)}
		if at <= 8*time.Second {
			counts.Holding = 1
		}
		if d := r.Observe(Observation{At: at, Signal: mesh.SignalCompletedRequests, Arrivals: f(n), Clients: counts}); d.Reason != "" {
			if at != 13800*ms || d.Term != TermClientSilence {
				t.Errorf("stopped at %v (term %s); want 13.8s, the client's 7s + 5.8s + the 1s allowance", at, d.Term)
			}
			return
		}
	}
	t.Fatal("never stopped")
}
