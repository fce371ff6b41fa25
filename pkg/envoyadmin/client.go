// Package envoyadmin talks to an Envoy sidecar's admin API (localhost:15000). Admin runs on
// Envoy's main thread and an unfiltered /stats can take megabytes and seconds in a large mesh
// (istio/istio#29110, envoyproxy/envoy#16425), so every request here is filtered, short and
// bounded; transient failures are retried with backoff inside the caller's deadline.
package envoyadmin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"time"

	"github.com/cenkalti/backoff/v4"
	dto "github.com/prometheus/client_model/go"

	"github.com/meshdrain/meshdrain/pkg/clock"
	"github.com/meshdrain/meshdrain/pkg/httpwire"
	"github.com/meshdrain/meshdrain/pkg/inbound"
)

// DefaultURL is the admin address of an Istio sidecar.
const DefaultURL = "http://127.0.0.1:15000"

// maxStatsBody bounds what one stats poll may read: a filtered response for a pod with ten
// inbound ports is a few kilobytes, so anything near this means the filter did not apply.
const maxStatsBody = 4 << 20

// Options tune the client. Zero values take the defaults.
type Options struct {
	// RequestTimeout bounds one HTTP attempt (default 1s).
	RequestTimeout time.Duration
	// RetryInitial and RetryMax shape the exponential backoff between attempts of one call
	// (defaults 100ms and 1s).
	RetryInitial, RetryMax time.Duration
	// HTTPClient sends every request (default: an httpwire.Client, which keeps one
	// connection alive and never consults HTTP(S)_PROXY from the pod's environment).
	HTTPClient Doer
	// Clock drives the backoff (default the wall clock).
	Clock clock.Clock
}

// Doer sends one HTTP request; *http.Client and *httpwire.Client are Doers.
type Doer interface {
	Do(*http.Request) (*http.Response, error)
}

// Client is an Envoy admin API client for one base URL.
type Client struct {
	base *url.URL
	http Doer
	opts Options
}

// New returns a client for baseURL, e.g. "http://127.0.0.1:15000".
func New(baseURL string, opts Options) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil {
		return nil, fmt.Errorf("admin url %q: %w", baseURL, err)
	}
	if u.Scheme != "http" || u.Host == "" {
		// Envoy's admin listener speaks plain HTTP; meshdrain carries no TLS stack.
		return nil, fmt.Errorf("admin url %q: want http://host:port", baseURL)
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
		opts.HTTPClient = &httpwire.Client{DialTimeout: opts.RequestTimeout, MaxIdlePerHost: 1}
	}
	return &Client{base: u, http: opts.HTTPClient, opts: opts}, nil
}

// URL returns the admin base URL.
func (c *Client) URL() string { return c.base.String() }

// ErrRefused means nothing listens on the admin port: Envoy is not running (yet, or any more).
var ErrRefused = errors.New("admin port refused the connection")

// StatusError is a non-2xx admin answer.
type StatusError struct {
	Method, URL string
	Code        int
	Body        string
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("%s %s: status %d: %s", e.Method, e.URL, e.Code, strings.TrimSpace(e.Body))
}

// IsRefused reports whether err means the admin port is closed.
func IsRefused(err error) bool {
	return errors.Is(err, ErrRefused) || errors.Is(err, syscall.ECONNREFUSED)
}

// IsUnreachable reports whether err means no connection to the admin port could be made at
// all (refused, or the dial itself failed), as opposed to an admin that answered badly.
func IsUnreachable(err error) bool {
	if IsRefused(err) {
		return true
	}
	var opErr *net.OpError
	return errors.As(err, &opErr) && opErr.Op == "dial"
}

// Stats fetches /stats/prometheus restricted by filter (an RE2 regex Envoy matches against
// its own stat names) and returns the parsed families.
func (c *Client) Stats(ctx context.Context, filter string) (map[string]*dto.MetricFamily, error) {
	q := url.Values{}
	if filter != "" {
		q.Set("filter", filter)
	}
	var families map[string]*dto.MetricFamily
	err := c.retry(ctx, http.MethodGet, "/stats/prometheus", q.Encode(), func(body io.Reader) error {
		var err error
		families, err = inbound.ParseFamilies(io.LimitReader(body, maxStatsBody))
		return err
	})
	return families, err
}

// Inbound fetches and normalises the inbound side selected by sel.
func (c *Client) Inbound(ctx context.Context, sel inbound.Selector) (inbound.Snapshot, error) {
	families, err := c.Stats(ctx, inbound.StatsFilter(sel))
	if err != nil {
		return inbound.Snapshot{}, err
	}
	return inbound.Normalise(families, sel), nil
}

// DrainMode says how /drain_listeners is called.
type DrainMode string

// Drain modes of meshdrain's --drain-mode.
const (
	// DrainGraceful keeps the inbound listeners accepting for Envoy's drain time while every
	// response tells its connection to close, so clients reconnect elsewhere.
	DrainGraceful DrainMode = "graceful"
	// DrainImmediate stops the inbound listeners at once: new connections are refused.
	DrainImmediate DrainMode = "immediate"
	// DrainNone makes no call.
	DrainNone DrainMode = "none"
)

// ParseDrainMode validates a --drain-mode value.
func ParseDrainMode(s string) (DrainMode, error) {
	switch m := DrainMode(s); m {
	case DrainGraceful, DrainImmediate, DrainNone:
		return m, nil
	}
	return "", fmt.Errorf("drain mode %q: want graceful, immediate or none", s)
}

// DrainListeners POSTs /drain_listeners for the inbound listeners only: outbound listeners
// carry the app's own calls, which must keep working while it finishes its work.
func (c *Client) DrainListeners(ctx context.Context, mode DrainMode) error {
	var query string
	switch mode {
	case DrainNone:
		return nil
	case DrainGraceful:
		query = "inboundonly&graceful"
	case DrainImmediate:
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
}

// ServerInfo reads /server_info.
func (c *Client) ServerInfo(ctx context.Context) (ServerInfo, error) {
	var info ServerInfo
	err := c.retry(ctx, http.MethodGet, "/server_info", "", func(body io.Reader) error {
		return json.NewDecoder(io.LimitReader(body, 1<<20)).Decode(&info)
	})
	return info, err
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
	var lastErr error
	operation := func() error {
		err := c.do(ctx, method, path, rawQuery, read)
		lastErr = err
		if err == nil || ctx.Err() != nil {
			return err
		}
		var status *StatusError
		if IsRefused(err) || errors.As(err, &status) && status.Code < 500 {
			return backoff.Permanent(err)
		}
		return err
	}
	err := backoff.RetryNotifyWithTimer(operation, backoff.WithContext(policy, ctx), nil, &backoffTimer{clock: c.opts.Clock})
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
	u := *c.base
	u.Path = strings.TrimSuffix(u.Path, "/") + path
	u.RawQuery = rawQuery
	req, err := http.NewRequestWithContext(ctx, method, u.String(), nil)
	if err != nil {
		return err
	}
	// Errors name the endpoint, not the long filter regex in the query.
	u.RawQuery = ""
	resp, err := c.http.Do(req)
	if err != nil {
		if errors.Is(err, syscall.ECONNREFUSED) {
			return fmt.Errorf("%s %s: %w", method, u.Redacted(), ErrRefused)
		}
		return fmt.Errorf("%s %s: %w", method, u.Redacted(), err)
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return &StatusError{Method: method, URL: u.Redacted(), Code: resp.StatusCode, Body: string(body)}
	}
	if err := read(resp.Body); err != nil {
		return fmt.Errorf("%s %s: %w", method, u.Redacted(), err)
	}
	return nil
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
