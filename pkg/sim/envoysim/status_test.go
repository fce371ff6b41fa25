package envoysim

import (
	"net/http"
	"testing"
	"time"

	"github.com/meshdrain/meshdrain/pkg/clock/clocktest"
)

// postDrain is `meshdrain hold`'s call: POST /drain on pilot-agent's status port.
func postDrain(t *testing.T, s *Sidecar, method string) int {
	t.Helper()
	req, err := http.NewRequest(method, s.StatusURL()+"/drain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s /drain: %v", method, err)
	}
	_ = resp.Body.Close()
	return resp.StatusCode
}

// TestStatusDrainMakesTheClassicSIGTERMFinal: after /drain, pilot-agent's SIGTERM ends Envoy
// at once instead of after terminationDrainDuration (an hour here), and the drain was
// inbound-only with skip_exit: the listeners still accept.
func TestStatusDrainMakesTheClassicSIGTERMFinal(t *testing.T) {
	s := startSidecar(t, Config{Agent: AgentClassic, StatusAddr: "127.0.0.1:0", DrainTime: 20 * time.Millisecond}, appAddr(startApp(t, nil)))
	if code := postDrain(t, s, http.MethodGet); code != http.StatusMethodNotAllowed {
		t.Errorf("GET /drain = %d, want 405", code)
	}
	if !s.DrainedNow().IsZero() {
		t.Fatal("a GET drained")
	}
	if code := postDrain(t, s, http.MethodPost); code != http.StatusOK {
		t.Fatalf("POST /drain = %d", code)
	}
	clocktest.Eventually(t, "/drain's drain", s.draining)
	stillRunning(t, s, 60*time.Millisecond)
	c, err := dialRaw(t, s.InboundAddr(8080))
	if err != nil {
		t.Fatalf("listener stopped despite skip_exit: %v", err)
	}
	if resp, _, err := c.get("/"); err != nil || !resp.Close {
		t.Fatalf("response after /drain: %v", err)
	}
	s.Terminate()
	waitDone(t, s, 10*time.Second) // terminationDrainDuration is an hour
	if s.ExitReason() != ExitAfterDrainNow {
		t.Errorf("exit reason %q, want %q", s.ExitReason(), ExitAfterDrainNow)
	}
	if at, _ := s.AgentDrain(); !at.IsZero() {
		t.Errorf("AgentDrain() = %v: /drain is not the drain at the termination", at)
	}
}

// TestStatusDrainMakesTheNativeSIGTERMFinal: a native proxy whose injected preStop was
// replaced (no Terminate) exits at the app's exit once /drain was called; without it, it
// drains then and waits terminationDrainDuration.
func TestStatusDrainMakesTheNativeSIGTERMFinal(t *testing.T) {
	for _, drained := range []bool{true, false} {
		s := startSidecar(t, Config{Agent: AgentNative, StatusAddr: "127.0.0.1:0"}, appAddr(startApp(t, nil)))
		if drained {
			postDrain(t, s, http.MethodPost)
		}
		s.AppExited()
		if drained {
			waitDone(t, s, 10*time.Second)
			continue
		}
		clocktest.Eventually(t, "the drain at SIGTERM", s.draining)
		stillRunning(t, s, 100*time.Millisecond)
	}
}

func TestNoStatusPortUnlessAsked(t *testing.T) {
	s := startSidecar(t, Config{}, appAddr(startApp(t, nil)))
	if s.StatusURL() != "" {
		t.Errorf("StatusURL() = %q without StatusAddr", s.StatusURL())
	}
}
