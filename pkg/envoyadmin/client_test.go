package envoyadmin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/meshdrain/meshdrain/pkg/httpwire"
	"github.com/meshdrain/meshdrain/pkg/inbound"
)

const istioBody = `# TYPE envoy_http_downstream_rq_total counter
envoy_http_downstream_rq_total{http_conn_manager_prefix="inbound_0.0.0.0_8080"} 12
# TYPE envoy_http_downstream_rq_active gauge
envoy_http_downstream_rq_active{http_conn_manager_prefix="inbound_0.0.0.0_8080"} 1
`

func fastOptions() Options {
	return Options{RequestTimeout: 200 * time.Millisecond, RetryInitial: time.Millisecond, RetryMax: 5 * time.Millisecond}
}

func newClient(t *testing.T, url string) *Client {
	t.Helper()
	c, err := New(url, fastOptions())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestInboundSendsTheFilterAndParses(t *testing.T) {
	var gotFilter, gotPath string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotPath, gotFilter = r.URL.Path, r.URL.Query().Get("filter")
		fmt.Fprint(w, istioBody)
	}))
	defer srv.Close()
	sel := inbound.Selector{Ports: []int{8080}}
	snap, err := newClient(t, srv.URL).Inbound(context.Background(), sel)
	if err != nil {
		t.Fatal(err)
	}
	if gotPath != "/stats/prometheus" || gotFilter != inbound.StatsFilter(sel) {
		t.Errorf("request %s filter %q", gotPath, gotFilter)
	}
	if _, err := regexp.Compile(gotFilter); err != nil {
		t.Errorf("filter arrived mangled: %v", err)
	}
	if r := snap.Read(); r.Signal != inbound.SignalHTTPRequests || *r.Arrivals != 12 || *r.Active != 1 {
		t.Errorf("reading = %+v", r)
	}
}

func TestDrainListenersQueries(t *testing.T) {
	for mode, wantQuery := range map[DrainMode]string{DrainGraceful: "inboundonly&graceful", DrainImmediate: "inboundonly"} {
		var method, query string
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			method, query = r.Method, r.URL.RawQuery
			fmt.Fprint(w, "OK\n")
		}))
		if err := newClient(t, srv.URL).DrainListeners(context.Background(), mode); err != nil {
			t.Fatal(err)
		}
		srv.Close()
		if method != http.MethodPost || query != wantQuery {
			t.Errorf("%s: %s ?%s, want POST ?%s", mode, method, query, wantQuery)
		}
	}
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { calls.Add(1) }))
	defer srv.Close()
	if err := newClient(t, srv.URL).DrainListeners(context.Background(), DrainNone); err != nil || calls.Load() != 0 {
		t.Errorf("mode none: err %v, calls %d", err, calls.Load())
	}
}

func TestTransientErrorsAreRetried(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch calls.Add(1) {
		case 1:
			w.WriteHeader(http.StatusServiceUnavailable)
		case 2:
			fmt.Fprint(w, "# TYPE envoy_http_downstream_rq_total counter\nenvoy_http_downstream_rq_total{http_conn_manager_prefix=") // truncated
		default:
			fmt.Fprint(w, istioBody)
		}
	}))
	defer srv.Close()
	if _, err := newClient(t, srv.URL).Inbound(context.Background(), inbound.Selector{}); err != nil {
		t.Fatalf("after retries: %v", err)
	}
	if calls.Load() != 3 {
		t.Errorf("calls = %d, want 3", calls.Load())
	}
}

func TestClientErrorsAreNotRetried(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.WriteHeader(http.StatusMethodNotAllowed)
		fmt.Fprint(w, "Method GET not allowed, POST required.")
	}))
	defer srv.Close()
	err := newClient(t, srv.URL).DrainListeners(context.Background(), DrainGraceful)
	var status *StatusError
	if !errors.As(err, &status) || status.Code != 405 || calls.Load() != 1 {
		t.Fatalf("err %v after %d calls", err, calls.Load())
	}
	if !strings.Contains(err.Error(), "POST") || !strings.Contains(err.Error(), "/drain_listeners") || !strings.Contains(err.Error(), "405") {
		t.Errorf("error lacks method, url or status: %v", err)
	}
}

func TestRefusedIsReportedAtOnce(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err = newClient(t, "http://"+addr).Inbound(ctx, inbound.Selector{})
	if !IsRefused(err) || !IsUnreachable(err) {
		t.Fatalf("err = %v, want refused", err)
	}
	if time.Since(start) > time.Second {
		t.Error("refused must not be retried")
	}
}

func TestHangingAdminEndsWithTheContext(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := newClient(t, srv.URL).Inbound(ctx, inbound.Selector{})
	if err == nil || IsUnreachable(err) {
		t.Fatalf("err = %v, want a timeout that is not 'unreachable'", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("took %v", d)
	}
}

func TestServerInfo(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"version":"abc/1.31.0/Clean/RELEASE/BoringSSL","state":"LIVE","command_line_options":{"drain_time":"45s","drain_strategy":"Immediate"}}`)
	}))
	defer srv.Close()
	info, err := newClient(t, srv.URL).ServerInfo(context.Background())
	if err != nil || info.State != "LIVE" || info.CommandLineOptions.DrainTime != "45s" || info.CommandLineOptions.DrainStrategy != "Immediate" {
		t.Errorf("info %+v err %v", info, err)
	}
}

func TestNewRejectsBadURLs(t *testing.T) {
	for _, u := range []string{"127.0.0.1:15000", "ftp://x", "http://", "::", "https://127.0.0.1:15000"} {
		if _, err := New(u, Options{}); err == nil {
			t.Errorf("New(%q) accepted", u)
		}
	}
	if _, err := ParseDrainMode("soft"); err == nil {
		t.Error("ParseDrainMode accepted soft")
	}
}

// A blackholed admin address (a NetworkPolicy drop, a wrong pod IP) never answers the dial:
// when the caller's time runs out the error must still say "unreachable", or prestop would
// wait for its whole deadline instead of concluding there is no sidecar.
func TestDialThatTimesOutIsUnreachable(t *testing.T) {
	blackhole := &httpwire.Client{Dial: func(ctx context.Context, addr string) (net.Conn, error) {
		<-ctx.Done()
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: ctx.Err()}
	}}
	opts := fastOptions()
	opts.HTTPClient = blackhole
	c, err := New("http://127.0.0.1:15000", opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err = c.Inbound(ctx, inbound.Selector{})
	if err == nil || !IsUnreachable(err) || IsRefused(err) {
		t.Errorf("err = %v: want unreachable, not refused", err)
	}
}

func TestReadErrorsAreNotUnreachable(t *testing.T) {
	for _, err := range []error{
		&net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET},
		&StatusError{Method: "GET", URL: "/stats/prometheus", Code: 500},
		context.DeadlineExceeded,
	} {
		if IsUnreachable(err) {
			t.Errorf("IsUnreachable(%v) = true", err)
		}
	}
}
