package envoysim

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestFaultAdminRefuseAndClear(t *testing.T) {
	s := startSidecar(t, Config{}, "")
	if err := s.Faults().AdminRefuse(); err != nil {
		t.Fatal(err)
	}
	mustRefuse(t, strings.TrimPrefix(s.AdminURL(), "http://"))
	if err := s.Faults().Clear(); err != nil {
		t.Fatal(err)
	}
	if code, _ := adminDo(t, s, "GET", "/ready"); code != 200 {
		t.Errorf("/ready after clear = %d", code)
	}
}

func TestFaultAdminHangAndSlow(t *testing.T) {
	s := startSidecar(t, Config{}, "")
	_ = s.Faults().AdminHang()
	client := &http.Client{Timeout: 50 * time.Millisecond}
	if _, err := client.Get(s.AdminURL() + "/ready"); err == nil {
		t.Error("a hanging admin answered")
	}
	_ = s.Faults().AdminSlow(30 * time.Millisecond)
	start := time.Now()
	if code, body := adminDo(t, s, "GET", "/ready"); code != 200 || body != "LIVE\n" {
		t.Errorf("slow /ready = %d %q", code, body)
	}
	if time.Since(start) < 30*time.Millisecond {
		t.Error("slow admin answered early")
	}
}

func TestFaultAdminErrorGarbageTruncate(t *testing.T) {
	s := startSidecar(t, Config{}, "")
	_ = s.Faults().AdminError()
	if code, _ := adminDo(t, s, "GET", "/stats"); code != 500 {
		t.Errorf("error fault = %d", code)
	}
	_ = s.Faults().AdminGarbage()
	if code, body := adminDo(t, s, "GET", "/stats/prometheus"); code != 200 || !strings.Contains(body, "garbage") {
		t.Errorf("garbage fault = %d %q", code, body)
	}
	_ = s.Faults().AdminTruncate()
	resp, err := http.Get(s.AdminURL() + "/stats")
	if err != nil {
		t.Fatal(err)
	}
	_, err = io.ReadAll(resp.Body)
	resp.Body.Close()
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("truncated body read: %v, want unexpected EOF", err)
	}
}

func TestFaultResetCounters(t *testing.T) {
	s := startSidecar(t, Config{Profile: ProfileEnvoy}, appAddr(startApp(t, nil)))
	resp, err := http.Get("http://" + s.InboundAddr(8080) + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if v := statValue(t, s, "http.ingress_http.downstream_rq_total"); v != 1 {
		t.Fatalf("downstream_rq_total = %d", v)
	}
	s.Faults().ResetCounters()
	if v := statValue(t, s, "http.ingress_http.downstream_rq_total"); v != 0 {
		t.Errorf("downstream_rq_total after reset = %d", v)
	}
	if v := statValue(t, s, "server.live"); v != 1 {
		t.Errorf("gauges must survive a counter reset: server.live = %d", v)
	}
}

func TestFaultDieMidDrain(t *testing.T) {
	s := startSidecar(t, Config{}, appAddr(startApp(t, nil)))
	s.Faults().DieMidDrain(20 * time.Millisecond)
	stillRunning(t, s, 30*time.Millisecond)
	adminDo(t, s, "POST", "/drain_listeners?inboundonly&graceful")
	waitDone(t, s, 10*time.Second)
	if s.ExitReason() != "crashed mid-drain" {
		t.Errorf("exit reason %q", s.ExitReason())
	}
	mustRefuse(t, strings.TrimPrefix(s.AdminURL(), "http://"))
}

// TestFaultAdminHangDelaysPilotAgentDrain: pilot-agent's own drain call goes through the
// admin API, so a sick admin affects it as it would in a pod.
func TestFaultAdminRefuseBreaksPilotAgentDrain(t *testing.T) {
	s := startSidecar(t, Config{TerminationDrainDuration: 30 * time.Millisecond}, appAddr(startApp(t, nil)))
	_ = s.Faults().AdminRefuse()
	s.Terminate()
	waitDone(t, s, 10*time.Second)
	if s.draining() {
		t.Error("drain happened although the admin port refused")
	}
}

// A frozen admin replays its last answers: counters, the admin's own request counter and
// /server_info's uptime all stand still, and a request it never answered is answered once
// and then replayed too.
func TestFaultAdminFrozen(t *testing.T) {
	s := startSidecar(t, Config{Profile: ProfileEnvoy}, "")
	const stats = "/stats/prometheus?filter=http.admin.downstream_rq_total"
	adminDo(t, s, "GET", stats)
	_, before := adminDo(t, s, "GET", stats)
	_, info := adminDo(t, s, "GET", "/server_info")
	if err := s.Faults().AdminFrozen(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond) // across a second boundary: a live uptime would move
	for i := 0; i < 3; i++ {
		if _, got := adminDo(t, s, "GET", stats); got != before {
			t.Fatalf("frozen stats changed:\n%s\nthen\n%s", before, got)
		}
		if _, got := adminDo(t, s, "GET", "/server_info"); got != info {
			t.Fatalf("frozen server_info changed:\n%s\nthen\n%s", info, got)
		}
	}
	_, first := adminDo(t, s, "GET", "/stats?filter=server.state")
	if _, again := adminDo(t, s, "GET", "/stats?filter=server.state"); again != first || !strings.Contains(first, "server.state") {
		t.Errorf("a new request under the fault: %q then %q", first, again)
	}
	if err := s.Faults().Clear(); err != nil {
		t.Fatal(err)
	}
	if _, after := adminDo(t, s, "GET", stats); after == before {
		t.Error("the admin counter did not move after the fault was cleared")
	}
}

// Envoy's uptime is a difference of whole wall-clock seconds, so it steps at second boundaries.
func TestUptimeSecondsLikeEnvoy(t *testing.T) {
	start := time.Unix(100, 900_000_000)
	for _, tc := range []struct {
		now  time.Time
		want int64
	}{
		{time.Unix(100, 950_000_000), 0},
		{time.Unix(101, 0), 1}, // 100 ms after the start, but across a second boundary
		{time.Unix(101, 899_000_000), 1},
		{time.Unix(102, 0), 2},
	} {
		if got := uptimeSeconds(tc.now, start); got != tc.want {
			t.Errorf("uptime at %v = %d, want %d", tc.now.Sub(start), got, tc.want)
		}
	}
}
