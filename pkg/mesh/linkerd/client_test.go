package linkerd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meshdrain/meshdrain/pkg/hook/drain"
	"github.com/meshdrain/meshdrain/pkg/localhttp"
	"github.com/meshdrain/meshdrain/pkg/localhttp/localhttptest"
	"github.com/meshdrain/meshdrain/pkg/mesh"
	"github.com/meshdrain/meshdrain/pkg/mesh/envoy"
	"github.com/meshdrain/meshdrain/pkg/sim/envoysim"
)

// The client is what prestop hands the coordinator for a Linkerd pod.
var _ drain.Sidecar = (*Client)(nil)

// adminServer is a stand-in admin port on 127.0.0.1 that counts its requests.
func adminServer(t *testing.T, handler http.HandlerFunc) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		handler(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv, &hits
}

func newClient(t *testing.T, url string, opts Options) *Client {
	t.Helper()
	c, err := New(url, opts)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func portOfURL(t *testing.T, raw string) int {
	t.Helper()
	_, portText, err := net.SplitHostPort(strings.TrimPrefix(raw, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	p, _ := strconv.Atoi(portText)
	return p
}

func TestClientInbound(t *testing.T) {
	var adminPort int
	srv, _ := adminServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		// The scrape itself shows up on the admin port, as on a real proxy.
		fmt.Fprintf(w, "%srequest_total{direction=\"inbound\",target_addr=\"127.0.0.1:%d\",target_ip=\"127.0.0.1\",target_port=\"%d\",tls=\"disabled\"} 77\n", modern, adminPort, adminPort)
	})
	adminPort = portOfURL(t, srv.URL)
	c := newClient(t, srv.URL, Options{})
	if c.AdminPort() != adminPort {
		t.Fatalf("admin port %d, want %d", c.AdminPort(), adminPort)
	}
	snap, err := c.Inbound(context.Background(), mesh.Selector{})
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Endpoints) != 1 || *snap.Endpoints[0].Port != 8080 {
		t.Fatalf("endpoints %+v: the admin port must be left out", snap.Endpoints)
	}
	r := snap.Read()
	if r.Signal != mesh.SignalHTTPRequests || !eqPtr(r.Arrivals, f(120)) || !eqPtr(r.Active, f(3)) {
		t.Errorf("reading %s %s %s", r.Signal, show(r.Arrivals), show(r.Active))
	}
	if _, err := c.Inbound(context.Background(), mesh.Selector{HTTPPrefixes: []string{"public_listener"}}); err == nil {
		t.Error("HTTP prefixes accepted")
	}
}

func TestClientRealDumpOverHTTP(t *testing.T) {
	body, err := os.ReadFile(filepath.Join("testdata", "linkerd2-issue-7861-response.prom"))
	if err != nil {
		t.Fatal(err)
	}
	srv, _ := adminServer(t, func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write(body) })
	snap, err := newClient(t, srv.URL, Options{}).Snapshot(context.Background(), Selector{})
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Endpoints) != 2 || !eqPtr(snap.Endpoints[1].ResponsesTotal, f(6861)) {
		t.Errorf("endpoints %+v", snap.Endpoints)
	}
}

func TestClientBounds(t *testing.T) {
	t.Run("body too large", func(t *testing.T) {
		srv, _ := adminServer(t, func(w http.ResponseWriter, r *http.Request) {
			_, _ = w.Write([]byte(strings.Repeat("# padding\n", 200)))
		})
		_, err := newClient(t, srv.URL, Options{MaxBody: 1000}).Metrics(context.Background())
		var tooLarge *localhttp.BodyTooLargeError
		if !errors.As(err, &tooLarge) {
			t.Errorf("error %v, want a *localhttp.BodyTooLargeError", err)
		}
	})
	t.Run("endless body ends at the request timeout", func(t *testing.T) {
		stop := make(chan struct{})
		srv, _ := adminServer(t, func(w http.ResponseWriter, r *http.Request) {
			flusher := w.(http.Flusher)
			for {
				if _, err := w.Write([]byte("# more\n")); err != nil {
					return
				}
				flusher.Flush()
				select {
				case <-stop:
					return
				case <-r.Context().Done():
					return
				case <-time.After(5 * time.Millisecond):
				}
			}
		})
		defer close(stop)
		start := time.Now()
		_, err := newClient(t, srv.URL, Options{RequestTimeout: 100 * time.Millisecond}).Metrics(context.Background())
		if err == nil || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("error %v, want the deadline", err)
		}
		// The deadline above is what ended the read (the request timeout is the only one);
		// the server writes until the test ends, far past this guard, which only a client
		// that kept reading would run into.
		if took := time.Since(start); took > 20*time.Second {
			t.Errorf("took %s past a 100ms timeout", took)
		}
	})
	t.Run("redirect is an answer, not followed", func(t *testing.T) {
		srv, hits := adminServer(t, func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "/elsewhere", http.StatusFound)
		})
		_, err := newClient(t, srv.URL, Options{}).Metrics(context.Background())
		var status *localhttp.StatusError
		if !errors.As(err, &status) || status.Code != http.StatusFound || hits.Load() != 1 {
			t.Errorf("error %v after %d requests", err, hits.Load())
		}
	})
	t.Run("localhttp's client: no proxy from the environment, headers capped", func(t *testing.T) {
		hc, ok := newClient(t, "http://127.0.0.1:4191", Options{}).http.(*http.Client)
		if !ok {
			t.Fatal("the default client is not a net/http client")
		}
		tr := hc.Transport.(*http.Transport)
		if tr.Proxy != nil || tr.MaxResponseHeaderBytes != localhttp.DefaultMaxHeaderBytes || hc.CheckRedirect == nil {
			t.Errorf("transport proxy set, header cap %d, or redirects followed", tr.MaxResponseHeaderBytes)
		}
	})
	t.Run("the loopback guard also holds at dial time", func(t *testing.T) {
		var dialled []string
		c := newClient(t, "http://localhost:4191", Options{Dial: func(_ context.Context, _, addr string) (net.Conn, error) {
			dialled = append(dialled, addr)
			return nil, errors.New("not dialling in a test")
		}})
		_, _ = c.Metrics(context.Background())
		for _, a := range dialled {
			if !strings.HasPrefix(a, "127.0.0.1:") && !strings.HasPrefix(a, "[::1]:") {
				t.Errorf("dialled %s for localhost", a)
			}
		}
		if len(dialled) == 0 {
			t.Error("nothing dialled")
		}
	})
	t.Run("refused reads as refused and unreachable", func(t *testing.T) {
		addr := localhttptest.RefusingAddr(t)
		_, err := newClient(t, "http://"+addr, Options{}).Inbound(context.Background(), mesh.Selector{})
		if !envoy.IsRefused(err) || !envoy.IsUnreachable(err) {
			t.Errorf("error %v not classified as refused", err)
		}
	})
}

func TestAdminURLChecks(t *testing.T) {
	for _, tc := range []struct {
		url    string
		remote bool
		ok     bool
	}{
		{"http://127.0.0.1:4191", false, true},
		{"http://localhost:4191", false, true},
		{"http://[::1]:4191", false, true},
		{"http://127.1.2.3:4191", false, true},
		{"http://10.0.0.1:4191", false, false},
		{"http://10.0.0.1:4191", true, true},
		{"http://proxy.example:4191", false, false},
		// The syntax of every --admin (localhttp.Parse): port 80 when none is given, a unix
		// socket, credentials accepted but never shown.
		{"http://127.0.0.1", false, true},
		{"http://[::1]", false, true},
		{"unix:/run/linkerd/admin.sock", false, true},
		{"http://user:secret@127.0.0.1:4191", false, true},
		{"http://169.254.169.254/latest", false, false},
		{"https://127.0.0.1:4191", false, false},
		{"http://127.0.0.1:99999", false, false},
		{"127.0.0.1:4191", false, false},
	} {
		c, err := New(tc.url, Options{AllowRemote: tc.remote})
		if (err == nil) != tc.ok {
			t.Errorf("%s (remote %v): error %v", tc.url, tc.remote, err)
		}
		if err != nil && strings.Contains(err.Error(), "secret") {
			t.Errorf("credentials in the error: %v", err)
		}
		if c != nil && strings.Contains(c.URL(), "secret") {
			t.Errorf("credentials in URL(): %s", c.URL())
		}
	}
}

func TestReadyAndNoDrainCall(t *testing.T) {
	ready := "ready\n"
	code := http.StatusOK
	srv, hits := adminServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(code)
		_, _ = w.Write([]byte(ready))
	})
	c := newClient(t, srv.URL, Options{})
	if ok, err := c.Ready(context.Background()); !ok || err != nil {
		t.Errorf("ready %v %v", ok, err)
	}
	ready, code = "not ready\n", http.StatusServiceUnavailable
	if ok, err := c.Ready(context.Background()); ok || err != nil {
		t.Errorf("not ready: %v %v", ok, err)
	}
	ready, code = "LIVE\n", http.StatusOK
	if _, err := c.Ready(context.Background()); err == nil {
		t.Error("an Envoy answer read as Linkerd readiness")
	}
	before := hits.Load()
	for _, mode := range []mesh.DrainMode{mesh.DrainGraceful, mesh.DrainImmediate, mesh.DrainNone} {
		if err := c.DrainListeners(context.Background(), mode); err != nil {
			t.Errorf("drain %s: %v", mode, err)
		}
	}
	if hits.Load() != before {
		t.Error("DrainListeners sent a request to a proxy that has no drain endpoint")
	}
}

func TestDetect(t *testing.T) {
	linkerdLike, _ := adminServer(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/ready":
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte("not ready\n"))
		case "/live":
			_, _ = w.Write([]byte("live\n"))
		default:
			w.WriteHeader(http.StatusNotFound)
		}
	})
	halfLinkerd, _ := adminServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/ready" {
			_, _ = w.Write([]byte("ready\n"))
			return
		}
		w.WriteHeader(http.StatusNotFound)
	})
	other, _ := adminServer(t, func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("<html>hello</html>")) })
	envoy, err := envoysim.Start(envoysim.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer envoy.Close()
	closed := "http://" + localhttptest.RefusingAddr(t)

	ctx := context.Background()
	var hc *http.Client // the default: localhttp's
	for _, tc := range []struct {
		name, url string
		mesh      mesh.Mesh
		check     func(error) bool
	}{
		{"linkerd proxy", linkerdLike.URL, mesh.Linkerd, nil},
		{"envoy admin", envoy.AdminURL(), mesh.Envoy, nil},
		{"ready without live", halfLinkerd.URL, "", func(err error) bool { return errors.Is(err, ErrNotASidecar) }},
		{"something else", other.URL, "", func(err error) bool { return errors.Is(err, ErrNotASidecar) }},
		{"nothing listening", closed, "", localhttp.IsRefused},
	} {
		found, err := Detect(ctx, hc, tc.url)
		if found != tc.mesh || (tc.check == nil) != (err == nil) || (tc.check != nil && !tc.check(err)) {
			t.Errorf("%s: mesh %q error %v", tc.name, found, err)
		}
	}

	found, url, err := DetectAny(ctx, hc, []string{closed, other.URL, envoy.AdminURL(), linkerdLike.URL})
	if err != nil || found != mesh.Envoy || url != envoy.AdminURL() {
		t.Errorf("DetectAny: %q %q %v", found, url, err)
	}
	if _, _, err := DetectAny(ctx, hc, []string{closed, other.URL}); err == nil || !strings.Contains(err.Error(), closed) {
		t.Errorf("DetectAny with no sidecar: %v", err)
	}
}

// TestDetectWithRemote: the loopback guard holds by default; AllowRemote lifts it. The
// "remote" host is never dialled: the transport sends every connection to a loopback server.
func TestDetectWithRemote(t *testing.T) {
	proxy, _ := adminServer(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/ready":
			_, _ = w.Write([]byte("ready\n"))
		case "/live":
			_, _ = w.Write([]byte("live\n"))
		}
	})
	loopback := strings.TrimPrefix(proxy.URL, "http://")
	hc := &http.Client{Transport: &http.Transport{Proxy: nil, DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, loopback)
	}}}
	const remote = "http://10.255.0.1:4191"
	if _, err := DetectWith(context.Background(), remote, Options{HTTPClient: hc}); err == nil || !strings.Contains(err.Error(), "not a loopback address") {
		t.Errorf("a remote admin URL without AllowRemote: %v", err)
	}
	if sidecarMesh, err := DetectWith(context.Background(), remote, Options{HTTPClient: hc, AllowRemote: true}); err != nil || sidecarMesh != mesh.Linkerd {
		t.Errorf("AllowRemote: %q %v", sidecarMesh, err)
	}
}

// The admin URL takes every form --admin takes, a unix socket included (a forwarder in front
// of the proxy's admin port).
func TestClientOverAUnixSocket(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "admin.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/metrics" {
			_, _ = io.WriteString(w, modern)
			return
		}
		http.NotFound(w, r)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	c := newClient(t, "unix:"+sock, Options{})
	if c.AdminPort() != AdminPort || c.URL() != "unix:"+sock {
		t.Errorf("admin port %d, URL %s", c.AdminPort(), c.URL())
	}
	in, err := c.Inbound(context.Background(), mesh.Selector{})
	if err != nil {
		t.Fatal(err)
	}
	if r := in.Read(); r.Signal != mesh.SignalHTTPRequests || !eqPtr(r.Arrivals, f(120)) || !eqPtr(in.AdminRequestsTotal, f(500)) {
		t.Errorf("reading %s %s, admin requests %s", r.Signal, show(r.Arrivals), show(in.AdminRequestsTotal))
	}
	_, err = c.Ready(context.Background())
	var status *localhttp.StatusError
	if !errors.As(err, &status) || status.Code != http.StatusNotFound || !strings.Contains(err.Error(), "unix:"+sock+":/ready") {
		t.Errorf("a 404 /ready: %v", err)
	}
}
