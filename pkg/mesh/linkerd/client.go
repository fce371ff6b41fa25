package linkerd

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/meshdrain/meshdrain/pkg/localhttp"
	"github.com/meshdrain/meshdrain/pkg/mesh"
)

// Defaults of Options.
const (
	DefaultRequestTimeout = time.Second
	// DefaultMaxBody bounds what one /metrics read may transfer. The proxy cannot filter
	// /metrics, and its outbound series grow with the destinations the app calls; a few MiB
	// is a large mesh, anything near this bound is something else answering. Only the
	// families meshdrain reads are kept (maxKept), so the bound is on time, not memory.
	DefaultMaxBody = 16 << 20
	// maxSmallBody bounds the answers of /ready and /live.
	maxSmallBody = 4 << 10
)

// Options tune the client. Zero values take the defaults.
type Options struct {
	// RequestTimeout bounds one request, reading the body included (default 1s).
	RequestTimeout time.Duration
	// MaxBody bounds what one /metrics answer may transfer (default DefaultMaxBody).
	MaxBody int64
	// HTTPClient sends every request (default: a localhttp client keeping one connection
	// alive, loopback only unless AllowRemote, never consulting HTTP(S)_PROXY).
	HTTPClient localhttp.Doer
	// AllowRemote accepts an admin URL that is not loopback. The admin port of the pod's own
	// proxy is always on loopback; anything else is a mistake or an attack, unless a person
	// asks for it (status and check --allow-remote).
	AllowRemote bool
	// Dial, when set, makes the connections the loopback guard allows (tests).
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// Deadline and AppDrain are the hook's, quoted by Hints' fixes (the proxy must outlive
	// both); zero where no hook is running (status, check).
	Deadline, AppDrain time.Duration
}

// Client reads one Linkerd proxy's admin port. It implements the drain logic's Sidecar
// (Inbound, DrainListeners) so a Linkerd pod drains with the same coordinator as an Envoy
// one. Its HTTP is package localhttp's, as for every admin client in a pod: the loopback
// guard when the URL is parsed and again at every dial, unix sockets, capped headers and
// bodies, and the same errors (localhttp.ErrRefused, ErrNotConnected, *StatusError).
type Client struct {
	target    localhttp.Target
	adminPort int
	http      localhttp.Doer
	opts      Options
}

// New returns a client for baseURL, e.g. DefaultAdminURL, http://[::1]:4191 or a unix socket
// unix:/path/admin.sock (the syntax of every --admin, localhttp.Syntax). Hosts other than
// the loopback are refused unless opts.AllowRemote is set.
func New(baseURL string, opts Options) (*Client, error) {
	target, err := localhttp.Parse(baseURL, opts.AllowRemote)
	if err != nil {
		return nil, fmt.Errorf("admin url %w", err)
	}
	if opts.RequestTimeout <= 0 {
		opts.RequestTimeout = DefaultRequestTimeout
	}
	if opts.MaxBody <= 0 {
		opts.MaxBody = DefaultMaxBody
	}
	if opts.HTTPClient == nil {
		opts.HTTPClient = localhttp.NewClient(target, localhttp.Options{AllowRemote: opts.AllowRemote, KeepAlive: true, Dial: opts.Dial})
	}
	return &Client{target: target, adminPort: adminPortOf(target), http: opts.HTTPClient, opts: opts}, nil
}

// adminPortOf is the admin port as the proxy's metrics name it: the URL's explicit port, or
// the proxy's default 4191 for a unix socket or a URL without one.
func adminPortOf(t localhttp.Target) int {
	if t.Socket == "" {
		if p, err := strconv.Atoi(t.URL.Port()); err == nil && p > 0 {
			return p
		}
	}
	return AdminPort
}

// URL is the admin base URL, credentials redacted.
func (c *Client) URL() string { return c.target.String() }

// AdminPort is the port of the admin URL, which the client never watches as inbound traffic.
func (c *Client) AdminPort() int { return c.adminPort }

// Metrics fetches /metrics and parses the families meshdrain reads (FilterMetrics): the
// proxy cannot filter its answer, so the client filters as it reads.
func (c *Client) Metrics(ctx context.Context) (map[string]*dto.MetricFamily, error) {
	var families map[string]*dto.MetricFamily
	err := c.get(ctx, "/metrics", func(resp *http.Response, endpoint string) error {
		if resp.StatusCode != http.StatusOK {
			return localhttp.NewStatusError(http.MethodGet, endpoint, resp)
		}
		kept, err := FilterMetrics(localhttp.LimitBody(resp.Body, c.opts.MaxBody))
		if err != nil {
			return fmt.Errorf("GET %s: %w", endpoint, err)
		}
		families, err = ParseFamilies(kept)
		if err != nil {
			return fmt.Errorf("GET %s: %w", endpoint, err)
		}
		return nil
	})
	return families, err
}

// Snapshot fetches /metrics and normalises it for sel, leaving out the admin port and
// reading its request counter (meshdrain's own polls) as Snapshot.AdminRequestsTotal.
func (c *Client) Snapshot(ctx context.Context, sel Selector) (Snapshot, error) {
	families, err := c.Metrics(ctx)
	if err != nil {
		return Snapshot{}, err
	}
	sel.ExcludePorts = append(append([]int(nil), sel.ExcludePorts...), c.adminPort)
	if sel.AdminPort == 0 {
		sel.AdminPort = c.adminPort
	}
	return Normalise(families, sel), nil
}

// Inbound is the drain logic's view of the proxy's inbound side (drain.Sidecar).
func (c *Client) Inbound(ctx context.Context, sel mesh.Selector) (mesh.Snapshot, error) {
	lsel, err := SelectorFor(sel, c.adminPort)
	if err != nil {
		return mesh.Snapshot{}, err
	}
	snap, err := c.Snapshot(ctx, lsel)
	if err != nil {
		return mesh.Snapshot{}, err
	}
	return snap.Inbound(), nil
}

// DrainListeners makes no call: a Linkerd proxy has no drain endpoint. It drains only when
// it is told to stop (SIGTERM or POST /shutdown), and then stops accepting inbound and
// outbound connections and its own admin port at once, which would cut the app's outbound
// calls and blind meshdrain. Clients move away when their endpoint lists update; meshdrain
// only watches for that. Callers pass mesh.DrainNone for Linkerd so that the final
// event does not claim a drain happened (NoDrainCall says why).
func (c *Client) DrainListeners(context.Context, mesh.DrainMode) error { return nil }

var _ mesh.Sidecar = (*Client)(nil)

// Ready reports the proxy's /ready: true on 200 "ready", false on 503 "not ready".
func (c *Client) Ready(ctx context.Context) (bool, error) {
	var ready bool
	err := c.get(ctx, "/ready", func(resp *http.Response, endpoint string) error {
		body, err := readSmall(resp)
		if err != nil {
			return fmt.Errorf("GET %s: %w", endpoint, err)
		}
		switch {
		case resp.StatusCode == http.StatusOK && body == "ready":
			ready = true
		case resp.StatusCode == http.StatusServiceUnavailable:
			ready = false
		default:
			return &localhttp.StatusError{Method: http.MethodGet, URL: endpoint, Code: resp.StatusCode, Body: body}
		}
		return nil
	})
	return ready, err
}

// readSmall reads a short answer (/ready, /live), trimmed.
func readSmall(resp *http.Response) (string, error) {
	body, err := localhttp.ReadBody(resp.Body, maxSmallBody)
	return strings.TrimSpace(string(body)), err
}

// get sends one GET for path, bounded by RequestTimeout and ctx, reading the body included.
func (c *Client) get(ctx context.Context, path string, read func(resp *http.Response, endpoint string) error) error {
	ctx, cancel := context.WithTimeout(ctx, c.opts.RequestTimeout)
	defer cancel()
	return localhttp.Exchange(ctx, c.http, c.target, http.MethodGet, path, "", read)
}
