package envoysim

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/meshdrain/meshdrain/pkg/clock/clocktest"
)

func TestProxyCountsLikeEnvoy(t *testing.T) {
	s := startSidecar(t, Config{Profile: ProfileEnvoy}, appAddr(startApp(t, nil)))
	c, err := dialRaw(t, s.InboundAddr(8080))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if resp, body, err := c.get("/x"); err != nil || resp.StatusCode != 200 || body != "ok" {
			t.Fatalf("request %d: %v %q", i, err, body)
		}
	}
	want := map[string]int{
		"http.ingress_http.downstream_rq_total":              3,
		"http.ingress_http.downstream_rq_active":             0,
		"http.ingress_http.downstream_rq_2xx":                3,
		"http.ingress_http.downstream_cx_total":              1,
		"http.ingress_http.downstream_cx_active":             1,
		"cluster.service_a.upstream_rq_total":                3,
		"cluster.service_a.upstream_rq_active":               0,
		"cluster.service_a.upstream_rq_200":                  3,
		"cluster.service_a.upstream_cx_active":               1, // keep-alive to the app
		"listener.0.0.0.0_8080.downstream_cx_total":          1,
		"listener.0.0.0.0_8080.downstream_cx_active":         1,
		"listener.0.0.0.0_8080.worker_0.downstream_cx_total": 1,
		"listener.0.0.0.0_8080.worker_1.downstream_cx_total": 0,
	}
	for name, v := range want {
		if got := statValue(t, s, name); got != v {
			t.Errorf("%s = %d, want %d", name, got, v)
		}
	}
	_ = c.conn.Close()
	clocktest.Eventually(t, "connection gauges back to 0", func() bool {
		return statValue(t, s, "listener.0.0.0.0_8080.downstream_cx_active") == 0 &&
			statValue(t, s, "listener.0.0.0.0_8080.worker_0.downstream_cx_active") == 0 &&
			statValue(t, s, "http.ingress_http.downstream_cx_active") == 0
	})
	// The next connection lands on the other worker.
	c2, _ := dialRaw(t, s.InboundAddr(8080))
	_, _, _ = c2.get("/y")
	if got := statValue(t, s, "listener.0.0.0.0_8080.worker_1.downstream_cx_total"); got != 1 {
		t.Errorf("worker_1 downstream_cx_total = %d", got)
	}
}

func TestProxyAppRefusesGives503UF(t *testing.T) {
	app := startApp(t, nil)
	addr := appAddr(app)
	app.Close()
	var accessLog bytes.Buffer
	s := startSidecar(t, Config{Profile: ProfileEnvoy, AccessLog: &syncWriter{w: &accessLog}}, addr)
	resp, err := http.Get("http://" + s.InboundAddr(8080) + "/orders")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 503 || string(body) != bodyConnectFailure {
		t.Errorf("= %d %q", resp.StatusCode, body)
	}
	for name, v := range map[string]int{
		"cluster.service_a.upstream_cx_connect_fail": 1,
		"cluster.service_a.upstream_rq_total":        0,
		"cluster.service_a.upstream_rq_5xx":          1,
		"cluster.service_a.upstream_rq_503":          1,
		"cluster.service_a.upstream_rq_completed":    1,
		// The pending request is ejected; the other flags' counters exist at 0, as every
		// cluster traffic stat does in Envoy.
		"cluster.service_a.upstream_rq_pending_failure_eject":         1,
		"cluster.service_a.upstream_cx_destroy_remote_with_active_rq": 0,
		"cluster.service_a.upstream_rq_timeout":                       0,
		"cluster.service_a.upstream_rq_rx_reset":                      0,
		"http.ingress_http.downstream_rq_total":                       1,
		"http.ingress_http.downstream_rq_5xx":                         1,
	} {
		if got := statValue(t, s, name); got != v {
			t.Errorf("%s = %d, want %d", name, got, v)
		}
	}
	log := s.AccessLog()
	if len(log) != 1 || log[0].Code != 503 || log[0].Flags != "UF" || log[0].Path != "/orders" || log[0].Body != bodyConnectFailure {
		t.Errorf("access log = %+v", log)
	}
	line := accessLog.String()
	if !strings.Contains(line, `"GET /orders HTTP/1.1" 503 UF upstream_reset_before_response_started{connection_failure}`) {
		t.Errorf("access log line = %q", line)
	}
}

func TestProxyAppResetBeforeHeadersGives503UC(t *testing.T) {
	app := startApp(t, func(w http.ResponseWriter, _ *http.Request) {
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			_ = conn.Close()
		}
	})
	s := startSidecar(t, Config{}, appAddr(app))
	// POST is not retried by the upstream transport, as Envoy does not retry inbound.
	resp, err := http.Post("http://"+s.InboundAddr(8080)+"/pay", "text/plain", strings.NewReader("x"))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 503 || string(body) != bodyConnectTermination {
		t.Errorf("= %d %q", resp.StatusCode, body)
	}
	if log := s.AccessLog(); len(log) != 1 || log[0].Flags != "UC" {
		t.Errorf("access log = %+v", log)
	}
	// An HTTP/1.1 app closing under a request is a remote close with an active request in
	// Envoy's pool (conn_pool_base.cc); upstream_rq_rx_reset is an HTTP/2 RST_STREAM (UR).
	for name, v := range map[string]int{
		"cluster.inbound|8080||;.upstream_cx_destroy_remote_with_active_rq": 1,
		"cluster.inbound|8080||;.upstream_cx_destroy_with_active_rq":        1,
		"cluster.inbound|8080||;.upstream_rq_rx_reset":                      0,
		"cluster.inbound|8080||;.upstream_cx_connect_fail":                  0,
		"cluster.inbound|8080||;.upstream_rq_5xx":                           1,
		"http.inbound_0.0.0.0_8080;.downstream_rq_5xx":                      1,
	} {
		if got := statValue(t, s, name); got != v {
			t.Errorf("%s = %d, want %d", name, got, v)
		}
	}
}

func TestProxyAppResetMidBodyResetsClient(t *testing.T) {
	app := startApp(t, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Length", "100")
		w.WriteHeader(200)
		_, _ = io.WriteString(w, "part")
		w.(http.Flusher).Flush()
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			_ = conn.Close()
		}
	})
	s := startSidecar(t, Config{}, appAddr(app))
	resp, err := http.Get("http://" + s.InboundAddr(8080) + "/stream")
	if err == nil {
		_, err = io.ReadAll(resp.Body)
		resp.Body.Close()
	}
	if err == nil {
		t.Fatal("client read a complete body from an upstream reset mid-body")
	}
	clocktest.Eventually(t, "access log", func() bool { return len(s.AccessLog()) == 1 })
	if e := s.AccessLog()[0]; e.Code != 200 || e.Flags != "UC" {
		t.Errorf("access log = %+v", e)
	}
}

func TestKillCutsInFlightRequests(t *testing.T) {
	release := make(chan struct{})
	app := startApp(t, func(w http.ResponseWriter, _ *http.Request) {
		<-release
		_, _ = io.WriteString(w, "late")
	})
	defer close(release)
	s := startSidecar(t, Config{}, appAddr(app))
	errc := make(chan error, 1)
	go func() {
		resp, err := http.Get("http://" + s.InboundAddr(8080) + "/slow")
		if err == nil {
			resp.Body.Close()
			err = errors.New("got a response")
		}
		errc <- err
	}()
	clocktest.Eventually(t, "request in flight", func() bool { return s.inbound[0].(*inboundListener).rqActive.get() == 1 })
	s.Kill()
	if err := <-errc; err == nil || err.Error() == "got a response" {
		t.Errorf("in-flight request after kill: %v", err)
	}
	<-s.Done()
	mustRefuse(t, strings.TrimPrefix(s.AdminURL(), "http://"))
}

// syncWriter serialises writes for tests that read the buffer later.
type syncWriter struct{ w io.Writer }

func (s *syncWriter) Write(p []byte) (int, error) { return s.w.Write(p) }
