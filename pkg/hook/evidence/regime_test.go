package evidence

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/meshdrain/meshdrain/pkg/clock"
	"github.com/meshdrain/meshdrain/pkg/hook/drain"
	"github.com/meshdrain/meshdrain/pkg/hook/regime"
	"github.com/meshdrain/meshdrain/pkg/mesh"
	"github.com/meshdrain/meshdrain/pkg/mesh/envoy"
	"github.com/meshdrain/meshdrain/pkg/sockets"
)

var regimeT0 = time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)

// drainingSidecar is a pod's Istio sidecar on the fake clock: 800 requests a second until
// stop, and, from drainFrom on (its own drain, which --drain-at end assumes deferred), every
// answer tells its connection to close.
type drainingSidecar struct {
	clock           *clock.Fake
	stop, drainFrom time.Duration
}

func (s *drainingSidecar) Inbound(context.Context, mesh.Selector) (mesh.Snapshot, error) {
	at := s.clock.Now().Sub(regimeT0)
	port := 8080
	closes := 0.0
	if at > s.drainFrom {
		closes = 800 * (min(at, s.stop) - min(s.drainFrom, s.stop)).Seconds()
	}
	return mesh.Snapshot{Naming: mesh.NamingIstio, Endpoints: []mesh.Endpoint{{Port: &port, Name: "inbound|8080||",
		HTTPRequestsTotal: num(1000 + 800*min(at, s.stop).Seconds()), HTTPRequestsActive: num(0), HTTPDrainCloses: num(closes)}}}, nil
}

func (s *drainingSidecar) DrainListeners(context.Context, mesh.DrainMode) error { return nil }
func (s *drainingSidecar) Hints() mesh.Hints                                    { return envoy.EnvoyHints() }

// pooledClients is a socket table of two clients' idle pooled connections: the first closes
// its connection at leaves (it applied the endpoint removal), the second keeps it.
type pooledClients struct {
	clock  *clock.Fake
	leaves time.Duration
}

func (p *pooledClients) Read([]uint16) ([]sockets.Socket, error) {
	pooled := func(client string, inode uint64) sockets.Socket {
		return sockets.Socket{Local: netip.MustParseAddrPort("10.0.0.1:15006"), Remote: netip.MustParseAddrPort(client), State: sockets.Established, Inode: inode,
			HasTCPInfo: true, BytesReceived: 300, SinceLastDataRecv: 2 * time.Second, SinceLastDataSent: 2 * time.Second}
	}
	socks := []sockets.Socket{pooled("10.0.0.8:40000", 2)}
	if p.clock.Now().Sub(regimeT0) < p.leaves {
		socks = append(socks, pooled("10.0.0.7:40000", 1))
	}
	return socks, nil
}

// judgedDrain is a drain's outcome with the regime its final event says.
type judgedDrain struct {
	drain.Result
	Regime regime.Regime
}

// drainWith runs one drain on the fake clock, its regime watched as prestop watches an Envoy
// sidecar's: deferred (--drain-at end) with the evidence, or at the start without it.
func drainWith(t *testing.T, deferred bool, stop, drainFrom time.Duration) judgedDrain {
	t.Helper()
	fake := clock.NewAutoFake(regimeT0)
	reads := &regime.Prestop{DrainAtEnd: deferred}
	cfg := drain.Config{DrainMode: mesh.DrainGraceful, Deadline: 24 * time.Second, Quiet: time.Second, MinWait: 2 * time.Second,
		Poll: 200 * time.Millisecond, ConnectTimeout: 2 * time.Second, Clock: fake, DrainAtEnd: deferred, Reads: reads}
	if deferred {
		cfg.Clients = &Table{Reader: &pooledClients{clock: fake, leaves: time.Second}, Ports: []int{15006}, Now: fake.Now, Undrained: true}
	}
	res := judgedDrain{Result: drain.Run(context.Background(), cfg, &drainingSidecar{clock: fake, stop: stop, drainFrom: drainFrom})}
	res.Regime, _ = reads.Judge()
	return res
}

// Issue 26: a pod configured for regime (b) whose sidecar drains anyway (the istio-proxy
// override missing) falls back to regime (a)'s rule: once the drain closes rise, the evidence
// is given up and silence alone decides, exactly as a drain without evidence does on the same
// traffic, so the fallback holds the app no longer than that route. Here a client that keeps
// its idle pooled connection would hold the app to the deadline while the evidence stood
// (another client has left), and the drain starts before the last arrival or after it.
func TestFallbackIsRegimeAsSilenceRule(t *testing.T) {
	const stop = 3 * time.Second
	for _, drainFrom := range []time.Duration{0, 2 * time.Second} {
		fallback := drainWith(t, true, stop, drainFrom)
		silence := drainWith(t, false, stop, drainFrom)
		if fallback.Regime != regime.A || !strings.HasPrefix(fallback.ClientEvidence, "unavailable: the sidecar drains although meshdrain defers its drain") {
			t.Errorf("drain from %v: regime %q, evidence %q; want a, the evidence given up", drainFrom, fallback.Regime, fallback.ClientEvidence)
		}
		if fallback.Reason != silence.Reason || fallback.Elapsed != silence.Elapsed || fallback.WindowTerm != silence.WindowTerm || fallback.Window != silence.Window {
			t.Errorf("drain from %v: the fallback ended %s at %v (window %v, %s); regime (a)'s silence rule ends %s at %v (window %v, %s)", drainFrom,
				fallback.Reason, fallback.Elapsed, fallback.Window, fallback.WindowTerm, silence.Reason, silence.Elapsed, silence.Window, silence.WindowTerm)
		}
		if fallback.Reason != drain.ReasonQuiet || fallback.Elapsed > stop+2*time.Second {
			t.Errorf("drain from %v: ended %s at %v, want quiet a quiet window after %v", drainFrom, fallback.Reason, fallback.Elapsed, stop)
		}
	}
	// A drain that begins after the last answer tells no connection to close: nothing shows
	// it, and the evidence stands, as it would in either regime (the holder keeps the app).
	if late := drainWith(t, true, stop, 5*time.Second); late.Regime != regime.B || late.ClientEvidence != "socket-table" {
		t.Errorf("drain after the last answer: regime %q, evidence %q; want b, the evidence kept", late.Regime, late.ClientEvidence)
	}
	// Without the drain, the same pod is regime (b), and the holder keeps the app: the
	// evidence is what the fallback gave up.
	deferred := drainWith(t, true, stop, time.Hour)
	if deferred.Regime != regime.B || deferred.Reason != drain.ReasonDeadline {
		t.Errorf("deferred drain: regime %q, ended %s at %v; want b, held to the deadline by the client that keeps its connection", deferred.Regime, deferred.Reason, deferred.Elapsed)
	}
}
