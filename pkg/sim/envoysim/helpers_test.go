package envoysim

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// startApp starts an app on loopback that answers 200 "ok" (or what handler says).
func startApp(t *testing.T, handler http.HandlerFunc) *httptest.Server {
	t.Helper()
	if handler == nil {
		handler = func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }
	}
	app := httptest.NewServer(handler)
	t.Cleanup(app.Close)
	return app
}

// startSidecar starts a sidecar with one inbound port 8080 in front of app, with tiny
// durations, and closes it at the end of the test.
func startSidecar(t *testing.T, cfg Config, appAddr string) *Sidecar {
	t.Helper()
	if len(cfg.Inbound) == 0 && appAddr != "" {
		cfg.Inbound = []InboundPort{{Port: 8080, AppAddr: appAddr}}
	}
	if cfg.DrainTime == 0 {
		cfg.DrainTime = time.Hour
	}
	if cfg.TerminationDrainDuration == 0 {
		cfg.TerminationDrainDuration = time.Hour
	}
	s, err := Start(cfg)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func appAddr(app *httptest.Server) string { return strings.TrimPrefix(app.URL, "http://") }

// adminDo sends one admin request and returns status and body.
func adminDo(t *testing.T, s *Sidecar, method, path string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, s.AdminURL()+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	// A guard against a hang, not a timing claim: an unfiltered /stats of 100,000 lines takes
	// seconds to render on a starved machine under the race detector.
	client := &http.Client{Timeout: 60 * time.Second}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read: %v", method, path, err)
	}
	return resp.StatusCode, string(body)
}

// statValue reads one stat through the admin API's text output; -1 when absent.
func statValue(t *testing.T, s *Sidecar, name string) int {
	t.Helper()
	_, body := adminDo(t, s, "GET", "/stats?filter=^"+regexpQuote(name)+"$")
	for _, line := range strings.Split(body, "\n") {
		n, v, ok := strings.Cut(line, ": ")
		if ok && n == name {
			i, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				t.Fatalf("stat %s: %q", name, v)
			}
			return i
		}
	}
	return -1
}

func regexpQuote(s string) string {
	r := strings.NewReplacer(`.`, `\.`, `|`, `\|`, `[`, `\[`, `]`, `\]`)
	return urlQuery(r.Replace(s))
}

func urlQuery(s string) string {
	return strings.NewReplacer("%", "%25", "|", "%7C", "&", "%26", "+", "%2B", "#", "%23", ";", "%3B", " ", "%20", `\`, "%5C", "$", "%24", "^", "%5E").Replace(s)
}

// rawConn is one client connection to an inbound listener, for tests that care which
// connection a request rides on.
type rawConn struct {
	t    *testing.T
	conn net.Conn
	br   *bufio.Reader
}

func dialRaw(t *testing.T, addr string) (*rawConn, error) {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { _ = conn.Close() })
	return &rawConn{t: t, conn: conn, br: bufio.NewReader(conn)}, nil
}

// get sends GET path on the connection and reads the response.
func (c *rawConn) get(path string) (*http.Response, string, error) {
	_ = c.conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c.conn, "GET "+path+" HTTP/1.1\r\nHost: app\r\n\r\n"); err != nil {
		return nil, "", err
	}
	resp, err := http.ReadResponse(c.br, nil)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp, string(body), err
}

func isRefused(err error) bool { return errors.Is(err, syscall.ECONNREFUSED) }

// mustRefuse asserts that addr refuses new connections.
func mustRefuse(t *testing.T, addr string) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err == nil {
		_ = conn.Close()
		t.Fatalf("%s accepted a connection, want refused", addr)
	}
	if !isRefused(err) {
		t.Fatalf("%s: %v, want connection refused", addr, err)
	}
}
