package envoy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/meshdrain/meshdrain/pkg/localhttp"
	"github.com/meshdrain/meshdrain/pkg/localhttp/localhttptest"
	"github.com/meshdrain/meshdrain/pkg/mesh"
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
	return newClientWith(t, url, fastOptions())
}

// capOptions are for the tests whose subject is the body cap: one attempt may take as long
// as a starved machine needs to read 2 MiB, so that the cap, and not the attempt's timeout,
// is what ends the answer. A client that read past the cap would run into the timeout, and
// the test would see that error instead of the cap's.
func capOptions() Options {
	o := fastOptions()
	o.RequestTimeout = 20 * time.Second
	return o
}

func newClientWith(t *testing.T, url string, opts Options) *Client {
	t.Helper()
	c, err := New(url, opts)
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
	sel := mesh.Selector{Ports: []int{8080}}
	snap, err := newClient(t, srv.URL).Inbound(context.Background(), sel)
	if err != nil {
		t.Fatal(err)
	}
	if gotPath != "/stats/prometheus" || gotFilter != StatsFilter(sel) {
		t.Errorf("request %s filter %q", gotPath, gotFilter)
	}
	if _, err := regexp.Compile(gotFilter); err != nil {
		t.Errorf("filter arrived mangled: %v", err)
	}
	if r := snap.Read(); r.Signal != mesh.SignalHTTPRequests || *r.Arrivals != 12 || *r.Active != 1 {
		t.Errorf("reading = %+v", r)
	}
}

func TestDrainListenersQueries(t *testing.T) {
	for mode, wantQuery := range map[mesh.DrainMode]string{mesh.DrainGraceful: "inboundonly&graceful", mesh.DrainImmediate: "inboundonly"} {
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
	if err := newClient(t, srv.URL).DrainListeners(context.Background(), mesh.DrainNone); err != nil || calls.Load() != 0 {
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
			fmt.Fprint(w, "# TYPE envoy_http_downstream_rq_total counter\nenvoy_http_downstream_rq_total{http_conn_manager_prefix=\"inbound_0.0.0.0_8080") // truncated
		default:
			fmt.Fprint(w, istioBody)
		}
	}))
	defer srv.Close()
	if _, err := newClient(t, srv.URL).Inbound(context.Background(), mesh.Selector{}); err != nil {
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
	err := newClient(t, srv.URL).DrainListeners(context.Background(), mesh.DrainGraceful)
	var status *StatusError
	if !errors.As(err, &status) || status.Code != 405 || calls.Load() != 1 {
		t.Fatalf("err %v after %d calls", err, calls.Load())
	}
	if !strings.Contains(err.Error(), "POST") || !strings.Contains(err.Error(), "/drain_listeners") || !strings.Contains(err.Error(), "405") {
		t.Errorf("error lacks method, url or status: %v", err)
	}
}

func TestRefusedIsReportedAtOnce(t *testing.T) {
	addr := localhttptest.RefusingAddr(t)
	// Counted, not timed: a retried refusal dials again within milliseconds (the backoff is
	// at most 5 ms), whereas a wall-clock bound is one a busy machine can break.
	opts := fastOptions()
	var dials atomic.Int32
	opts.Dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
		dials.Add(1)
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err := newClientWith(t, "http://"+addr, opts).Inbound(ctx, mesh.Selector{})
	if !IsRefused(err) || !IsUnreachable(err) {
		t.Fatalf("err = %v, want refused", err)
	}
	if n := dials.Load(); n != 1 || errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("%d dials, err %v: refused must not be retried", n, err)
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
	_, err := newClient(t, srv.URL).Inbound(ctx, mesh.Selector{})
	if err == nil || IsUnreachable(err) {
		t.Fatalf("err = %v, want a timeout that is not 'unreachable'", err)
	}
	// What ended the call is the caller's context (its error, and it is over), not a wall-clock
	// bound a busy machine could break; the server would have held the call to the end of the
	// test.
	if !errors.Is(err, context.DeadlineExceeded) || ctx.Err() == nil {
		t.Errorf("err = %v, context %v: want the call ended by its context", err, ctx.Err())
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Errorf("took %v: the call outlived its context", d)
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
	for _, u := range []string{"127.0.0.1:15000", "ftp://x", "http://", "::", "https://127.0.0.1:15000",
		"http://10.0.0.1:15000", "http://169.254.169.254", "http://istiod.istio-system:15014"} {
		if _, err := New(u, Options{}); err == nil {
			t.Errorf("New(%q) accepted", u)
		}
	}
	if _, err := mesh.ParseDrainMode("soft"); err == nil {
		t.Error("ParseDrainMode accepted soft")
	}
}

// A blackholed admin address (a NetworkPolicy drop, a wrong pod IP) never answers the dial:
// when the caller's time runs out the error must still say "unreachable", or prestop would
// wait for its whole deadline instead of concluding there is no sidecar.
func TestDialThatTimesOutIsUnreachable(t *testing.T) {
	opts := fastOptions()
	opts.Dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
		<-ctx.Done()
		return nil, &net.OpError{Op: "dial", Net: network, Err: ctx.Err()}
	}
	c, err := New("http://127.0.0.1:15000", opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err = c.Inbound(ctx, mesh.Selector{})
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

// rawAdmin serves each connection with serve after reading the request head: answers that no
// well-behaved server gives.
func rawAdmin(t *testing.T, serve func(conn net.Conn, req *http.Request)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				req, err := http.ReadRequest(bufio.NewReader(conn))
				if err != nil {
					return
				}
				serve(conn, req)
			}()
		}
	}()
	return "http://" + ln.Addr().String()
}

func endlessChunks(conn net.Conn, line string) {
	io.WriteString(conn, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
	chunk := fmt.Sprintf("%x\r\n%s\r\n", len(line), line)
	for {
		if _, err := io.WriteString(conn, chunk); err != nil {
			return
		}
	}
}

// Endless answers end with the call's context (stats) or are not read at all (drain): the
// call returns by its deadline whatever the server keeps sending.
// An answer that never ends is cut by the body cap, not by the attempt's timeout; a drain
// call's "OK" is read without reading its body to the end. What ends each call is asserted
// by its error, not by a wall-clock bound, so that a busy machine cannot fail the test: a
// client that read on would run into capOptions' timeout and fail with that error.
func TestEndlessAnswersAreBounded(t *testing.T) {
	stats := rawAdmin(t, func(conn net.Conn, _ *http.Request) {
		endlessChunks(conn, strings.Repeat("# an endless comment\n", 200))
	})
	_, err := newClientWith(t, stats, capOptions()).Inbound(context.Background(), mesh.Selector{})
	var tooLarge *localhttp.BodyTooLargeError
	if !errors.As(err, &tooLarge) {
		t.Errorf("endless stats: err = %v, want the body cap", err)
	}

	drain := rawAdmin(t, func(conn net.Conn, _ *http.Request) { endlessChunks(conn, "OK\n") })
	if err := newClientWith(t, drain, capOptions()).DrainListeners(context.Background(), mesh.DrainGraceful); err != nil {
		t.Errorf("drain with an endless OK body: %v (the body must not be read to its end)", err)
	}
}

func TestTooLargeStatsAreNotRetried(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		line := strings.Repeat("# filler comment line that is long enough to add up fast\n", 1024)
		for i := 0; i < 100; i++ {
			if _, err := io.WriteString(w, line); err != nil {
				return
			}
		}
	}))
	defer srv.Close()
	_, err := newClientWith(t, srv.URL, capOptions()).Inbound(context.Background(), mesh.Selector{})
	if err == nil || !strings.Contains(err.Error(), "exceeds") || calls.Load() != 1 {
		t.Errorf("err %v after %d calls, want one call and a clear size error", err, calls.Load())
	}
}

func TestUptime(t *testing.T) {
	answer := `{"state":"LIVE","uptime_current_epoch":"3601s","uptime_all_epochs":"3601s"}`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/server_info" {
			http.NotFound(w, r)
			return
		}
		io.WriteString(w, answer)
	}))
	defer srv.Close()
	c := newClient(t, srv.URL)
	if d, err := c.Uptime(context.Background()); err != nil || d != 3601*time.Second {
		t.Errorf("uptime %v err %v", d, err)
	}
	answer = `{"state":"LIVE"}`
	if _, err := c.Uptime(context.Background()); err == nil {
		t.Error("an answer without uptime was accepted")
	}
}

func TestUnixSocketAdmin(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "admin.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Skipf("no unix sockets: %v", err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/stats/prometheus" {
			fmt.Fprint(w, istioBody)
		}
	})}
	go srv.Serve(ln)
	defer srv.Close()
	c := newClient(t, "unix:"+sock)
	snap, err := c.Inbound(context.Background(), mesh.Selector{})
	if err != nil {
		t.Fatal(err)
	}
	if r := snap.Read(); r.Arrivals == nil || *r.Arrivals != 12 {
		t.Errorf("reading %+v", r)
	}
	if c.URL() != "unix:"+sock {
		t.Errorf("URL() = %s", c.URL())
	}
}

func TestReadResponse(t *testing.T) {
	resp, err := http.ReadResponse(bufio.NewReader(strings.NewReader("HTTP/1.1 503 Service Unavailable\r\nContent-Length: 5\r\n\r\nbusy!")), nil)
	if err != nil {
		t.Fatal(err)
	}
	err = ReadResponse("GET", "http://127.0.0.1:15000/stats/prometheus", resp, func(io.Reader) error { t.Error("read called on a 503"); return nil })
	var status *StatusError
	if !errors.As(err, &status) || status.Code != 503 || status.Body != "busy!" {
		t.Errorf("err = %v", err)
	}
}

// An admin that answers badly, retried until the call's time runs out, is reachable even if
// the very last attempt was cut by the deadline before it connected.
func TestBadAnswersThenACutDialAreNotUnreachable(t *testing.T) {
	srv := rawAdmin(t, func(conn net.Conn, _ *http.Request) {
		io.WriteString(conn, "HTTP/1.1 200 OK\r\nX-Endless: ")
		for {
			if _, err := io.WriteString(conn, strings.Repeat("a", 64<<10)); err != nil {
				return
			}
		}
	})
	opts := fastOptions()
	var dials atomic.Int32
	opts.Dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
		if dials.Add(1) > 2 {
			<-ctx.Done() // the third attempt never connects before the deadline
			return nil, &net.OpError{Op: "dial", Net: network, Err: ctx.Err()}
		}
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}
	c, err := New(srv, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err = c.Inbound(ctx, mesh.Selector{})
	if err == nil || IsUnreachable(err) || !strings.Contains(err.Error(), "exceeded") {
		t.Errorf("err = %v: want the bad answer, not unreachable", err)
	}
}
