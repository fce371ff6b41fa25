package envoysim

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func TestDrainListenersStatusAndBody(t *testing.T) {
	s := startSidecar(t, Config{}, appAddr(startApp(t, nil)))
	tests := []struct {
		method, path string
		code         int
		body         string
	}{
		{"GET", "/drain_listeners", 405, "Method GET not allowed, POST required."},
		{"GET", "/drain_listeners?inboundonly&graceful", 405, "Method GET not allowed, POST required."},
		{"POST", "/drain_listeners?inboundonly&skip_exit", 400, "skip_exit requires graceful\n"},
		{"POST", "/drain_listeners?inboundonly&graceful&skip_exit", 200, "OK\n"},
		// Idempotent; and graceful=false is still graceful (presence only).
		{"POST", "/drain_listeners?inboundonly&graceful=false", 200, "OK\n"},
		{"POST", "/drain_listeners?inboundonly&graceful", 200, "OK\n"},
	}
	for _, tc := range tests {
		code, body := adminDo(t, s, tc.method, tc.path)
		if code != tc.code || body != tc.body {
			t.Errorf("%s %s = %d %q, want %d %q", tc.method, tc.path, code, body, tc.code, tc.body)
		}
	}
	// A drain does not change the server state.
	if code, body := adminDo(t, s, "GET", "/ready"); code != 200 || body != "LIVE\n" {
		t.Errorf("/ready after drain = %d %q, want 200 LIVE", code, body)
	}
	// Nor did the later calls without skip_exit stop the listeners: the first drain decides.
	if !s.draining() || s.listenersStopped {
		t.Errorf("draining=%v listenersStopped=%v", s.draining(), s.listenersStopped)
	}
}

func TestDrainListenersNonGracefulSkipExitWithNewRuntimeGuard(t *testing.T) {
	s := startSidecar(t, Config{NonGracefulDrainNotifies: true}, appAddr(startApp(t, nil)))
	if code, body := adminDo(t, s, "POST", "/drain_listeners?inboundonly&skip_exit"); code != 200 || body != "OK\n" {
		t.Fatalf("= %d %q, want 200 OK", code, body)
	}
	if !s.draining() {
		t.Error("a non-graceful drain must notify connections with the runtime guard on")
	}
}

func TestHealthcheckFailSetsDraining(t *testing.T) {
	s := startSidecar(t, Config{Profile: ProfileEnvoy}, "")
	if code, body := adminDo(t, s, "GET", "/healthcheck/fail"); code != 405 || body != "Method GET not allowed, POST required." {
		t.Errorf("GET /healthcheck/fail = %d %q", code, body)
	}
	if code, body := adminDo(t, s, "POST", "/healthcheck/fail"); code != 200 || body != "OK\n" {
		t.Fatalf("POST /healthcheck/fail = %d %q", code, body)
	}
	if code, body := adminDo(t, s, "GET", "/ready"); code != 503 || body != "DRAINING\n" {
		t.Errorf("/ready = %d %q, want 503 DRAINING", code, body)
	}
	if got := serverInfo(t, s)["state"]; got != "DRAINING" {
		t.Errorf("server_info state = %v", got)
	}
	if v := statValue(t, s, "server.state"); v != 1 {
		t.Errorf("server.state = %d, want 1", v)
	}
	if code, body := adminDo(t, s, "POST", "/healthcheck/ok"); code != 200 || body != "OK\n" {
		t.Fatalf("POST /healthcheck/ok = %d %q", code, body)
	}
	if code, body := adminDo(t, s, "GET", "/ready"); code != 200 || body != "LIVE\n" {
		t.Errorf("/ready = %d %q, want 200 LIVE", code, body)
	}
}

func serverInfo(t *testing.T, s *Sidecar) map[string]any {
	t.Helper()
	code, body := adminDo(t, s, "GET", "/server_info")
	if code != 200 {
		t.Fatalf("/server_info = %d", code)
	}
	var info map[string]any
	if err := json.Unmarshal([]byte(body), &info); err != nil {
		t.Fatalf("/server_info: %v", err)
	}
	return info
}

func TestServerInfoDrainOptions(t *testing.T) {
	s := startSidecar(t, Config{DrainTime: 45 * time.Second}, "")
	opts := serverInfo(t, s)["command_line_options"].(map[string]any)
	if opts["drain_time"] != "45s" || opts["drain_strategy"] != "Immediate" {
		t.Errorf("istio options = %v %v", opts["drain_time"], opts["drain_strategy"])
	}
	g := startSidecar(t, Config{DrainTime: 600 * time.Second, DrainStrategy: DrainGradual}, "")
	opts = serverInfo(t, g)["command_line_options"].(map[string]any)
	if opts["drain_time"] != "600s" || opts["drain_strategy"] != "Gradual" {
		t.Errorf("envoy options = %v %v", opts["drain_time"], opts["drain_strategy"])
	}
	if serverInfo(t, g)["state"] != "LIVE" {
		t.Error("state not LIVE")
	}
}

func TestAdminUnknownPathAndBadParams(t *testing.T) {
	s := startSidecar(t, Config{}, "")
	code, body := adminDo(t, s, "GET", "/nope")
	if code != 404 || !strings.HasPrefix(body, "invalid path. admin commands are:\n") {
		t.Errorf("/nope = %d %q", code, body)
	}
	// Exact path match: a trailing slash is unknown too.
	if code, _ := adminDo(t, s, "GET", "/server_info/"); code != 404 {
		t.Errorf("/server_info/ = %d, want 404", code)
	}
	if code, body := adminDo(t, s, "GET", "/stats?filter=("); code != 400 || body != "Invalid re2 regex" {
		t.Errorf("bad filter = %d %q", code, body)
	}
	// Perl lookahead is not RE2.
	if code, _ := adminDo(t, s, "GET", "/stats?filter=a(%3F=b)"); code != 400 {
		t.Errorf("lookahead filter = %d, want 400", code)
	}
	if code, body := adminDo(t, s, "GET", "/stats?type=Bogus"); code != 400 || body != "invalid &type= param" {
		t.Errorf("bad type = %d %q", code, body)
	}
	if code, _ := adminDo(t, s, "GET", "/stats?format=xml"); code != 400 {
		t.Errorf("bad format = %d", code)
	}
}

func TestAdminRequestsMoveAdminStats(t *testing.T) {
	s := startSidecar(t, Config{Profile: ProfileEnvoy}, "")
	before := statValue(t, s, "http.admin.downstream_rq_total")
	adminDo(t, s, "GET", "/ready")
	after := statValue(t, s, "http.admin.downstream_rq_total")
	// The /ready and the reading request itself.
	if after != before+2 {
		t.Errorf("http.admin.downstream_rq_total %d -> %d, want +2", before, after)
	}
	// The request reading the stats is active while it is rendered.
	if v := statValue(t, s, "http.admin.downstream_rq_active"); v != 1 {
		t.Errorf("http.admin.downstream_rq_active = %d, want 1", v)
	}
}

func TestStatsFormatsAndType(t *testing.T) {
	s := startSidecar(t, Config{Profile: ProfileEnvoy}, "")
	_, body := adminDo(t, s, "GET", "/stats?format=json&filter=%5Eserver%5C.state%24")
	if body != `{"stats":[{"name":"server.state","value":0}]}`+"\n" {
		t.Errorf("json = %q", body)
	}
	_, body = adminDo(t, s, "GET", "/stats?type=Counters&filter=%5Eserver%5C.")
	if body != "" {
		t.Errorf("server.* counters = %q, want none (all gauges)", body)
	}
	_, body = adminDo(t, s, "GET", "/stats?type=Gauges&filter=%5Eserver%5C.state%24")
	if body != "server.state: 0\n" {
		t.Errorf("gauges = %q", body)
	}
	_, body = adminDo(t, s, "GET", "/stats/prometheus?filter=%5Eserver%5C.state%24")
	if body != "# TYPE envoy_server_state gauge\nenvoy_server_state{} 0\n" {
		t.Errorf("prometheus = %q", body)
	}
	_, viaStats := adminDo(t, s, "GET", "/stats?format=prometheus&filter=%5Eserver%5C.state%24")
	if viaStats != body {
		t.Errorf("format=prometheus %q != /stats/prometheus %q", viaStats, body)
	}
	// Histograms follow counters and gauges.
	_, body = adminDo(t, s, "GET", "/stats?filter=%5Eserver%5C.(state|initialization_time_ms)%24")
	if !strings.HasPrefix(body, "server.state: 0\nserver.initialization_time_ms: P0(") {
		t.Errorf("text with histogram = %q", body)
	}
}

func TestQuitQuitQuitExitsAndRefuses(t *testing.T) {
	s := startSidecar(t, Config{}, appAddr(startApp(t, nil)))
	inbound := s.InboundAddr(8080)
	if code, body := adminDo(t, s, "POST", "/quitquitquit"); code != 200 || body != "OK\n" {
		t.Fatalf("quitquitquit = %d %q", code, body)
	}
	select {
	case <-s.Done():
	case <-time.After(2 * time.Second):
		t.Fatal("Envoy did not exit")
	}
	mustRefuse(t, strings.TrimPrefix(s.AdminURL(), "http://"))
	mustRefuse(t, inbound)
	if s.ExitedAt().IsZero() {
		t.Error("ExitedAt not set")
	}
}
