package httpwire

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"syscall"
	"time"
)

// Client sends HTTP/1.1 requests over pooled keep-alive connections. Like net/http's
// Transport it retries an idempotent request once when a reused connection turns out to
// have been closed by the server before any answer; unlike it, it never speaks TLS or HTTP/2.
type Client struct {
	// DialTimeout bounds connecting (default 5s).
	DialTimeout time.Duration
	// MaxIdlePerHost is how many idle connections are kept per host (default 2; negative:
	// none, every request gets a new connection).
	MaxIdlePerHost int
	// NoStaleRetry turns off the one retry on a stale reused connection, for callers that
	// model retries themselves.
	NoStaleRetry bool
	// Dial, when set, makes the connections (e.g. to count them, or to reach a fixed
	// address whatever the request names).
	Dial func(ctx context.Context, addr string) (net.Conn, error)

	mu   sync.Mutex
	idle map[string][]*clientConn
}

type clientConn struct {
	net.Conn
	br   *bufio.Reader
	addr string // the pool key: host:port as the request named it
}

// Do sends req and returns the response. The caller must close the response body; a body
// read to its end returns the connection to the pool.
func (c *Client) Do(req *http.Request) (*http.Response, error) {
	addr := hostPort(req)
	for attempt := 0; ; attempt++ {
		conn, reused, err := c.conn(req.Context(), addr)
		if err != nil {
			return nil, err
		}
		if hook, ok := req.Context().Value(gotConnKey{}).(func(reused bool)); ok {
			hook(reused)
		}
		resp, err := c.roundTrip(conn, req)
		if err == nil {
			return resp, nil
		}
		conn.Close()
		if reused && attempt == 0 && !c.NoStaleRetry && idempotent(req) && staleConnError(err) && req.Context().Err() == nil {
			continue
		}
		return nil, err
	}
}

func (c *Client) roundTrip(conn *clientConn, req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	// The context alone ends the exchange, so its error (not an i/o timeout) is reported.
	_ = conn.SetDeadline(time.Time{})
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	bw := bufio.NewWriter(conn)
	if err := req.Write(bw); err != nil {
		stop()
		return nil, ctxErr(ctx, err)
	}
	if err := bw.Flush(); err != nil {
		stop()
		return nil, ctxErr(ctx, err)
	}
	resp, err := http.ReadResponse(conn.br, req)
	if err != nil {
		stop()
		return nil, ctxErr(ctx, err)
	}
	resp.Body = &pooledBody{ReadCloser: resp.Body, client: c, conn: conn, reusable: !resp.Close && !req.Close, stop: stop, ctx: ctx}
	return resp, nil
}

func ctxErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return errors.Join(ctx.Err(), err)
	}
	return err
}

// pooledBody puts the connection back once the body has been read to its end.
type pooledBody struct {
	io.ReadCloser
	client   *Client
	conn     *clientConn
	reusable bool
	eof      bool
	once     sync.Once
	stop     func() bool
	ctx      context.Context
}

func (b *pooledBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if errors.Is(err, io.EOF) {
		b.eof = true
	} else if err != nil {
		err = ctxErr(b.ctx, err)
	}
	return n, err
}

func (b *pooledBody) Close() error {
	b.once.Do(func() {
		b.stop()
		err := b.ReadCloser.Close()
		if b.reusable && b.eof && err == nil {
			b.client.put(b.conn)
			return
		}
		b.conn.Close()
	})
	return nil
}

func (c *Client) conn(ctx context.Context, addr string) (*clientConn, bool, error) {
	for {
		c.mu.Lock()
		list := c.idle[addr]
		if len(list) == 0 {
			c.mu.Unlock()
			break
		}
		conn := list[len(list)-1]
		c.idle[addr] = list[:len(list)-1]
		c.mu.Unlock()
		if alive(conn) {
			return conn, true, nil
		}
		conn.Close()
	}
	timeout := c.DialTimeout
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	dial := c.Dial
	if dial == nil {
		d := net.Dialer{Timeout: timeout}
		dial = func(ctx context.Context, addr string) (net.Conn, error) { return d.DialContext(ctx, "tcp", addr) }
	}
	raw, err := dial(ctx, addr)
	if err != nil {
		return nil, false, err
	}
	return &clientConn{Conn: raw, br: bufio.NewReader(raw), addr: addr}, false, nil
}

// alive reports whether an idle connection is still open: a peer that closed it has left an
// EOF (or a reset) to read. Envoy's and Go's pools notice such closes on idle connections
// as they happen; checking at reuse gives the same result without a reader per connection.
func alive(conn *clientConn) bool {
	if conn.br.Buffered() > 0 {
		return false // nothing may arrive on an idle HTTP/1.1 connection
	}
	raw := conn.Conn
	for i := 0; i < 4; i++ {
		if u, ok := raw.(interface{ NetConn() net.Conn }); ok {
			raw = u.NetConn()
		}
	}
	sc, ok := raw.(syscall.Conn)
	if !ok {
		return true
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	// A non-blocking peek: a deadline in the past would not even look at the socket.
	open := true
	var buf [1]byte
	_ = rc.Read(func(fd uintptr) bool {
		// Nothing to read is the only healthy answer: EOF (0 bytes), a reset, or bytes
		// nobody asked for all mean the connection is done.
		_, _, err := syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		open = err == syscall.EAGAIN || err == syscall.EWOULDBLOCK
		return true
	})
	return open
}

func (c *Client) put(conn *clientConn) {
	max := c.MaxIdlePerHost
	if max == 0 {
		max = 2
	}
	addr := conn.addr
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.idle == nil {
		c.idle = map[string][]*clientConn{}
	}
	if max < 0 || len(c.idle[addr]) >= max {
		conn.Close()
		return
	}
	_ = conn.SetDeadline(time.Time{})
	c.idle[addr] = append(c.idle[addr], conn)
}

// CloseIdle closes every pooled connection.
func (c *Client) CloseIdle() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for addr, list := range c.idle {
		for _, conn := range list {
			conn.Close()
		}
		delete(c.idle, addr)
	}
}

func hostPort(req *http.Request) string {
	host := req.URL.Host
	if _, _, err := net.SplitHostPort(host); err != nil {
		host = net.JoinHostPort(host, "80")
	}
	return host
}

func idempotent(req *http.Request) bool {
	switch req.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, "":
		return req.Body == nil || req.Body == http.NoBody
	}
	return false
}

// staleConnError is how a keep-alive connection the server already closed shows up.
func staleConnError(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

type gotConnKey struct{}

// WithGotConn returns a context under which Do calls hook once it holds a connection for
// the request (reused tells whether it came from the pool), before anything is sent: the
// moment Envoy counts an upstream request as attached to a connection.
func WithGotConn(ctx context.Context, hook func(reused bool)) context.Context {
	return context.WithValue(ctx, gotConnKey{}, hook)
}
