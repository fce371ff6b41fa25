package linkerdsim

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// startApp starts an app on loopback that answers 200 "hello" (or what handler says).
func startApp(t *testing.T, handler http.HandlerFunc) *httptest.Server {
	t.Helper()
	if handler == nil {
		handler = func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "hello") }
	}
	app := httptest.NewServer(handler)
	t.Cleanup(app.Close)
	return app
}

func appAddr(app *httptest.Server) string { return strings.TrimPrefix(app.URL, "http://") }

// startProxy starts a proxy with one inbound port 8080 in front of appAddr, closed at the
// end of the test.
func startProxy(t *testing.T, cfg Config, appAddr string) *Sidecar {
	t.Helper()
	if len(cfg.Inbound) == 0 && appAddr != "" {
		cfg.Inbound = []InboundPort{{Port: 8080, AppAddr: appAddr}}
	}
	s, err := Start(cfg)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// httpClient is a keep-alive client that never consults the environment's proxy.
func httpClient() *http.Client {
	return &http.Client{Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 4}, Timeout: 5 * time.Second}
}

func get(t *testing.T, c *http.Client, url string) (int, string, http.Header) {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), resp.Header
}

// scrape fetches and parses the proxy's /metrics.
func scrape(t *testing.T, s *Sidecar) map[string]*dto.MetricFamily {
	t.Helper()
	_, body, _ := get(t, httpClient(), s.AdminURL()+"/metrics")
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("parse /metrics: %v\n%s", err, body)
	}
	return fams
}

// sum adds the samples of a family whose labels include every pair of match; ok is false
// when no sample matches.
func sum(fams map[string]*dto.MetricFamily, name string, match map[string]string) (total float64, ok bool) {
	for _, m := range fams[name].GetMetric() {
		if !matches(m, match) {
			continue
		}
		ok = true
		switch {
		case m.Counter != nil:
			total += m.GetCounter().GetValue()
		case m.Gauge != nil:
			total += m.GetGauge().GetValue()
		case m.Untyped != nil:
			total += m.GetUntyped().GetValue()
		}
	}
	return total, ok
}

func matches(m *dto.Metric, match map[string]string) bool {
	for k, v := range match {
		found := false
		for _, l := range m.GetLabel() {
			if l.GetName() == k && l.GetValue() == v {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// refused reports whether nothing accepts connections at addr.
func refused(addr string) bool {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err == nil {
		conn.Close()
		return false
	}
	return errors.Is(err, syscall.ECONNREFUSED)
}

// rawConn is one client connection that sends requests by hand, to watch what the proxy
// does with the connection itself.
type rawConn struct {
	net.Conn
	br *bufio.Reader
}

func dial(t *testing.T, addr string) *rawConn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &rawConn{Conn: c, br: bufio.NewReader(c)}
}

func (c *rawConn) send(t *testing.T, path string) {
	t.Helper()
	if _, err := io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: app\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
}

func (c *rawConn) response(t *testing.T) *http.Response {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(c.br, nil)
	if err != nil {
		t.Fatalf("read response: %v", err)
	}
	_, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp
}

// closedByPeer reports whether the connection was closed by the other side.
func (c *rawConn) closedByPeer() bool {
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err := c.br.ReadByte()
	return err != nil && !errors.Is(err, context.DeadlineExceeded) && !isTimeout(err)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
