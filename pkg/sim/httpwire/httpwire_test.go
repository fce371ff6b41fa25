package httpwire

import (
	"bufio"
	"context"
	"errors"
	"github.com/meshdrain/meshdrain/pkg/localhttp/localhttptest"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

func serve(t *testing.T, h http.Handler) (*Server, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &Server{Handler: h}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close(); srv.Wait() })
	return srv, "http://" + ln.Addr().String()
}

func get(t *testing.T, c *Client, url string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(body)
}

func TestKeepAliveReusesOneConnection(t *testing.T) {
	var remotes sync.Map
	var n atomic.Int32
	_, url := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		remotes.Store(r.RemoteAddr, true)
		n.Add(1)
		io.WriteString(w, "hello "+r.URL.Path)
	}))
	c := &Client{}
	for i := 0; i < 5; i++ {
		resp, body := get(t, c, url+"/x")
		if resp.StatusCode != 200 || body != "hello /x" || resp.ContentLength != 8 {
			t.Fatalf("got %d %q", resp.StatusCode, body)
		}
	}
	count := 0
	remotes.Range(func(any, any) bool { count++; return true })
	if count != 1 || n.Load() != 5 {
		t.Errorf("%d requests over %d connections, want 5 over 1", n.Load(), count)
	}
}

func TestConnectionCloseHeaderClosesTheConnection(t *testing.T) {
	var remotes sync.Map
	_, url := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		remotes.Store(r.RemoteAddr, true)
		w.Header().Set("Connection", "close")
		w.WriteHeader(503)
		io.WriteString(w, "draining")
	}))
	c := &Client{}
	for i := 0; i < 3; i++ {
		resp, body := get(t, c, url)
		if resp.StatusCode != 503 || body != "draining" || !resp.Close || resp.Header.Get("Connection") != "" && resp.Header.Get("Connection") != "close" {
			t.Fatalf("resp %d %q close=%v", resp.StatusCode, body, resp.Close)
		}
	}
	count := 0
	remotes.Range(func(any, any) bool { count++; return true })
	if count != 3 {
		t.Errorf("3 requests used %d connections, want 3", count)
	}
	c.mu.Lock()
	pooled := 0
	for _, list := range c.idle {
		pooled += len(list)
	}
	c.mu.Unlock()
	if pooled != 0 {
		t.Errorf("%d connections pooled after Connection: close", pooled)
	}
}

func TestShutdownWaitsForActiveAndClosesIdle(t *testing.T) {
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	srv, url := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			started <- struct{}{}
			<-release
		}
		io.WriteString(w, "done")
	}))
	idleClient, slowClient := &Client{}, &Client{}
	get(t, idleClient, url) // leaves an idle keep-alive connection
	result := make(chan string, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodGet, url+"/slow", nil)
		resp, err := slowClient.Do(req)
		if err != nil {
			result <- err.Error()
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		result <- string(b)
	}()
	<-started
	shut := make(chan error, 1)
	go func() { shut <- srv.Shutdown(context.Background()) }()
	select {
	case <-shut:
		t.Fatal("Shutdown returned with a request in flight")
	case <-time.After(50 * time.Millisecond):
	}
	// New connections are refused once Shutdown started.
	if _, err := net.Dial("tcp", strings.TrimPrefix(url, "http://")); err == nil {
		t.Error("new connection accepted during shutdown")
	}
	close(release)
	if got := <-result; got != "done" {
		t.Errorf("in-flight request got %q, want it finished", got)
	}
	select {
	case err := <-shut:
		if err != nil {
			t.Errorf("shutdown: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Shutdown did not return: idle connections left open")
	}
}

func TestAbortResetsInFlightRequests(t *testing.T) {
	started := make(chan struct{}, 1)
	srv, url := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		started <- struct{}{}
		<-r.Context().Done() // the connection is gone
	}))
	errc := make(chan error, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader("x"))
		_, err := (&Client{}).Do(req)
		errc <- err
	}()
	<-started
	srv.Abort()
	err := <-errc
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("err = %v, want a TCP reset, as when a process is killed", err)
	}
}

func TestRefusedAndContextErrors(t *testing.T) {
	addr := localhttptest.RefusingAddr(t)
	req, _ := http.NewRequest(http.MethodGet, "http://"+addr, nil)
	if _, err := (&Client{}).Do(req); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("err = %v, want ECONNREFUSED", err)
	}

	// The handler answers after a minute, or when the client has gone: a request the context
	// did not cut would be answered (no error) long after the guard below.
	_, url := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(time.Minute):
		}
	}))
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	req, _ = http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	start := time.Now()
	if _, err := (&Client{}).Do(req); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err = %v, want deadline exceeded", err)
	}
	if took := time.Since(start); took > 20*time.Second {
		t.Errorf("took %v: the context did not cut the request", took)
	}
}

// The server answers one request per connection and then closes it without saying so (no
// Connection: close), as one whose idle timeout ran out between two requests does: the
// pooled connection is stale whatever the machine's load. (An idle timeout short enough to
// keep the test fast can also cut a fresh connection that a busy machine is slow to write
// its first request to.)
func TestStaleKeepAliveIsRetriedOnce(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var conns atomic.Int32
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			go func() {
				defer conn.Close()
				if _, err := http.ReadRequest(bufio.NewReader(conn)); err == nil {
					io.WriteString(conn, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
				}
			}()
		}
	}()
	c := &Client{}
	url := "http://" + ln.Addr().String()
	get(t, c, url)
	if _, body := get(t, c, url); body != "ok" {
		t.Errorf("body %q", body)
	}
	if n := conns.Load(); n != 2 {
		t.Errorf("%d connections, want the closed one given up for a second", n)
	}
}

func TestAbortHandlerPanicDropsTheConnection(t *testing.T) {
	_, url := serve(t, http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic(http.ErrAbortHandler) }))
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader("x"))
	if _, err := (&Client{}).Do(req); err == nil {
		t.Error("want an error when the handler aborts")
	}
}

func TestClientGoingAwayCancelsTheHandlerContext(t *testing.T) {
	cancelled := make(chan bool, 1)
	started := make(chan struct{}, 1)
	_, url := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		started <- struct{}{}
		select {
		case <-r.Context().Done():
			cancelled <- true
		case <-time.After(20 * time.Second): // a handler whose context is never cancelled waits this out
			cancelled <- false
		}
	}))
	conn, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(conn, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	<-started
	conn.Close()
	if !<-cancelled {
		t.Error("handler context not cancelled when the client left")
	}
}

func TestPipelinedRequestSurvivesTheReadAhead(t *testing.T) {
	_, url := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(20 * time.Millisecond) // the second request arrives meanwhile
		io.WriteString(w, r.URL.Path)
	}))
	conn, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	io.WriteString(conn, "GET /one HTTP/1.1\r\nHost: x\r\n\r\nGET /two HTTP/1.1\r\nHost: x\r\n\r\n")
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	br := bufio.NewReader(conn)
	for _, want := range []string{"/one", "/two"} {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("reading the response for %s: %v", want, err)
		}
		body, _ := io.ReadAll(resp.Body)
		if string(body) != want {
			t.Errorf("response %q, want %q (in order)", body, want)
		}
	}
}

func TestKeepAlivesDisabledClosesAfterResponse(t *testing.T) {
	srv, url := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "x") }))
	srv.SetKeepAlivesEnabled(false)
	resp, _ := get(t, &Client{}, url)
	if !resp.Close {
		t.Error("response does not close its connection")
	}
}

func TestIdleConnectionClosedByServerIsNotReused(t *testing.T) {
	srv := &Server{IdleTimeout: 20 * time.Millisecond, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	go srv.Serve(ln)
	defer srv.Close()
	// NoStaleRetry and a POST: a dead pooled connection would surface as an error.
	c := &Client{NoStaleRetry: true}
	url := "http://" + ln.Addr().String()
	for i := 0; i < 2; i++ {
		req, _ := http.NewRequest(http.MethodPost, url, nil)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		time.Sleep(60 * time.Millisecond) // the server closes the idle connection
	}
}

// A keep-alive connection the server drops just as a request is sent (the race pooled
// connections always have): an idempotent request is sent again once on a new connection,
// unless the caller models retries itself.
func TestStaleConnectionRaceRetriesIdempotentRequestsOnce(t *testing.T) {
	var mu sync.Mutex
	perConn := map[string]int{}
	_, url := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		perConn[r.RemoteAddr]++
		n := perConn[r.RemoteAddr]
		mu.Unlock()
		if n == 2 {
			panic(http.ErrAbortHandler) // dropped without an answer
		}
		io.WriteString(w, "ok")
	}))
	for _, noRetry := range []bool{false, true} {
		var dials atomic.Int32
		d := net.Dialer{}
		c := &Client{NoStaleRetry: noRetry, Dial: func(ctx context.Context, addr string) (net.Conn, error) {
			dials.Add(1)
			return d.DialContext(ctx, "tcp", addr)
		}}
		get(t, c, url)
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		resp, err := c.Do(req)
		if noRetry {
			if err == nil {
				resp.Body.Close()
				t.Error("NoStaleRetry: the dropped request was sent again")
			}
			continue
		}
		if err != nil {
			t.Fatalf("GET on a dropped keep-alive connection: %v", err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(body) != "ok" || dials.Load() != 2 {
			t.Errorf("body %q after %d dials, want ok after 2", body, dials.Load())
		}
	}
}

func TestHijackStopsTheReadAhead(t *testing.T) {
	_, url := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, buf, err := w.(http.Hijacker).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close()
		line, _ := buf.ReadString('\n') // the handler owns the reader now
		buf.WriteString("HTTP/1.1 200 OK\r\nContent-Length: " + strconv.Itoa(len(line)) + "\r\nConnection: close\r\n\r\n" + line)
		buf.Flush()
	}))
	conn, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	io.WriteString(conn, "GET / HTTP/1.1\r\nHost: x\r\n\r\nping\n")
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if string(body) != "ping\n" {
		t.Errorf("the hijacking handler read %q, want the bytes after the request", body)
	}
}

func TestOversizedBodyIsRefused(t *testing.T) {
	_, url := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(strings.Repeat("x", maxBody+10)))
	resp, err := (&Client{}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge || !resp.Close {
		t.Errorf("status %d close %v, want 413 and a closed connection", resp.StatusCode, resp.Close)
	}
}
