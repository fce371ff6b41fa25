package envoysim

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/meshdrain/meshdrain/pkg/clock/clocktest"
)

// TestGracefulDrainKeepsAcceptingAndClosesConnections: during a graceful drain a new
// connection is accepted and every response carries Connection: close.
func TestGracefulDrainKeepsAcceptingAndClosesConnections(t *testing.T) {
	s := startSidecar(t, Config{Profile: ProfileEnvoy}, appAddr(startApp(t, nil)))
	addr := s.InboundAddr(8080)
	kept, err := dialRaw(t, addr)
	if err != nil {
		t.Fatal(err)
	}
	resp, _, err := kept.get("/before")
	if err != nil || resp.Close {
		t.Fatalf("before drain: close=%v err=%v", resp != nil && resp.Close, err)
	}
	if code, _ := adminDo(t, s, "POST", "/drain_listeners?inboundonly&graceful"); code != 200 {
		t.Fatalf("drain = %d", code)
	}
	// The connection opened before the drain is told to close on its next response.
	resp, body, err := kept.get("/after")
	if err != nil || body != "ok" {
		t.Fatalf("existing connection during drain: %v %q", err, body)
	}
	// Go's client folds "Connection: close" into resp.Close.
	if !resp.Close {
		t.Error("existing connection: no Connection: close during the drain")
	}
	// A new connection is still accepted, and also told to close.
	fresh, err := dialRaw(t, addr)
	if err != nil {
		t.Fatalf("new connection during graceful drain: %v", err)
	}
	resp, body, err = fresh.get("/new")
	if err != nil || body != "ok" || !resp.Close {
		t.Fatalf("new connection during drain: %v %q close=%v", err, body, resp != nil && resp.Close)
	}
	if v := statValue(t, s, "http.ingress_http.downstream_cx_drain_close"); v != 2 {
		t.Errorf("downstream_cx_drain_close = %d, want 2", v)
	}
	// The server state does not change.
	if _, body := adminDo(t, s, "GET", "/ready"); body != "LIVE\n" {
		t.Errorf("/ready = %q", body)
	}
}

// TestNonGracefulDrainRefusesNewConnections: listeners stop at once; a connection accepted
// before goes on without being told anything.
func TestNonGracefulDrainRefusesNewConnections(t *testing.T) {
	s := startSidecar(t, Config{}, appAddr(startApp(t, nil)))
	addr := s.InboundAddr(8080)
	kept, err := dialRaw(t, addr)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := kept.get("/before"); err != nil {
		t.Fatal(err)
	}
	if code, body := adminDo(t, s, "POST", "/drain_listeners?inboundonly"); code != 200 || body != "OK\n" {
		t.Fatalf("drain = %d %q", code, body)
	}
	mustRefuse(t, addr)
	resp, body, err := kept.get("/after")
	if err != nil || body != "ok" {
		t.Fatalf("existing connection after non-graceful drain: %v %q", err, body)
	}
	if resp.Close {
		t.Error("existing connection was told to close; Envoy does not notify it")
	}
	if v := statValue(t, s, "listener_manager.listener_stopped"); v != 1 {
		t.Errorf("listener_manager.listener_stopped = %d", v)
	}
	// Envoy keeps stopped listeners in active_listeners_: the gauge does not move.
	if v := statValue(t, s, "listener_manager.total_listeners_active"); v != 1 {
		t.Errorf("listener_manager.total_listeners_active = %d after the stop, want 1", v)
	}
}

// TestGracefulDrainStopsListenersAtDrainTimeUnlessSkipExit.
func TestGracefulDrainStopsListenersAtDrainTimeUnlessSkipExit(t *testing.T) {
	app := startApp(t, nil)
	for _, skipExit := range []bool{false, true} {
		s := startSidecar(t, Config{DrainTime: 30 * time.Millisecond}, appAddr(app))
		path := "/drain_listeners?inboundonly&graceful"
		if skipExit {
			path += "&skip_exit"
		}
		adminDo(t, s, "POST", path)
		addr := s.InboundAddr(8080)
		if skipExit {
			time.Sleep(60 * time.Millisecond) // two drain times; nothing may happen
			c, err := dialRaw(t, addr)
			if err != nil {
				t.Fatalf("skip_exit: listener stopped: %v", err)
			}
			if resp, _, err := c.get("/"); err != nil || !resp.Close {
				t.Errorf("skip_exit: response after drain time: %v close=%v", err, resp != nil && resp.Close)
			}
			continue
		}
		clocktest.Eventually(t, "listener stopped at drain time", func() bool {
			c, err := dialRaw(t, addr)
			if err == nil {
				_ = c.conn.Close()
			}
			return err != nil && isRefused(err)
		})
	}
}

// TestGradualDrainProbability: at the start of a long drain almost no response closes its
// connection; once the drain time is over every one does.
func TestGradualDrainProbability(t *testing.T) {
	app := startApp(t, nil)
	s := startSidecar(t, Config{DrainStrategy: DrainGradual, DrainTime: time.Hour}, appAddr(app))
	adminDo(t, s, "POST", "/drain_listeners?inboundonly&graceful&skip_exit")
	closes := 0
	for i := 0; i < 20; i++ {
		if s.drainClose() {
			closes++
		}
	}
	if closes > 0 {
		t.Errorf("%d of 20 responses closed a second into an hour-long gradual drain", closes)
	}
	short := startSidecar(t, Config{DrainStrategy: DrainGradual, DrainTime: 20 * time.Millisecond}, appAddr(app))
	adminDo(t, short, "POST", "/drain_listeners?inboundonly&graceful&skip_exit")
	time.Sleep(25 * time.Millisecond)
	for i := 0; i < 20; i++ {
		if !short.drainClose() {
			t.Fatal("after the drain time every response must close its connection")
		}
	}
}

// TestHealthcheckFailClosesConnections: a failed health check drains every connection.
func TestHealthcheckFailClosesConnections(t *testing.T) {
	s := startSidecar(t, Config{}, appAddr(startApp(t, nil)))
	adminDo(t, s, "POST", "/healthcheck/fail")
	resp, err := http.Get("http://" + s.InboundAddr(8080) + "/")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if !resp.Close {
		t.Error("response while DRAINING lacks Connection: close")
	}
}

// TestConnectionCloseOnLocalReplyDuringDrain: Envoy's own 503s carry Connection: close too.
func TestConnectionCloseOnLocalReplyDuringDrain(t *testing.T) {
	app := startApp(t, nil)
	addr := appAddr(app)
	app.Close()
	s := startSidecar(t, Config{}, addr)
	adminDo(t, s, "POST", "/drain_listeners?inboundonly&graceful")
	resp, err := http.Get("http://" + s.InboundAddr(8080) + "/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 503 || !resp.Close || !bytes.HasPrefix(body, []byte("upstream connect error")) {
		t.Errorf("= %d close=%v %q", resp.StatusCode, resp.Close, body)
	}
	if !strings.Contains(resp.Header.Get("Server"), "envoy") {
		t.Errorf("Server = %q", resp.Header.Get("Server"))
	}
}

// Envoy's DrainManagerImpl::startDrainSequence: a graceful call while a drain already covers
// the direction queues its own completion for that drain's end, or runs it at once if the
// drain time is over. So a later call without skip_exit stops listeners that the first call
// (pilot-agent's /drain for native sidecars, with skip_exit) would have kept.
func TestRepeatedDrainWithoutSkipExitStopsListenersAtTheFirstDrainsEnd(t *testing.T) {
	app := startApp(t, nil)
	mustStop := func(s *Sidecar) {
		clocktest.Eventually(t, "listener stopped", func() bool {
			c, err := dialRaw(t, s.InboundAddr(8080))
			if err == nil {
				_ = c.conn.Close()
			}
			return err != nil && isRefused(err)
		})
	}

	// Second call during the first drain: the stop waits for the first drain's end. A refused
	// dial is a stop before that end only if it came back before the drain time could have
	// run out, measured from before the first call: a busy machine may hold this test back
	// past it (then the stop proves nothing, and the drain time is long enough for that to be
	// rare).
	const firstDrain = 500 * time.Millisecond
	s := startSidecar(t, Config{DrainTime: firstDrain}, appAddr(app))
	drained := time.Now()
	adminDo(t, s, "POST", "/drain_listeners?inboundonly&graceful&skip_exit")
	if code, body := adminDo(t, s, "POST", "/drain_listeners?inboundonly&graceful"); code != 200 || body != "OK\n" {
		t.Fatalf("repeated drain = %d %q", code, body)
	}
	c, err := dialRaw(t, s.InboundAddr(8080))
	switch since := time.Since(drained); {
	case err == nil:
		_ = c.conn.Close()
	case since < firstDrain:
		t.Fatalf("listener stopped %v after the first drain call, before its drain time %v: %v", since, firstDrain, err)
	default:
		t.Logf("the dial came %v after the first drain call, past its drain time: the stop's timing is not checked", since)
	}
	mustStop(s)

	// Second call after the first drain's end: the listeners stop at once.
	s = startSidecar(t, Config{DrainTime: 20 * time.Millisecond}, appAddr(app))
	adminDo(t, s, "POST", "/drain_listeners?inboundonly&graceful&skip_exit")
	time.Sleep(40 * time.Millisecond)
	if c, err := dialRaw(t, s.InboundAddr(8080)); err != nil {
		t.Fatalf("skip_exit drain stopped the listener: %v", err)
	} else {
		_ = c.conn.Close()
	}
	adminDo(t, s, "POST", "/drain_listeners?inboundonly&graceful")
	mustStop(s)

	// A repeated call with skip_exit keeps them.
	s = startSidecar(t, Config{DrainTime: 20 * time.Millisecond}, appAddr(app))
	adminDo(t, s, "POST", "/drain_listeners?inboundonly&graceful&skip_exit")
	adminDo(t, s, "POST", "/drain_listeners?inboundonly&graceful&skip_exit")
	time.Sleep(60 * time.Millisecond)
	if c, err := dialRaw(t, s.InboundAddr(8080)); err != nil {
		t.Errorf("two skip_exit drains stopped the listener: %v", err)
	} else {
		_ = c.conn.Close()
	}
}
