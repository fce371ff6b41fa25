package localhttp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"time"
)

// DefaultMaxHeaderBytes caps a response's header block. Envoy's admin answers carry a handful
// of short headers; an endless header from a broken or hostile server must end the call, not
// grow the process (net/http reads headers into memory before returning).
const DefaultMaxHeaderBytes = 64 << 10

// Resolver looks names up; *net.Resolver is one. Only consulted when remote targets are allowed.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Options tune a client. The zero value is the safe one: loopback only, one connection per
// request, 64 KiB of headers.
type Options struct {
	// AllowRemote lets the dialer connect to non-loopback addresses and resolve names.
	AllowRemote bool
	// KeepAlive keeps one idle connection for the next request (the admin polls); without it
	// every request opens and closes its own connection.
	KeepAlive bool
	// MaxHeaderBytes caps the response headers (default DefaultMaxHeaderBytes).
	MaxHeaderBytes int64
	// Resolver resolves names when AllowRemote is set (default net.DefaultResolver).
	Resolver Resolver
	// Dial makes a connection the guard has allowed (default a net.Dialer); tests use it to
	// see which addresses are dialled.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
}

// NewClient returns an HTTP/1.1 client for t. It never follows redirects (a redirect from a
// loopback server to another host would bypass the guard, and an admin API never redirects),
// never consults HTTP(S)_PROXY from the pod's environment, never speaks HTTP/2, and every
// connection it makes goes through the guard.
func NewClient(t Target, o Options) *http.Client {
	if o.MaxHeaderBytes <= 0 {
		o.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	d := &guardDialer{target: t, opts: o}
	protocols := new(http.Protocols)
	protocols.SetHTTP1(true)
	transport := &http.Transport{
		Proxy:                  nil,
		DialContext:            d.DialContext,
		MaxResponseHeaderBytes: o.MaxHeaderBytes,
		// A compressed answer would let a small transfer expand past the body cap's intent.
		DisableCompression: true,
		DisableKeepAlives:  !o.KeepAlive,
		MaxIdleConns:       1,
		MaxConnsPerHost:    0,
		IdleConnTimeout:    30 * time.Second,
		// HTTP/1.1 only: no HTTP/2 attempt, with or without TLS.
		Protocols:         protocols,
		ForceAttemptHTTP2: false,
	}
	if o.KeepAlive {
		transport.MaxIdleConnsPerHost = 1
	}
	return &http.Client{
		Transport: transport,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
}

// guardDialer connects for one target and enforces the guard on every dial, on the address
// actually connected to: a name is never resolved unless remote targets are allowed, and
// "localhost" is never resolved at all (RFC 6761: it is the loopback), so neither a DNS answer
// nor a rewritten /etc/hosts can send a loopback-only client elsewhere.
type guardDialer struct {
	target Target
	opts   Options
}

func (d *guardDialer) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	if d.opts.Dial != nil {
		return d.opts.Dial(ctx, network, addr)
	}
	var nd net.Dialer
	return nd.DialContext(ctx, network, addr)
}

// DialContext is the transport's dialer.
func (d *guardDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	if d.target.Socket != "" {
		// The request's host is only the Host header: the socket is the address.
		return d.dial(ctx, "unix", d.target.Socket)
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("dial %q: %w", addr, err)
	}
	if strings.EqualFold(host, "localhost") {
		return d.dialFirst(ctx, network, []string{net.JoinHostPort("127.0.0.1", port), net.JoinHostPort("::1", port)})
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		if !d.opts.AllowRemote && (ip.Zone() != "" || !ip.Unmap().IsLoopback()) {
			return nil, fmt.Errorf("dial %s: %s is %w: refused before connecting", addr, host, ErrNotLoopback)
		}
		return d.dial(ctx, network, addr)
	}
	if !d.opts.AllowRemote {
		return nil, fmt.Errorf("dial %s: %q is a name, not a loopback address: refused before any lookup (%w)", addr, host, ErrNotLoopback)
	}
	resolver := d.opts.Resolver
	if resolver == nil {
		resolver = net.DefaultResolver
	}
	ips, err := resolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return nil, err
	}
	addrs := make([]string, 0, len(ips))
	for _, ip := range ips {
		addrs = append(addrs, net.JoinHostPort(ip.Unmap().String(), port))
	}
	return d.dialFirst(ctx, network, addrs)
}

// dialFirst tries each address in turn and returns the first connection. When all fail, the
// first error is returned, so a refused 127.0.0.1 still reads as "refused" when ::1 does not
// exist at all.
func (d *guardDialer) dialFirst(ctx context.Context, network string, addrs []string) (net.Conn, error) {
	var first error
	for _, a := range addrs {
		conn, err := d.dial(ctx, network, a)
		if err == nil {
			return conn, nil
		}
		if first == nil {
			first = err
		}
		if ctx.Err() != nil {
			break
		}
	}
	if first == nil {
		first = errors.New("no address to dial")
	}
	return nil, first
}

// BodyTooLargeError is a response body longer than its cap.
type BodyTooLargeError struct{ Limit int64 }

func (e *BodyTooLargeError) Error() string {
	return fmt.Sprintf("response body exceeds %d bytes", e.Limit)
}

// LimitBody returns a reader that yields at most limit bytes of r and then fails with a
// *BodyTooLargeError if r has more: unlike io.LimitReader, a too-long answer is an error, not
// a silently truncated one.
func LimitBody(r io.Reader, limit int64) io.Reader {
	return &limitedBody{r: r, left: limit, limit: limit}
}

type limitedBody struct {
	r     io.Reader
	left  int64
	limit int64
}

func (l *limitedBody) Read(p []byte) (int, error) {
	if l.left <= 0 {
		// One byte more tells "exactly at the cap" from "over it".
		var one [1]byte
		n, err := l.r.Read(one[:])
		if n > 0 {
			return 0, &BodyTooLargeError{Limit: l.limit}
		}
		if err == nil {
			return 0, nil
		}
		return 0, err
	}
	if int64(len(p)) > l.left {
		p = p[:l.left]
	}
	n, err := l.r.Read(p)
	l.left -= int64(n)
	return n, err
}

// ReadBody reads all of r up to limit bytes.
func ReadBody(r io.Reader, limit int64) ([]byte, error) {
	return io.ReadAll(LimitBody(r, limit))
}
