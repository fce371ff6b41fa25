package localhttp

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestParseGuard(t *testing.T) {
	tests := []struct {
		raw      string
		ok       bool
		remoteOK bool // accepted with allowRemote
		socket   string
		path     string
	}{
		{raw: "http://127.0.0.1:15000", ok: true, remoteOK: true},
		{raw: "http://127.3.2.1:15000/", ok: true, remoteOK: true},
		{raw: "http://[::1]:15000", ok: true, remoteOK: true},
		{raw: "http://[::1]", ok: true, remoteOK: true},
		{raw: "http://localhost:15000", ok: true, remoteOK: true},
		{raw: "http://LocalHost:8080/actuator/shutdown", ok: true, remoteOK: true},
		{raw: "http://[::ffff:127.0.0.1]:15000", ok: true, remoteOK: true},
		{raw: "http://user:secret@127.0.0.1:8080/x", ok: true, remoteOK: true},
		{raw: "http://10.0.0.1:15000", remoteOK: true},
		{raw: "http://169.254.169.254/latest/meta-data/", remoteOK: true},
		{raw: "http://0.0.0.0:15000", remoteOK: true},
		{raw: "http://[::]:15000", remoteOK: true},
		{raw: "http://[fe80::1%25eth0]:15000", remoteOK: true},
		{raw: "http://metadata.google.internal/", remoteOK: true},
		{raw: "http://localhost.evil.example:15000", remoteOK: true},
		{raw: "http://127.0.0.1.nip.io:15000", remoteOK: true},
		{raw: "https://127.0.0.1:15000"},
		{raw: "127.0.0.1:15000"},
		{raw: "http://"},
		{raw: "http://127.0.0.1:99999"},
		{raw: "http://127.0.0.1:http"},
		{raw: "unix:/run/envoy/admin.sock", ok: true, remoteOK: true, socket: "/run/envoy/admin.sock", path: "/"},
		{raw: "unix:///run/envoy/admin.sock", ok: true, remoteOK: true, socket: "/run/envoy/admin.sock", path: "/"},
		{raw: "unix:/run/app.sock:/actuator/shutdown", ok: true, remoteOK: true, socket: "/run/app.sock", path: "/actuator/shutdown"},
		{raw: "unix:relative.sock"},
		{raw: "unix:"},
	}
	for _, tc := range tests {
		for _, allowRemote := range []bool{false, true} {
			target, err := Parse(tc.raw, allowRemote)
			want := tc.ok || (allowRemote && tc.remoteOK)
			if (err == nil) != want {
				t.Errorf("Parse(%q, allowRemote=%v) err = %v, want ok=%v", tc.raw, allowRemote, err, want)
				continue
			}
			if err != nil {
				if strings.Contains(err.Error(), "secret") {
					t.Errorf("Parse(%q): error leaks the password: %v", tc.raw, err)
				}
				if !allowRemote && tc.remoteOK && !errors.Is(err, ErrNotLoopback) {
					t.Errorf("Parse(%q): %v does not wrap ErrNotLoopback", tc.raw, err)
				}
				continue
			}
			if target.Socket != tc.socket {
				t.Errorf("Parse(%q) socket %q, want %q", tc.raw, target.Socket, tc.socket)
			}
			if tc.path != "" && target.URL.Path != tc.path {
				t.Errorf("Parse(%q) path %q, want %q", tc.raw, target.URL.Path, tc.path)
			}
			if strings.Contains(target.String(), "secret") {
				t.Errorf("String() leaks the password: %s", target)
			}
		}
	}
}

func TestRedact(t *testing.T) {
	for raw, want := range map[string]string{
		"http://u:pw@127.0.0.1/x":    "http://u:xxxxx@127.0.0.1/x",
		"http://u:p%zz@127.0.0.1/x":  "http://xxxxx@127.0.0.1/x", // does not parse: everything before @ hidden
		"http://127.0.0.1:15000":     "http://127.0.0.1:15000",
		"unix:/run/app.sock:/a?b=c":  "unix:/run/app.sock:/a?b=c",
		"not a url at all, @ or not": "not a url at all, @ or not",
	} {
		if got := Redact(raw); got != want {
			t.Errorf("Redact(%q) = %q, want %q", raw, got, want)
		}
	}
}

// recordingDial fails every dial after recording its address: what the guard let through.
type recordingDial struct {
	mu    sync.Mutex
	addrs []string
}

func (r *recordingDial) dial(_ context.Context, network, addr string) (net.Conn, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.addrs = append(r.addrs, network+" "+addr)
	return nil, errors.New("test: not dialling")
}

type recordingResolver struct {
	answer []netip.Addr
	asked  []string
}

func (r *recordingResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	r.asked = append(r.asked, host)
	return r.answer, nil
}

func get(c *http.Client, u string) error {
	req, err := http.NewRequest(http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err == nil {
		resp.Body.Close()
	}
	return err
}

// The dialer applies the guard on the address it is about to connect to, whatever the
// parser accepted: a non-loopback literal is never dialled, a name is never resolved unless
// remote targets are allowed, and localhost is never resolved at all.
func TestDialGuard(t *testing.T) {
	mustURL := func(s string) *url.URL { u, _ := url.Parse(s); return u }
	rebinding := &recordingResolver{answer: []netip.Addr{netip.MustParseAddr("10.1.2.3")}}
	tests := []struct {
		name        string
		target      string
		allowRemote bool
		wantDials   []string
		wantAsked   []string
	}{
		{name: "loopback literal", target: "http://127.0.0.1:15000/stats", wantDials: []string{"tcp 127.0.0.1:15000"}},
		{name: "IPv6 loopback, default port", target: "http://[::1]/stats", wantDials: []string{"tcp [::1]:80"}},
		{name: "localhost, never resolved", target: "http://localhost:15000/", wantDials: []string{"tcp 127.0.0.1:15000", "tcp [::1]:15000"}},
		{name: "private literal", target: "http://10.0.0.1:15000/"},
		{name: "metadata literal", target: "http://169.254.169.254/latest/"},
		{name: "unspecified", target: "http://0.0.0.0:15000/"},
		{name: "name that resolves elsewhere", target: "http://admin.internal:15000/"},
		{name: "remote allowed: resolved, then dialled", target: "http://admin.internal:15000/", allowRemote: true,
			wantDials: []string{"tcp 10.1.2.3:15000"}, wantAsked: []string{"admin.internal"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recordingDial{}
			rebinding.asked = nil
			// The target is built directly, bypassing Parse, to test the dialer on its own.
			target := Target{URL: mustURL(tc.target)}
			c := NewClient(target, Options{AllowRemote: tc.allowRemote, Dial: rec.dial, Resolver: rebinding})
			err := get(c, tc.target)
			if err == nil {
				t.Fatal("request succeeded through a failing dialer")
			}
			if fmt.Sprint(rec.addrs) != fmt.Sprint(tc.wantDials) {
				t.Errorf("dialled %v, want %v", rec.addrs, tc.wantDials)
			}
			if fmt.Sprint(rebinding.asked) != fmt.Sprint(tc.wantAsked) {
				t.Errorf("resolved %v, want %v", rebinding.asked, tc.wantAsked)
			}
			if len(tc.wantDials) == 0 && !errors.Is(err, ErrNotLoopback) {
				t.Errorf("err = %v, want ErrNotLoopback", err)
			}
		})
	}
}

// A request for http://[::1] (no port) reaches a server on [::1]:80 when one can be bound
// here: the default port must be applied to the bracketed literal, not doubled brackets.
func TestIPv6WithoutPortReachesPort80(t *testing.T) {
	ln, err := net.Listen("tcp", "[::1]:80")
	if err != nil {
		t.Skipf("cannot listen on [::1]:80 here (%v); the dial address is checked by TestDialGuard", err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "ok") })}
	go srv.Serve(ln)
	defer srv.Close()
	target, err := Parse("http://[::1]", false)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := NewClient(target, Options{}).Get(target.Join("/x", "").String())
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("status %d", resp.StatusCode)
	}
}

func TestNoRedirectNoProxyHTTP1(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		http.Redirect(w, r, "http://169.254.169.254/latest/", http.StatusFound)
	}))
	defer srv.Close()
	// A proxy in the pod's environment must not be used for loopback calls.
	t.Setenv("HTTP_PROXY", "http://127.0.0.1:1")
	t.Setenv("http_proxy", "http://127.0.0.1:1")
	target, err := Parse(srv.URL, false)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := NewClient(target, Options{}).Get(target.Join("/", "").String())
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusFound || hits.Load() != 1 {
		t.Errorf("status %d after %d requests: the redirect must be returned, not followed", resp.StatusCode, hits.Load())
	}
	if resp.Proto != "HTTP/1.1" {
		t.Errorf("proto %s", resp.Proto)
	}
}

// rawServer accepts connections on 127.0.0.1 and hands each to serve, for answers no
// well-behaved server would give.
func rawServer(t *testing.T, serve func(net.Conn)) string {
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
				// Read the request head so the client is not writing into a closed socket.
				br := bufio.NewReader(conn)
				if _, err := http.ReadRequest(br); err != nil {
					return
				}
				serve(conn)
			}()
		}
	}()
	return "http://" + ln.Addr().String()
}

func TestEndlessHeaderIsCapped(t *testing.T) {
	for name, header := range map[string]string{
		"one endless value": "X-Long: ",
		"endless headers":   "",
	} {
		t.Run(name, func(t *testing.T) {
			base := rawServer(t, func(conn net.Conn) {
				io.WriteString(conn, "HTTP/1.1 200 OK\r\n"+header)
				chunk := strings.Repeat("a", 4096)
				for i := 0; ; i++ {
					s := chunk
					if header == "" {
						s = fmt.Sprintf("X-H%d: v\r\n", i)
					}
					if _, err := io.WriteString(conn, s); err != nil {
						return
					}
				}
			})
			target, _ := Parse(base, false)
			// What ended the call is asserted by its error, not by a wall-clock bound a busy
			// machine could break: this client's header cap, neither the context nor
			// net/http's own 10 MB one, which a client without the cap would read on to.
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/", nil)
			_, err := NewClient(target, Options{}).Do(req)
			if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("headers exceeded %d bytes", DefaultMaxHeaderBytes)) || errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("err = %v, want the %d-byte header limit", err, DefaultMaxHeaderBytes)
			}
		})
	}
}

// net/http's client closes the connection of a body closed before its end instead of reading
// the rest (which is what made the hand-written client hang on endless bodies): Close returns
// at once and the server sees the connection go.
func TestClosingAnUnreadBodyClosesTheConnection(t *testing.T) {
	var written atomic.Int64
	serverDone := make(chan error, 1)
	base := rawServer(t, func(conn net.Conn) {
		io.WriteString(conn, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
		chunk := "1000\r\n" + strings.Repeat("x", 0x1000) + "\r\n"
		for {
			n, err := io.WriteString(conn, chunk)
			written.Add(int64(n))
			if err != nil {
				serverDone <- err
				return
			}
		}
	})
	target, _ := Parse(base, false)
	for _, keepAlive := range []bool{false, true} {
		resp, err := NewClient(target, Options{KeepAlive: keepAlive}).Get(base + "/")
		if err != nil {
			t.Fatal(err)
		}
		// A Close that drained the body would never return from this endless one: waited
		// for with a guard, not timed against a figure a busy machine could break.
		closed := make(chan struct{})
		go func() { resp.Body.Close(); close(closed) }()
		select {
		case <-closed:
		case <-time.After(20 * time.Second):
			t.Fatalf("keepAlive=%v: Close has not returned: it is draining an endless body", keepAlive)
		}
		select {
		case <-serverDone:
		case <-time.After(3 * time.Second):
			t.Fatalf("keepAlive=%v: the server is still writing (%d bytes): the connection was not closed", keepAlive, written.Load())
		}
	}
}

func TestBodyReadIsBoundedByTheContext(t *testing.T) {
	base := rawServer(t, func(conn net.Conn) {
		io.WriteString(conn, "HTTP/1.1 200 OK\r\nContent-Length: 4194304\r\n\r\n")
		for i := 0; i < 1000; i++ {
			if _, err := io.WriteString(conn, strings.Repeat("y", 1024)); err != nil {
				return
			}
			time.Sleep(20 * time.Millisecond) // ~50 KB/s
		}
	})
	target, _ := Parse(base, false)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/", nil)
	start := time.Now()
	resp, err := NewClient(target, Options{}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, err = ReadBody(resp.Body, 8<<20)
	resp.Body.Close()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err = %v, want the context's deadline", err)
	}
	// The error says the context ended the read; the guard is for a read that noticed it
	// only at the body's end, which the server keeps from coming for 20 s.
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("read took %v past a 300ms context", took)
	}
}

func TestLimitBody(t *testing.T) {
	if got, err := ReadBody(strings.NewReader("12345"), 5); err != nil || string(got) != "12345" {
		t.Errorf("exactly at the cap: %q, %v", got, err)
	}
	_, err := ReadBody(strings.NewReader("123456"), 5)
	var tooLarge *BodyTooLargeError
	if !errors.As(err, &tooLarge) || tooLarge.Limit != 5 || !strings.Contains(err.Error(), "exceeds 5 bytes") {
		t.Errorf("over the cap: %v", err)
	}
}

func TestUnixSocket(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "app.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Skipf("no unix sockets here: %v", err)
	}
	var gotPath, gotHost string
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotPath, gotHost = r.URL.Path, r.Host
		fmt.Fprint(w, "OK\n")
	})}
	go srv.Serve(ln)
	defer srv.Close()
	target, err := Parse("unix:"+sock+":/actuator/shutdown", false)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := NewClient(target, Options{}).Post(target.URL.String(), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || gotPath != "/actuator/shutdown" || gotHost != "localhost" {
		t.Errorf("status %d path %q host %q", resp.StatusCode, gotPath, gotHost)
	}
	if target.String() != "unix:"+sock+":/actuator/shutdown" {
		t.Errorf("String() = %s", target)
	}
}
