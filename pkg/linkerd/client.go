package linkerd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/meshdrain/meshdrain/pkg/envoyadmin"
	"github.com/meshdrain/meshdrain/pkg/inbound"
)

// Defaults of Options.
const (
	DefaultRequestTimeout = time.Second
	// DefaultMaxBody bounds one /metrics read. The proxy cannot filter /metrics, and its
	// outbound series grow with the destinations the app calls; a few MiB is a large mesh,
	// anything near this bound is something else answering.
	DefaultMaxBody = 16 << 20
	// maxSmallBody bounds the answers of /ready, /live and errors.
	maxSmallBody = 4 << 10
)

// Options tune the client. Zero values take the defaults.
type Options struct {
	// RequestTimeout bounds one request, reading the body included (default 1s).
	RequestTimeout time.Duration
	// MaxBody bounds what one /metrics answer may hold (default DefaultMaxBody).
	MaxBody int64
	// HTTPClient sends every request (default NewHTTPClient()).
	HTTPClient *http.Client
	// AllowRemote accepts an admin URL that is not loopback. The admin port of the pod's own
	// proxy is always on loopback; anything else is a mistake or an attack.
	AllowRemote bool
}

// NewHTTPClient is the net/http client the admin calls use: no proxy from the pod's
// environment (HTTP_PROXY must never see a loopback admin call), no redirects, response
// headers capped at 64 KiB, one idle connection kept for the next poll.
func NewHTTPClient() *http.Client {
	return &http.Client{
		Transport: &http.Transport{
			Proxy:                  nil,
			DialContext:            (&net.Dialer{Timeout: 2 * time.Second}).DialContext,
			MaxIdleConns:           1,
			MaxIdleConnsPerHost:    1,
			IdleConnTimeout:        30 * time.Second,
			MaxResponseHeaderBytes: 64 << 10,
			ResponseHeaderTimeout:  10 * time.Second,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// Client reads one Linkerd proxy's admin port. It implements the drain logic's Sidecar
// (Inbound, DrainListeners) so a Linkerd pod drains with the same coordinator as an Envoy
// one.
type Client struct {
	base      *url.URL
	adminPort int
	http      *http.Client
	opts      Options
}

// New returns a client for baseURL, e.g. DefaultAdminURL.
func New(baseURL string, opts Options) (*Client, error) {
	u, port, err := parseAdminURL(baseURL, opts.AllowRemote)
	if err != nil {
		return nil, err
	}
	if opts.RequestTimeout <= 0 {
		opts.RequestTimeout = DefaultRequestTimeout
	}
	if opts.MaxBody <= 0 {
		opts.MaxBody = DefaultMaxBody
	}
	if opts.HTTPClient == nil {
		opts.HTTPClient = NewHTTPClient()
	}
	return &Client{base: u, adminPort: port, http: opts.HTTPClient, opts: opts}, nil
}

// parseAdminURL checks an admin URL before anything is dialled or resolved: plain http, an
// explicit port, and a loopback host unless remote is allowed.
func parseAdminURL(raw string, allowRemote bool) (*url.URL, int, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, 0, fmt.Errorf("admin url %q: %w", raw, err)
	}
	if u.Scheme != "http" || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return nil, 0, fmt.Errorf("admin url %q: want http://host:port", u.Redacted())
	}
	host, portText, err := net.SplitHostPort(u.Host)
	if err != nil {
		return nil, 0, fmt.Errorf("admin url %q: want http://host:port: %w", u.Redacted(), err)
	}
	port, err := strconv.Atoi(portText)
	if err != nil || port <= 0 || port > 65535 {
		return nil, 0, fmt.Errorf("admin url %q: bad port %q", u.Redacted(), portText)
	}
	if !allowRemote && !isLoopback(host) {
		return nil, 0, fmt.Errorf("admin url %q: host %q is not loopback; the pod's own proxy answers on 127.0.0.1", u.Redacted(), host)
	}
	return u, port, nil
}

// isLoopback accepts localhost and loopback IP literals, without a DNS lookup.
func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// URL is the admin base URL.
func (c *Client) URL() string { return c.base.String() }

// AdminPort is the port of the admin URL, which the client never watches as inbound traffic.
func (c *Client) AdminPort() int { return c.adminPort }

// StatusError is an answer other than the one expected.
type StatusError struct {
	Method, URL string
	Code        int
	Body        string
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("%s %s: status %d: %s", e.Method, e.URL, e.Code, strings.TrimSpace(e.Body))
}

// ErrBodyTooLarge means an answer exceeded its bound; the rest was not read.
var ErrBodyTooLarge = errors.New("admin answer exceeds its size bound")

// Metrics fetches and parses /metrics.
func (c *Client) Metrics(ctx context.Context) (map[string]*dto.MetricFamily, error) {
	var families map[string]*dto.MetricFamily
	err := c.get(ctx, "/metrics", c.opts.MaxBody, func(code int, body []byte) error {
		if code != http.StatusOK {
			return errStatus
		}
		var err error
		families, err = ParseFamilies(bytes.NewReader(body))
		return err
	})
	return families, err
}

// Snapshot fetches /metrics and normalises it for sel, leaving out the admin port.
func (c *Client) Snapshot(ctx context.Context, sel Selector) (Snapshot, error) {
	families, err := c.Metrics(ctx)
	if err != nil {
		return Snapshot{}, err
	}
	sel.ExcludePorts = append(append([]int(nil), sel.ExcludePorts...), c.adminPort)
	return Normalise(families, sel), nil
}

// Inbound is the drain logic's view of the proxy's inbound side (drain.Sidecar).
func (c *Client) Inbound(ctx context.Context, sel inbound.Selector) (inbound.Snapshot, error) {
	lsel, err := SelectorFor(sel, c.adminPort)
	if err != nil {
		return inbound.Snapshot{}, err
	}
	snap, err := c.Snapshot(ctx, lsel)
	if err != nil {
		return inbound.Snapshot{}, err
	}
	return snap.Inbound(), nil
}

// DrainListeners makes no call: a Linkerd proxy has no drain endpoint. It drains only when
// it is told to stop (SIGTERM or POST /shutdown), and then stops accepting inbound and
// outbound connections and its own admin port at once, which would cut the app's outbound
// calls and blind meshdrain. Clients move away when their endpoint lists update; meshdrain
// only watches for that. Callers should pass envoyadmin.DrainNone for Linkerd so that the
// final event does not claim a drain happened.
func (c *Client) DrainListeners(context.Context, envoyadmin.DrainMode) error { return nil }

// Ready reports the proxy's /ready: true on 200 "ready", false on 503 "not ready".
func (c *Client) Ready(ctx context.Context) (bool, error) {
	var ready bool
	err := c.get(ctx, "/ready", maxSmallBody, func(code int, body []byte) error {
		switch {
		case code == http.StatusOK && strings.TrimSpace(string(body)) == "ready":
			ready = true
		case code == http.StatusServiceUnavailable:
			ready = false
		default:
			return errStatus
		}
		return nil
	})
	return ready, err
}

// errStatus asks get to report the answer as a StatusError.
var errStatus = errors.New("unexpected answer")

// get sends one GET, bounded by RequestTimeout and ctx, reads at most limit bytes of the
// body and hands status and body to read. A body past the limit is an error and the
// connection is dropped rather than drained.
func (c *Client) get(ctx context.Context, path string, limit int64, read func(code int, body []byte) error) error {
	ctx, cancel := context.WithTimeout(ctx, c.opts.RequestTimeout)
	defer cancel()
	u := *c.base
	u.Path = strings.TrimSuffix(u.Path, "/") + path
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return fmt.Errorf("GET %s: read body: %w", u.Redacted(), err)
	}
	if int64(len(body)) > limit {
		return fmt.Errorf("GET %s: %w (%d bytes)", u.Redacted(), ErrBodyTooLarge, limit)
	}
	if err := read(resp.StatusCode, body); err != nil {
		if errors.Is(err, errStatus) {
			if len(body) > 512 {
				body = body[:512]
			}
			return &StatusError{Method: http.MethodGet, URL: u.Redacted(), Code: resp.StatusCode, Body: string(body)}
		}
		return fmt.Errorf("GET %s: %w", u.Redacted(), err)
	}
	return nil
}
