// Package envoy is the Envoy backend of package mesh: it talks to an Envoy sidecar's admin
// API (Istio's istio-proxy on localhost:15000, Consul's, any Envoy) and turns its Prometheus
// stats into mesh's model of the inbound side, whichever of the three stat namings the
// sidecar uses (plain Envoy tags, Istio >= 1.23, Istio < 1.23). Admin runs on
// Envoy's main thread and an unfiltered /stats can take megabytes and seconds in a large mesh
// (istio/istio#29110, envoyproxy/envoy#16425), so every request here is filtered, short and
// bounded; transient failures are retried with backoff inside the caller's deadline.
package envoy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/cenkalti/backoff/v4"
	dto "github.com/prometheus/client_model/go"

	"github.com/meshdrain/meshdrain/pkg/clock"
	"github.com/meshdrain/meshdrain/pkg/localhttp"
	"github.com/meshdrain/meshdrain/pkg/mesh"
)

// DefaultURL is the admin address of an Istio sidecar.
const DefaultURL = "http://127.0.0.1:15000"

// Caps on what one admin answer may hold. A filtered stats answer for a pod with ten inbound
// ports is a few kilobytes, and the completions fallback of a busy service a few hundred (its
// series grow with the callers), so anything near maxStatsBody means the filter did not apply
// or something else answers: an error, not a reason to grow the process.
const (
	maxStatsBody      = 2 << 20
	maxServerInfoBody = 1 << 20
)

// Options tune the client. Zero values take the defaults.
type Options struct {
	// RequestTimeout bounds one HTTP attempt, reading the answer included (default 1s).
	RequestTimeout time.Duration
	// RetryInitial and RetryMax shape the exponential backoff between attempts of one call
	// (defaults 100ms and 1s).
	RetryInitial, RetryMax time.Duration
	// AllowRemote lets the admin URL name a host other than the pod's loopback.
	AllowRemote bool
	// Dial, when set, makes the connections the loopback guard allows (tests).
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// HTTPClient sends every request (default: a localhttp client keeping one connection
	// alive, loopback only, never consulting HTTP(S)_PROXY from the pod's environment).
	HTTPClient Doer
	// Clock drives the backoff (default the wall clock).
	Clock clock.Clock
}

// Doer sends one HTTP request; *http.Client is a Doer.
type Doer = localhttp.Doer

// Client is an Envoy admin API client for one base URL.
type Client struct {
	target localhttp.Target
	http   Doer
	opts   Options
	used   usedView // the picture InboundUsed completes
}

// New returns a client for baseURL: "http://127.0.0.1:15000", "http://[::1]:15000", or a unix
// socket "unix:/path/admin.sock". Hosts other than the loopback are refused unless
// opts.AllowRemote is set.
func New(baseURL string, opts Options) (*Client, error) {
	target, err := localhttp.Parse(baseURL, opts.AllowRemote)
	if err != nil {
		return nil, fmt.Errorf("admin url %w", err)
	}
	if opts.RequestTimeout <= 0 {
		opts.RequestTimeout = time.Second
	}
	if opts.RetryInitial <= 0 {
		opts.RetryInitial = 100 * time.Millisecond
	}
	if opts.RetryMax <= 0 {
		opts.RetryMax = time.Second
	}
	if opts.Clock == nil {
		opts.Clock = clock.Real{}
	}
	if opts.HTTPClient == nil {
		opts.HTTPClient = localhttp.NewClient(target, localhttp.Options{AllowRemote: opts.AllowRemote, KeepAlive: true, Dial: opts.Dial})
	}
	return &Client{target: target, http: opts.HTTPClient, opts: opts}, nil
}

// URL returns the admin base URL.
func (c *Client) URL() string { return c.target.String() }

// The errors are localhttp's, shared with every client of a sidecar's admin port.
var (
	// ErrRefused means nothing listens on the admin port: Envoy is not running (yet, or any
	// more).
	ErrRefused = localhttp.ErrRefused
	// ErrNotConnected means an attempt ended before any connection to the admin port was made.
	ErrNotConnected = localhttp.ErrNotConnected
)

// StatusError is a non-2xx admin answer.
type StatusError = localhttp.StatusError

// IsRefused reports whether err means the admin port is closed.
func IsRefused(err error) bool { return localhttp.IsRefused(err) }

// IsUnreachable reports whether err means no connection to the admin port could be made at
// all (refused, or the dial itself failed), as opposed to an admin that answered badly.
func IsUnreachable(err error) bool { return localhttp.IsUnreachable(err) }

// Stats fetches /stats/prometheus restricted by filter (an RE2 regex Envoy matches against
// its own stat names) and returns the parsed families.
func (c *Client) Stats(ctx context.Context, filter string) (map[string]*dto.MetricFamily, error) {
	return c.stats(ctx, filter, false, nil)
}

// stats is Stats, with usedOnly adding Envoy's usedonly (only the stats whose "used" flag is
// set are answered), and parsing only what lines keeps of the answer (all of it when nil).
func (c *Client) stats(ctx context.Context, filter string, usedOnly bool, lines *mesh.LineFilter) (map[string]*dto.MetricFamily, error) {
	q := url.Values{}
	if usedOnly {
		q.Set("usedonly", "")
	}
	if filter != "" {
		q.Set("filter", filter)
	}
	var families map[string]*dto.MetricFamily
	err := c.retry(ctx, http.MethodGet, "/stats/prometheus", q.Encode(), func(body io.Reader) error {
		var err error
		families, err = readStats(body, lines)
		return err
	})
	return families, err
}

// Inbound fetches and normalises the inbound side selected by sel.
func (c *Client) Inbound(ctx context.Context, sel mesh.Selector) (mesh.Snapshot, error) {
	return c.complete(ctx, sel, false)
}

// complete reads the complete stats of sel. keep starts InboundUsed's picture with them;
// otherwise they only replace a picture already kept of the same selection.
func (c *Client) complete(ctx context.Context, sel mesh.Selector, keep bool) (mesh.Snapshot, error) {
	filter := StatsFilter(sel)
	lines := inboundLines(sel)
	families, err := c.stats(ctx, filter, false, &lines)
	if err != nil {
		return mesh.Snapshot{}, err
	}
	if keep {
		c.used.reset(filter, families)
	} else {
		c.used.refresh(filter, families)
	}
	return Normalise(families, sel), nil
}

// DrainListeners POSTs /drain_listeners for the inbound listeners only: outbound listeners
// carry the app's own calls, which must keep working while it finishes its work.
func (c *Client) DrainListeners(ctx context.Context, mode mesh.DrainMode) error {
	var query string
	switch mode {
	case mesh.DrainNone:
		return nil
	case mesh.DrainGraceful:
		query = "inboundonly&graceful"
	case mesh.DrainImmediate:
		query = "inboundonly"
	default:
		return fmt.Errorf("unknown drain mode %q", mode)
	}
	return c.retry(ctx, http.MethodPost, "/drain_listeners", query, func(io.Reader) error { return nil })
}

// ServerInfo is the part of /server_info meshdrain reads.
type ServerInfo struct {
	Version            string `json:"version"`
	State              string `json:"state"`
	CommandLineOptions struct {
		DrainTime     string `json:"drain_time"`
		DrainStrategy string `json:"drain_strategy"`
	} `json:"command_line_options"`
	// UptimeCurrentEpoch is a protobuf JSON duration in whole seconds, e.g. "3600s".
	UptimeCurrentEpoch string `json:"uptime_current_epoch"`
}

// ServerInfo reads /server_info.
func (c *Client) ServerInfo(ctx context.Context) (ServerInfo, error) {
	var info ServerInfo
	err := c.retry(ctx, http.MethodGet, "/server_info", "", func(body io.Reader) error {
		return json.NewDecoder(localhttp.LimitBody(body, maxServerInfoBody)).Decode(&info)
	})
	return info, err
}

// Uptime reads /server_info's uptime_current_epoch. Envoy computes it from the wall clock in
// whole seconds (source/server/admin/server_info_handler.cc), so two readings taken at least
// a second apart differ by at least one on a live Envoy: a reading that does not advance
// across a quiet window means the answers are frozen (a cache in front of admin, or a stuck
// admin thread replaying one answer).
func (c *Client) Uptime(ctx context.Context) (time.Duration, error) {
	info, err := c.ServerInfo(ctx)
	if err != nil {
		return 0, err
	}
	if info.UptimeCurrentEpoch == "" {
		return 0, errors.New("GET /server_info: no uptime_current_epoch in the answer")
	}
	d, err := time.ParseDuration(info.UptimeCurrentEpoch)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("GET /server_info: uptime_current_epoch %q is not a duration", info.UptimeCurrentEpoch)
	}
	return d, nil
}

// retry runs one admin call with exponential backoff until it succeeds, fails permanently
// (connection refused, a 4xx) or ctx ends.
func (c *Client) retry(ctx context.Context, method, path, rawQuery string, read func(io.Reader) error) error {
	policy := backoff.NewExponentialBackOff()
	policy.InitialInterval = c.opts.RetryInitial
	policy.MaxInterval = c.opts.RetryMax
	policy.MaxElapsedTime = 0 // ctx is the only limit
	policy.Clock = c.opts.Clock
	policy.Reset()
	var lastErr, lastAnswered error
	operation := func() error {
		err := c.do(ctx, method, path, rawQuery, read)
		lastErr = err
		if err != nil && !IsUnreachable(err) {
			lastAnswered = err
		}
		if err == nil || ctx.Err() != nil {
			return err
		}
		var status *StatusError
		var tooLarge *localhttp.BodyTooLargeError
		if IsRefused(err) || errors.As(err, &status) && status.Code < 500 || errors.As(err, &tooLarge) {
			// A body over its cap will be over it again: the next poll may try anew.
			return backoff.Permanent(err)
		}
		return err
	}
	err := backoff.RetryNotifyWithTimer(operation, backoff.WithContext(policy, ctx), nil, &backoffTimer{clock: c.opts.Clock})
	if err != nil && ctx.Err() != nil && lastAnswered != nil && !errors.Is(lastErr, ErrRefused) {
		// An earlier attempt reached the admin port and got a bad answer; the last one was
		// only cut short by the deadline before it connected. The port is reachable: saying
		// "unreachable" would make a sick admin pass for no sidecar at all.
		lastErr = lastAnswered
	}
	if err != nil && ctx.Err() != nil && lastErr != nil && lastErr != ctx.Err() {
		// Keep what went wrong last in the chain, not only that time ran out: a dial that
		// timed out (a blackholed admin address) must still read as unreachable.
		return fmt.Errorf("%w: last attempt: %w", ctx.Err(), lastErr)
	}
	return err
}

func (c *Client) do(ctx context.Context, method, path, rawQuery string, read func(io.Reader) error) error {
	ctx, cancel := context.WithTimeout(ctx, c.opts.RequestTimeout)
	defer cancel()
	return localhttp.Exchange(ctx, c.http, c.target, method, path, rawQuery, func(resp *http.Response, endpoint string) error {
		return ReadResponse(method, endpoint, resp, read)
	})
}

// ReadResponse checks an admin answer and hands its body to read: a non-2xx status becomes a
// *StatusError with the start of the body, anything read's own error. It reads only what
// read asks for; the caller bounds the time and closes the body.
func ReadResponse(method, endpoint string, resp *http.Response, read func(io.Reader) error) error {
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return localhttp.NewStatusError(method, endpoint, resp)
	}
	if err := read(resp.Body); err != nil {
		return fmt.Errorf("%s %s: %w", method, endpoint, err)
	}
	return nil
}

// ReadStats is the reader of a /stats/prometheus answer: read whole through the cap first, so
// that a too-long or cut answer is reported as such rather than as whatever the parser trips
// on first, then parsed.
func ReadStats(body io.Reader) (map[string]*dto.MetricFamily, error) { return readStats(body, nil) }

// readStats is ReadStats parsing only what lines keeps of the answer (all of it when nil).
func readStats(body io.Reader, lines *mesh.LineFilter) (map[string]*dto.MetricFamily, error) {
	raw, err := localhttp.ReadBody(body, maxStatsBody)
	if err != nil {
		return nil, err
	}
	var in io.Reader = bytes.NewReader(raw)
	if lines != nil {
		if in, err = lines.Filter(in); err != nil {
			return nil, fmt.Errorf("parse prometheus stats: %w", err)
		}
	}
	return ParseFamilies(in)
}

// backoffTimer adapts clock.Clock to backoff/v4's Timer so retries follow the injected clock.
type backoffTimer struct {
	clock clock.Clock
	timer clock.Timer
}

func (t *backoffTimer) Start(d time.Duration) { t.timer = t.clock.NewTimer(d) }

func (t *backoffTimer) Stop() {
	if t.timer != nil {
		t.timer.Stop()
	}
}

func (t *backoffTimer) C() <-chan time.Time { return t.timer.C() }
