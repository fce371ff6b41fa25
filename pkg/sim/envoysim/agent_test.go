package envoysim

import (
	"strings"
	"testing"
	"time"

	"github.com/meshdrain/meshdrain/pkg/clock/clocktest"
)

// waitDone waits for Envoy's exit; within is a guard, well past what a busy machine adds to
// an exit due at once, and below any later exit the case rules out.
func waitDone(t *testing.T, s *Sidecar, within time.Duration) {
	t.Helper()
	select {
	case <-s.Done():
	case <-time.After(within):
		t.Fatalf("Envoy did not exit within %v", within)
	}
}

func stillRunning(t *testing.T, s *Sidecar, for_ time.Duration) {
	t.Helper()
	select {
	case <-s.Done():
		t.Fatalf("Envoy exited (%s), want it running", s.ExitReason())
	case <-time.After(for_):
	}
}

func TestAgentNoneExitsAtOnce(t *testing.T) {
	s := startSidecar(t, Config{Agent: AgentNone}, appAddr(startApp(t, nil)))
	inbound := s.InboundAddr(8080)
	s.Terminate()
	// "At once" is before pilot-agent's terminationDrainDuration (5 s), which a sidecar with an
	// agent would wait out; not a figure a busy machine could break.
	waitDone(t, s, 3*time.Second)
	mustRefuse(t, strings.TrimPrefix(s.AdminURL(), "http://"))
	mustRefuse(t, inbound)
}

// TestAgentClassicDrainsThenExitsAfterTerminationDrainDuration. terminationDrainDuration is
// long enough for the test's own request to be served within it on a busy machine.
func TestAgentClassicDrainsThenExitsAfterTerminationDrainDuration(t *testing.T) {
	const terminationDrainDuration = 1500 * time.Millisecond
	s := startSidecar(t, Config{Agent: AgentClassic, TerminationDrainDuration: terminationDrainDuration}, appAddr(startApp(t, nil)))
	start := time.Now()
	s.Terminate()
	s.Terminate() // a second SIGTERM changes nothing
	clocktest.Eventually(t, "pilot-agent drain", s.draining)
	// During terminationDrainDuration a new connection is accepted and told to close.
	c, err := dialRaw(t, s.InboundAddr(8080))
	if err != nil {
		t.Fatalf("new connection while draining: %v", err)
	}
	if resp, _, err := c.get("/"); err != nil || !resp.Close {
		t.Fatalf("response while draining: %v", err)
	}
	waitDone(t, s, 10*time.Second)
	if elapsed := s.ExitedAt().Sub(start); elapsed < terminationDrainDuration {
		t.Errorf("exited after %v, before terminationDrainDuration", elapsed)
	}
	if v := s.server.state[0].get(); v != uint64(stateLive) {
		t.Errorf("server.state = %d: pilot-agent's drain does not fail health checks", v)
	}
	if at, err := s.AgentDrain(); err != nil || at.Before(start) {
		t.Errorf("AgentDrain() = %v, %v; want answered after Terminate", at, err)
	}
}

// TestAgentDrainFailureIsTold: pilot-agent goes on without its drain when the call fails, and
// AgentDrain says why, so that a simulator knows the sidecar did not drain.
func TestAgentDrainFailureIsTold(t *testing.T) {
	s := startSidecar(t, Config{Agent: AgentClassic, TerminationDrainDuration: time.Minute}, appAddr(startApp(t, nil)))
	if at, err := s.AgentDrain(); !at.IsZero() || err != nil {
		t.Fatalf("AgentDrain() before Terminate = %v, %v; want zero, nil", at, err)
	}
	if err := s.Faults().AdminError(); err != nil {
		t.Fatal(err)
	}
	s.Terminate()
	clocktest.Eventually(t, "pilot-agent's drain call to end", func() bool { _, err := s.AgentDrain(); return err != nil })
	if at, err := s.AgentDrain(); !at.IsZero() || !strings.Contains(err.Error(), "500") {
		t.Errorf("AgentDrain() = %v, %v; want no time and the 500", at, err)
	}
	if s.draining() {
		t.Error("draining, though pilot-agent's drain call failed")
	}
}

// TestAgentExitOnZeroWaitsForConnections: exit-on-zero waits MinimumDrainDuration, then for the
// listeners' active connections to reach 0, polling every ExitOnZeroPoll.
func TestAgentExitOnZeroWaitsForConnections(t *testing.T) {
	s := startSidecar(t, Config{
		Agent:                AgentExitOnZero,
		MinimumDrainDuration: 30 * time.Millisecond,
		ExitOnZeroPoll:       10 * time.Millisecond,
	}, appAddr(startApp(t, nil)))
	idle, err := dialRaw(t, s.InboundAddr(8080))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := idle.get("/"); err != nil { // an idle keep-alive connection stays open
		t.Fatal(err)
	}
	s.Terminate()
	stillRunning(t, s, 120*time.Millisecond)
	if got, err := s.activeProxyConnections(); err != nil || got != 1 {
		t.Fatalf("activeProxyConnections = %d, %v; want 1", got, err)
	}
	_ = idle.conn.Close()
	waitDone(t, s, 10*time.Second)
	if !strings.Contains(s.ExitReason(), "no active connections") {
		t.Errorf("exit reason %q", s.ExitReason())
	}
}

func TestAgentExitOnZeroDeadline(t *testing.T) {
	s := startSidecar(t, Config{
		Agent:                AgentExitOnZero,
		MinimumDrainDuration: 10 * time.Millisecond,
		ExitOnZeroPoll:       10 * time.Millisecond,
		ExitOnZeroDeadline:   60 * time.Millisecond,
	}, appAddr(startApp(t, nil)))
	idle, _ := dialRaw(t, s.InboundAddr(8080))
	_, _, _ = idle.get("/")
	s.Terminate()
	waitDone(t, s, 10*time.Second)
	if s.ExitReason() != "exit-on-zero deadline" {
		t.Errorf("exit reason %q", s.ExitReason())
	}
}

// TestAgentExitOnZeroWithIstioDefaultInclusion: pilot-agent adds downstream_cx_active to the
// inclusion list, so the poll works even where inbound stats are otherwise absent.
func TestAgentExitOnZeroWithIstioDefaultInclusion(t *testing.T) {
	s := startSidecar(t, Config{Agent: AgentExitOnZero, Inclusion: InclusionIstioDefault}, appAddr(startApp(t, nil)))
	c, err := dialRaw(t, s.InboundAddr(8080))
	if err != nil {
		t.Fatal(err)
	}
	_, _, _ = c.get("/")
	_ = c.conn.Close()
	clocktest.Eventually(t, "connection closed", func() bool { return s.listeners["0.0.0.0_15006"].cxActive.get() == 0 })
	_, body := adminDo(t, s, "GET", "/stats?usedonly&filter=downstream_cx_active$")
	if !hasLine(body, "listener.0.0.0.0_15006.downstream_cx_active: 0") {
		t.Errorf("poll body:\n%s", body)
	}
	if strings.Contains(body, "downstream_cx_total") {
		t.Error("only the suffix is included")
	}
}

// TestAgentNativeDrainsWithSkipExitAndExitsOnAppExit.
func TestAgentNativeDrainsWithSkipExitAndExitsOnAppExit(t *testing.T) {
	s := startSidecar(t, Config{Agent: AgentNative, DrainTime: 20 * time.Millisecond}, appAddr(startApp(t, nil)))
	s.Terminate()
	clocktest.Eventually(t, "preStop drain", s.draining)
	stillRunning(t, s, 60*time.Millisecond)
	// skip_exit: the listeners still accept after the drain time.
	c, err := dialRaw(t, s.InboundAddr(8080))
	if err != nil {
		t.Fatalf("listener stopped despite skip_exit: %v", err)
	}
	if resp, _, err := c.get("/"); err != nil || !resp.Close {
		t.Fatalf("response during native drain: %v", err)
	}
	s.AppExited()
	waitDone(t, s, 10*time.Second) // with skip_exit, nothing else would end it
}

func TestDefaultsAreIstios(t *testing.T) {
	cfg, err := Config{}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Profile != ProfileIstio || cfg.Inclusion != InclusionAll || cfg.Agent != AgentClassic ||
		cfg.DrainTime != 45*time.Second || cfg.DrainStrategy != DrainImmediate ||
		cfg.TerminationDrainDuration != 5*time.Second || cfg.MinimumDrainDuration != 5*time.Second ||
		cfg.ExitOnZeroPoll != time.Second || cfg.Workers != 2 || cfg.BindAddress != "0.0.0.0" {
		t.Errorf("defaults = %+v", cfg)
	}
	for _, bad := range []Config{{Profile: "x"}, {Agent: "x"}, {DrainStrategy: "x"}, {Inclusion: "x"}, {Inbound: []InboundPort{{Port: 0, AppAddr: "a"}}}} {
		if _, err := Start(bad); err == nil {
			t.Errorf("Start(%+v) accepted", bad)
		}
	}
}

func TestParseInboundPort(t *testing.T) {
	in, err := ParseInboundPort("8080=127.0.0.1:15006>127.0.0.1:8080")
	if err != nil || in.Port != 8080 || in.ListenAddr != "127.0.0.1:15006" || in.AppAddr != "127.0.0.1:8080" {
		t.Errorf("= %+v, %v", in, err)
	}
	in, err = ParseInboundPort("9090=127.0.0.1:9090")
	if err != nil || in.ListenAddr != "" || in.AppAddr != "127.0.0.1:9090" {
		t.Errorf("= %+v, %v", in, err)
	}
	in, err = ParseInboundPort("50051/grpc=127.0.0.1:50051")
	if err != nil || in.Port != 50051 || in.Protocol != ProtocolGRPC {
		t.Errorf("= %+v, %v", in, err)
	}
	for _, bad := range []string{"8080", "x=127.0.0.1:1", "8080=nohostport", "0=127.0.0.1:1", "8080/h3=127.0.0.1:1"} {
		if _, err := ParseInboundPort(bad); err == nil {
			t.Errorf("ParseInboundPort(%q) accepted", bad)
		}
	}
}
