package drain

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/meshdrain/meshdrain/pkg/clock"
	"github.com/meshdrain/meshdrain/pkg/mesh"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// scriptedClients is per-client evidence scripted on the fake clock.
type scriptedClients struct {
	clock    *clock.Fake
	beginErr error
	counts   func(at time.Duration) (ClientCounts, error)
	begun    bool
}

func (s *scriptedClients) Begin(context.Context, time.Time, mesh.Snapshot) error {
	s.begun = true
	return s.beginErr
}

func (s *scriptedClients) Counts(context.Context, Traffic) (ClientCounts, error) {
	return s.counts(s.clock.Now().Sub(t0))
}

// The drain waits for a holding client, stops one --quiet after it left, and says so in
// the final event.
func TestDrainWaitsForTheHoldingClient(t *testing.T) {
	cfg := baseConfig()
	fake := clock.NewAutoFake(t0)
	ev := &scriptedClients{clock: fake, counts: func(at time.Duration) (ClientCounts, error) {
		if at < 15*time.Second {
			return ClientCounts{Holding: 1, Left: 2}, nil
		}
		return ClientCounts{Left: 3}, nil
	}}
	cfg.Clients = ev
	res, logs := runWithClock(t, fake, cfg, steadyTraffic(3*time.Second, 0))
	if res.Reason != ReasonQuiet || res.Elapsed < 15*time.Second || res.Elapsed > 15*time.Second+400*time.Millisecond || res.WindowTerm != TermClientsLeft {
		t.Errorf("ended %s at %v (term %s); want quiet at the holder's close, 15s, term clients-left", res.Reason, res.Elapsed, res.WindowTerm)
	}
	if got := field(logs, "drain finished", "clients_left"); got != "3" || field(logs, "drain finished", "client_evidence") != "socket-table" ||
		field(logs, "drain finished", "clients_holding") != "0" {
		t.Errorf("final event: clients_left %q, evidence %q", got, field(logs, "drain finished", "client_evidence"))
	}
}

// Evidence given up (a socket table that cannot be read) is said once, and silence decides
// as before.
func TestUnreadableSocketTableKeepsTodaysRule(t *testing.T) {
	for _, ev := range []*scriptedClients{
		{beginErr: errors.New("netlink: operation not permitted; /proc/net/tcp: permission denied")},
		{counts: func(time.Duration) (ClientCounts, error) {
			return ClientCounts{}, errors.New("read /proc/net/tcp6: no such file")
		}},
	} {
		cfg := baseConfig()
		fake := clock.NewAutoFake(t0)
		ev.clock = fake
		cfg.Clients = ev
		res, logs := runWithClock(t, fake, cfg, steadyTraffic(3*time.Second, 0))
		want, _, _, _ := run(t, baseConfig(), steadyTraffic(3*time.Second, 0))
		if res.Reason != want.Reason || res.Elapsed != want.Elapsed || !strings.HasPrefix(res.ClientEvidence, "unavailable: ") {
			t.Errorf("ended %s at %v (evidence %q); without evidence it ends %s at %v", res.Reason, res.Elapsed, res.ClientEvidence, want.Reason, want.Elapsed)
		}
		if n := len(logs.FilterMessageSnippet("per-client evidence given up").All()); n != 1 {
			t.Errorf("said %d times, want once", n)
		}
	}
}

// runWithClock is run on a clock the test also gives to its other fakes.
func runWithClock(t *testing.T, fake *clock.Fake, cfg Config, script func(time.Duration) (mesh.Snapshot, error)) (Result, *observer.ObservedLogs) {
	t.Helper()
	core, logs := observer.New(zap.DebugLevel)
	cfg.Clock, cfg.Logger = fake, zap.New(core)
	res := Run(context.Background(), cfg, &scriptedSidecar{clock: fake, script: script})
	return res, logs
}

// --drain-at end: no drain call while the clients are watched; one when the wait ends,
// before the actions tell the app to stop. An interrupted hook makes none.
func TestDrainAtEnd(t *testing.T) {
	cfg := baseConfig()
	cfg.DrainAtEnd = true
	res, sidecar, action, _ := run(t, cfg, steadyTraffic(3*time.Second, 0))
	if !res.DrainCalled || len(sidecar.drainedAt) != 1 || sidecar.drainedAt[0] < res.Elapsed || len(action.runs) != 1 || action.runs[0] < sidecar.drainedAt[0] {
		t.Errorf("drain calls at %v, decision at %v, actions at %v; want one call at the decision, before the actions", sidecar.drainedAt, res.Elapsed, action.runs)
	}
	cfg.DrainAtEnd = false
	_, sidecar, _, _ = run(t, cfg, steadyTraffic(3*time.Second, 0))
	if len(sidecar.drainedAt) != 1 || sidecar.drainedAt[0] != 0 {
		t.Errorf("--drain-at start: drain calls at %v, want one at the start", sidecar.drainedAt)
	}
}

// With one client's rate stated (--rps-per-client), a client that sent without showing a
// pool is judged by its own silence since it last sent, as the evidence says (LastSent),
// once every pooling client has left: here 6s after its last request at 1s, before the
// raised --quiet after the traffic's last arrival at 3s would end the wait.
func TestDrainJudgesUnpooledSendersByTheirOwnSilence(t *testing.T) {
	for _, rate := range []float64{0, 1.6} {
		cfg := baseConfig()
		cfg.Quiet, cfg.RPSPerClient = 6*time.Second, rate
		fake := clock.NewAutoFake(t0)
		cfg.Clients = &scriptedClients{clock: fake, counts: func(at time.Duration) (ClientCounts, error) {
			if at < 3*time.Second {
				return ClientCounts{Holding: 1, Left: 2, Sending: 1, LastSent: t0.Add(time.Second)}, nil
			}
			return ClientCounts{Left: 3, Sending: 1, LastSent: t0.Add(time.Second)}, nil
		}}
		res, _ := runWithClock(t, fake, cfg, steadyTraffic(3*time.Second, 0))
		want, term := 7*time.Second, TermClientSilence
		if rate == 0 {
			want, term = 9*time.Second, TermQuiet
		}
		if res.Reason != ReasonQuiet || res.Elapsed < want || res.Elapsed > want+400*time.Millisecond || res.WindowTerm != term {
			t.Errorf("rate %g: ended %s at %v (term %s); want quiet at %v, term %s", rate, res.Reason, res.Elapsed, res.WindowTerm, want, term)
		}
	}
}
