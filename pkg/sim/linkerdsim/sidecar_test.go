package linkerdsim

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/meshdrain/meshdrain/pkg/clock"
	"github.com/meshdrain/meshdrain/pkg/clock/clocktest"
)

func inbound8080(extra map[string]string) map[string]string {
	m := map[string]string{"direction": "inbound", "target_port": "8080"}
	for k, v := range extra {
		m[k] = v
	}
	return m
}

func TestCountsLikeTheProxy(t *testing.T) {
	app := startApp(t, nil)
	s := startProxy(t, Config{ProbePaths: []string{"/healthz"}, ClientID: "web.default.serviceaccount.identity.linkerd.cluster.local"}, appAddr(app))
	base := "http://" + s.InboundAddr(8080)

	// Before any traffic the port has no series at all: absent, not zero.
	fams := scrape(t, s)
	if _, ok := sum(fams, "request_total", inbound8080(nil)); ok {
		t.Fatal("request_total for 8080 before any request")
	}

	c := httpClient()
	for i := 0; i < 3; i++ {
		if code, body, _ := get(t, c, base+"/"); code != 200 || body != "hello" {
			t.Fatalf("GET / = %d %q", code, body)
		}
	}
	get(t, c, base+"/healthz")

	fams = scrape(t, s)
	for _, tc := range []struct {
		family string
		match  map[string]string
		want   float64
	}{
		{"request_total", inbound8080(map[string]string{"route_name": "default"}), 3},
		{"request_total", inbound8080(map[string]string{"route_name": "probe"}), 1},
		{"response_total", inbound8080(map[string]string{"route_name": "default", "status_code": "200", "classification": "success"}), 3},
		{"tcp_open_total", inbound8080(map[string]string{"peer": "src"}), 1},
		{"tcp_open_connections", inbound8080(map[string]string{"peer": "src"}), 1},
		{"inbound_http_requests_total", map[string]string{"parent_port": "8080", "route_name": "default"}, 3},
	} {
		got, ok := sum(fams, tc.family, tc.match)
		if !ok || got != tc.want {
			t.Errorf("%s%v = %v (present %v), want %v", tc.family, tc.match, got, ok, tc.want)
		}
	}
	// The proxy's own connection to the app carries no target.
	if v, ok := sum(fams, "tcp_open_total", map[string]string{"direction": "inbound", "peer": "dst", "no_tls_reason": "loopback"}); !ok || v < 1 {
		t.Errorf("no peer=dst connection counted (%v)", v)
	}
	// The scrapes themselves are inbound requests on the admin port.
	_, adminPort := portOf(strings.TrimPrefix(s.AdminURL(), "http://"))
	if v, ok := sum(fams, "request_total", map[string]string{"direction": "inbound", "target_port": strconv.Itoa(adminPort), "route_name": "default"}); !ok || v != 2 {
		t.Errorf("admin requests %v, want the two scrapes", v)
	}
	if _, ok := sum(fams, "proxy_build_info", map[string]string{"version": "v2.340.0-linkerdsim"}); !ok {
		t.Error("no proxy_build_info")
	}

	// The exact label set of a request and of a client connection, as the proxy writes them.
	_, text, _ := get(t, c, s.AdminURL()+"/metrics")
	for _, line := range []string{
		`request_total{direction="inbound",target_addr="127.0.0.1:8080",target_ip="127.0.0.1",target_port="8080",tls="true",client_id="web.default.serviceaccount.identity.linkerd.cluster.local",srv_group="",srv_kind="default",srv_name="all-unauthenticated",srv_port="8080",route_group="",route_kind="default",route_name="default",authz_group="",authz_kind="default",authz_name="all-unauthenticated"} 3`,
		`tcp_open_connections{direction="inbound",peer="src",target_addr="127.0.0.1:8080",target_ip="127.0.0.1",target_port="8080",tls="true",client_id="web.default.serviceaccount.identity.linkerd.cluster.local",srv_group="",srv_kind="default",srv_name="all-unauthenticated",srv_port="8080"} 1`,
		"# HELP request_total Total count of HTTP requests.\n# TYPE request_total counter\n",
		"# TYPE inbound_http_requests counter\n",
	} {
		if !strings.Contains(text, line) {
			t.Errorf("/metrics lacks %q", line)
		}
	}
	if !strings.HasSuffix(text, "# EOF\n") {
		t.Error("/metrics does not end with # EOF")
	}
}

func TestInFlightAndAbandonedRequests(t *testing.T) {
	release := make(chan struct{})
	entered := make(chan struct{}, 4)
	app := startApp(t, func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		_, _ = w.Write([]byte("late"))
	})
	s := startProxy(t, Config{}, appAddr(app))
	base := "http://" + s.InboundAddr(8080)
	diff := func() float64 {
		fams := scrape(t, s)
		req, _ := sum(fams, "request_total", inbound8080(nil))
		rsp, _ := sum(fams, "response_total", inbound8080(nil))
		return req - rsp
	}

	done := make(chan int, 1)
	go func() {
		resp, err := httpClient().Get(base + "/slow")
		if err != nil {
			done <- 0
			return
		}
		resp.Body.Close()
		done <- resp.StatusCode
	}()
	<-entered
	if d := diff(); d != 1 {
		t.Errorf("requests - responses with one request in flight = %v, want 1", d)
	}
	close(release)
	if code := <-done; code != 200 {
		t.Fatalf("slow request: %d", code)
	}
	clocktest.Eventually(t, "the response to be counted", func() bool { return diff() == 0 })

	// A client that gives up before the response headers: the request stays counted and
	// no response ever is, the drift Endpoint.InFlight documents.
	release = make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/abandoned", nil)
	go func() {
		<-entered
		cancel()
	}()
	if _, err := httpClient().Do(req); err == nil {
		t.Fatal("abandoned request succeeded")
	}
	clocktest.Eventually(t, "the abandoned request to be logged", func() bool { return len(s.AccessLog()) == 2 })
	if d := diff(); d != 1 {
		t.Errorf("requests - responses after an abandoned request = %v, want 1 (no response recorded)", d)
	}
	close(release)
}

func TestAppRefusedIsA502(t *testing.T) {
	app := startApp(t, nil)
	addr := appAddr(app)
	app.Close()
	s := startProxy(t, Config{ClientID: "web.ns.serviceaccount.identity.linkerd.cluster.local"}, addr)
	code, _, header := get(t, httpClient(), "http://"+s.InboundAddr(8080)+"/")
	if code != http.StatusBadGateway || header.Get("l5d-proxy-error") == "" {
		t.Errorf("status %d, l5d-proxy-error %q", code, header.Get("l5d-proxy-error"))
	}
	// The proxy's own 502 is recorded as a response with its status, a failure like an app's 5xx.
	fams := scrape(t, s)
	if v, ok := sum(fams, "response_total", inbound8080(map[string]string{"status_code": "502", "classification": "failure", "error": ""})); !ok || v != 1 {
		t.Errorf("502 response counted %v", v)
	}
	if v, _ := sum(fams, "response_total", inbound8080(nil)); v != 1 {
		t.Errorf("response_total = %v for one refused request, want 1", v)
	}
	log := s.AccessLog()
	if len(log) != 1 || !log[0].AppRefused || log[0].Code != 502 {
		t.Errorf("access log %+v", log)
	}
}

// TestClassicSIGTERM is a classic proxy without a preStop: at the pod's deletion it stops
// accepting on every port, closes idle connections, lets the request in hand finish with
// Connection: close, and exits once nothing is left.
func TestClassicSIGTERM(t *testing.T) {
	release := make(chan struct{})
	entered := make(chan struct{}, 1)
	app := startApp(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			entered <- struct{}{}
			<-release
		}
		_, _ = w.Write([]byte("hello"))
	})
	s := startProxy(t, Config{Injection: InjectionClassic}, appAddr(app))
	inboundAddr, adminAddr := s.InboundAddr(8080), strings.TrimPrefix(s.AdminURL(), "http://")

	idle := dial(t, inboundAddr)
	idle.send(t, "/")
	if resp := idle.response(t); resp.StatusCode != 200 || resp.Close {
		t.Fatalf("first response %d close %v", resp.StatusCode, resp.Close)
	}
	busy := dial(t, inboundAddr)
	busy.send(t, "/slow")
	<-entered

	s.Terminate()
	if st := s.State(); st != StateDraining {
		t.Fatalf("state %s after SIGTERM", st)
	}
	clocktest.Eventually(t, "the inbound port to refuse", func() bool { return refused(inboundAddr) })
	clocktest.Eventually(t, "the admin port to refuse", func() bool { return refused(adminAddr) })
	if !idle.closedByPeer() {
		t.Error("idle keep-alive connection left open after SIGTERM")
	}
	select {
	case <-s.Done():
		t.Fatal("exited with a request in flight")
	default:
	}
	close(release)
	if resp := busy.response(t); resp.StatusCode != 200 || !resp.Close {
		t.Errorf("in-flight request: %d, Connection: close %v", resp.StatusCode, resp.Close)
	}
	select {
	case <-s.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("did not exit once the last connection closed")
	}
	if s.ExitReason() != "terminated" {
		t.Errorf("exit reason %q", s.ExitReason())
	}
}

func TestShutdownGracePeriod(t *testing.T) {
	fake := clock.NewFake(time.Unix(0, 0))
	stuck := make(chan struct{})
	t.Cleanup(func() { close(stuck) })
	entered := make(chan struct{}, 1)
	app := startApp(t, func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		select {
		case <-stuck:
		case <-r.Context().Done():
		}
	})
	s := startProxy(t, Config{Injection: InjectionClassic, Clock: fake, ShutdownGracePeriod: 2 * time.Minute}, appAddr(app))
	conn := dial(t, s.InboundAddr(8080))
	conn.send(t, "/")
	<-entered

	s.Terminate()
	clocktest.Eventually(t, "the grace timer", func() bool { return fake.Waiters() == 1 })
	fake.Advance(2*time.Minute - time.Millisecond)
	select {
	case <-s.Done():
		t.Fatal("exited before the grace period")
	default:
	}
	fake.Advance(time.Millisecond)
	select {
	case <-s.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("still running after the grace period")
	}
	if s.ExitReason() != "shutdown grace period over" {
		t.Errorf("exit reason %q", s.ExitReason())
	}
	if !conn.closedByPeer() {
		t.Error("the stuck request's connection survived the exit")
	}
}

func TestClassicWaitBeforeExit(t *testing.T) {
	fake := clock.NewFake(time.Unix(0, 0))
	app := startApp(t, nil)
	s := startProxy(t, Config{Injection: InjectionClassic, WaitBeforeExit: 40 * time.Second, Clock: fake}, appAddr(app))
	base := "http://" + s.InboundAddr(8080)

	s.Terminate()
	if st := s.State(); st != StatePreStop {
		t.Fatalf("state %s during the preStop sleep", st)
	}
	clocktest.Eventually(t, "the preStop timer", func() bool { return fake.Waiters() == 1 })
	fake.Advance(40*time.Second - time.Millisecond)
	if code, _, _ := get(t, httpClient(), base+"/"); code != 200 {
		t.Errorf("during the preStop sleep: %d", code)
	}
	if code, _, _ := get(t, httpClient(), s.AdminURL()+"/ready"); code != 200 {
		t.Errorf("admin during the preStop sleep: %d", code)
	}
	fake.Advance(time.Millisecond)
	clocktest.Eventually(t, "SIGTERM after the sleep", func() bool { return refused(s.InboundAddr(8080)) })
	select {
	case <-s.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("did not exit")
	}
}

func TestNativeSidecarWaitsForTheApp(t *testing.T) {
	app := startApp(t, nil)
	s := startProxy(t, Config{}, appAddr(app))
	base := "http://" + s.InboundAddr(8080)

	s.Terminate()
	if st := s.State(); st != StateRunning {
		t.Fatalf("native sidecar state %s at the pod's deletion", st)
	}
	if code, _, _ := get(t, httpClient(), base+"/"); code != 200 {
		t.Errorf("after the pod's deletion: %d", code)
	}
	scrape(t, s) // the admin port still answers
	s.AppExited()
	select {
	case <-s.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("native sidecar did not exit after the app")
	}
	if s.ExitReason() != "terminated" || !refused(strings.TrimPrefix(s.AdminURL(), "http://")) {
		t.Errorf("exit reason %q", s.ExitReason())
	}
}

func TestKillCutsRequests(t *testing.T) {
	entered := make(chan struct{}, 1)
	stuck := make(chan struct{})
	t.Cleanup(func() { close(stuck) })
	app := startApp(t, func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		select {
		case <-stuck:
		case <-r.Context().Done():
		}
	})
	s := startProxy(t, Config{}, appAddr(app))
	conn := dial(t, s.InboundAddr(8080))
	conn.send(t, "/")
	<-entered
	s.Kill()
	<-s.Done()
	if s.ExitReason() != "killed" || !conn.closedByPeer() {
		t.Errorf("exit reason %q", s.ExitReason())
	}
	s.SignalTerm() // after the exit: nothing
	if s.State() != StateExited {
		t.Errorf("state %s", s.State())
	}
}

func TestAdminEndpoints(t *testing.T) {
	s := startProxy(t, Config{}, "")
	c := httpClient()
	for _, tc := range []struct {
		path string
		code int
		body string
	}{
		{"/ready", 200, "ready\n"},
		{"/live", 200, "live\n"},
		{"/shutdown", 404, ""},
		{"/server_info", 404, ""},
	} {
		if code, body, _ := get(t, c, s.AdminURL()+tc.path); code != tc.code || body != tc.body {
			t.Errorf("GET %s = %d %q, want %d %q", tc.path, code, body, tc.code, tc.body)
		}
	}

	s = startProxy(t, Config{ShutdownEndpoint: true}, "")
	if code, _, _ := get(t, c, s.AdminURL()+"/shutdown"); code != http.StatusMethodNotAllowed {
		t.Errorf("GET /shutdown = %d", code)
	}
	resp, err := c.Post(s.AdminURL()+"/shutdown", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("POST /shutdown = %d", resp.StatusCode)
	}
	select {
	case <-s.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("POST /shutdown did not shut the proxy down")
	}
}

func TestConfigErrors(t *testing.T) {
	for _, cfg := range []Config{
		{Injection: "sidecar"},
		{WaitBeforeExit: time.Second}, // native is the default: the chart refuses both
		{Injection: InjectionClassic, WaitBeforeExit: -time.Second},
		{Inbound: []InboundPort{{Port: 0, AppAddr: "127.0.0.1:1"}}},
		{Inbound: []InboundPort{{Port: 80, AppAddr: "127.0.0.1:1"}, {Port: 80, AppAddr: "127.0.0.1:2"}}},
		{Inbound: []InboundPort{{Port: 80}}},
		{PodIP: "pod"},
	} {
		if s, err := Start(cfg); err == nil {
			s.Close()
			t.Errorf("config %+v accepted", cfg)
		}
	}
}
