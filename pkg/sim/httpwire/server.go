// Package httpwire is a small HTTP/1.1 server and client built only on net/http's wire
// types (ReadRequest, Response.Write, Request.Write, ReadResponse) and its Handler
// interface. net/http's Server and Transport bring HTTP/2 and TLS with them, about 2.4 MiB
// of a binary that is copied into every pod; meshdrain only ever speaks plain HTTP/1.1 on
// loopback. Owning the connection loop also gives the Envoy emulator the exact connection
// behaviour it must reproduce: close after a response, refuse, reset.
package httpwire

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// ErrServerClosed is returned by Serve after Shutdown or Close, as in net/http.
var ErrServerClosed = http.ErrServerClosed

// Server serves HTTP/1.1 with keep-alive. Handlers' responses are buffered and sent with a
// Content-Length, which suits the small answers of an admin API, an emulated app and a proxy.
type Server struct {
	Handler http.Handler
	// IdleTimeout closes a keep-alive connection that waits this long for its next request
	// (default 60s).
	IdleTimeout time.Duration
	// ReadTimeout bounds reading one request once it has started (default 30s).
	ReadTimeout time.Duration
	// DrainCloseTimeout, when set, keeps a connection open after a response whose handler
	// asked to close it (Connection: close the client did not ask for) until the client closes
	// it, serving (and again closing) any request that still arrives, and closes it at this
	// timeout. Envoy's HTTP connection manager drains HTTP/1.1 so: a drain marks the response
	// and starts the drain_timeout, and only that timeout closes the connection from its side
	// (envoyproxy/envoy source/common/http/conn_manager_impl.cc startDrainSequence,
	// onDrainTimeout, checkForDeferredClose), so a client that honours the header closes first.
	// Zero closes right after the response, as net/http does.
	DrainCloseTimeout time.Duration
	// ConnState, when set, is told of each connection's new state (StateNew, StateActive,
	// StateIdle, StateHijacked, StateClosed), as in net/http.
	ConnState func(net.Conn, http.ConnState)
	// OnPanic, when set, is told of a handler's panic (other than http.ErrAbortHandler); the
	// connection is dropped either way. The package itself never writes to the terminal.
	OnPanic func(recovered any)

	noKeepAlive atomic.Bool

	acceptor // mu guards conns and done too
	conns    map[*serverConn]struct{}
	wg       sync.WaitGroup
	done     chan struct{}
}

type serverConn struct {
	net.Conn
	mu       sync.Mutex
	active   bool
	hijacked bool
}

// SetKeepAlivesEnabled(false) closes the idle connections and makes every later response
// close its connection, as net/http's does and as an app does when it starts shutting down.
func (s *Server) SetKeepAlivesEnabled(v bool) {
	s.noKeepAlive.Store(!v)
	if !v {
		s.mu.Lock()
		s.init()
		s.mu.Unlock()
		s.closeIdle()
	}
}

// StopKeepAlives makes every later response close its connection, as SetKeepAlivesEnabled(false)
// does, but leaves the idle connections open: each closes after its next response, or when
// CloseIdle closes it. An app that must not race its clients' next request on an idle
// connection shuts down so (closing an idle connection races the client's send).
func (s *Server) StopKeepAlives() { s.noKeepAlive.Store(true) }

// CloseIdle closes the idle connections and returns how many connections remain.
func (s *Server) CloseIdle() int {
	s.mu.Lock()
	s.init()
	s.mu.Unlock()
	return s.closeIdle()
}

// maxBody bounds a request body, which is read whole before the handler runs.
const maxBody = 16 << 20

func (s *Server) init() {
	if s.listeners == nil {
		s.listeners = map[net.Listener]struct{}{}
		s.conns = map[*serverConn]struct{}{}
		s.done = make(chan struct{})
	}
}

// Serve accepts connections on ln until Shutdown or Close.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	s.init()
	s.mu.Unlock()
	return s.acceptLoop(ln, func(c net.Conn) func() {
		sc := &serverConn{Conn: c}
		s.conns[sc] = struct{}{}
		s.wg.Add(1)
		return func() {
			s.setState(sc, http.StateNew)
			go s.serveConn(sc)
		}
	})
}

func (s *Server) setState(c *serverConn, state http.ConnState) {
	if s.ConnState != nil {
		s.ConnState(c.Conn, state)
	}
}

func (s *Server) isClosing() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closing
}

func (s *Server) serveConn(c *serverConn) {
	defer s.wg.Done()
	defer s.forget(c)
	idle := s.IdleTimeout
	if idle <= 0 {
		idle = 60 * time.Second
	}
	readTimeout := s.ReadTimeout
	if readTimeout <= 0 {
		readTimeout = 30 * time.Second
	}
	br := bufio.NewReader(c)
	// closeBy is when a connection the handler asked to close is closed from this side
	// (DrainCloseTimeout); zero while it is not closing.
	var closeBy time.Time
	for {
		idleUntil := time.Now().Add(idle)
		if !closeBy.IsZero() && closeBy.Before(idleUntil) {
			idleUntil = closeBy
		}
		_ = c.SetReadDeadline(idleUntil)
		// Wait for the first byte of the next request while idle, so Shutdown can close idle
		// connections without cutting a request that has started to arrive.
		if _, err := br.Peek(1); err != nil {
			return
		}
		c.setActive(true)
		s.setState(c, http.StateActive)
		_ = c.SetReadDeadline(time.Now().Add(readTimeout))
		req, ok := readRequest(c, br)
		if !ok {
			return
		}
		switch s.serveRequest(c, br, req) {
		case closeConn:
			return
		case drainConn:
			if closeBy.IsZero() {
				closeBy = time.Now().Add(s.DrainCloseTimeout)
			}
		}
		c.setActive(false)
		s.setState(c, http.StateIdle)
	}
}

// forget drops a connection that is no longer served, and closes it unless a handler took it.
func (s *Server) forget(c *serverConn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
	c.mu.Lock()
	hijacked := c.hijacked
	c.mu.Unlock()
	if !hijacked {
		c.Close()
		s.setState(c, http.StateClosed)
	}
}

func (c *serverConn) setActive(active bool) {
	c.mu.Lock()
	c.active = active
	c.mu.Unlock()
}

// readRequest reads a request, its body whole: so that while the handler runs the
// connection can be watched for the client going away (its context is then cancelled, as in
// net/http). A request that cannot be read, or whose body is too large, is answered here and
// ends the connection (false).
func readRequest(c *serverConn, br *bufio.Reader) (*http.Request, bool) {
	req, err := http.ReadRequest(br)
	if err != nil {
		if !errors.Is(err, io.EOF) {
			_, _ = io.WriteString(c, "HTTP/1.1 400 Bad Request\r\nConnection: close\r\nContent-Length: 0\r\n\r\n")
		}
		return nil, false
	}
	body, err := io.ReadAll(io.LimitReader(req.Body, maxBody+1))
	if err != nil {
		return nil, false
	}
	if len(body) > maxBody {
		// The rest of the body is still on the connection: answer and close it.
		_, _ = io.WriteString(c, "HTTP/1.1 413 Request Entity Too Large\r\nConnection: close\r\nContent-Length: 0\r\n\r\n")
		// Half-close and read a little of what is left, so the answer is not lost to the
		// reset that closing on unread data would send (net/http does the same).
		if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
			_ = c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
			_, _ = io.Copy(io.Discard, io.LimitReader(br, 256<<10))
		}
		return nil, false
	}
	req.Body = io.NopCloser(bytes.NewReader(body))
	_ = c.SetReadDeadline(time.Time{})
	req.RemoteAddr = c.RemoteAddr().String()
	return req, true
}

// afterResponse is what becomes of a connection once a request is answered.
type afterResponse int

const (
	// closeConn: the connection is over (closed, or taken by the handler).
	closeConn afterResponse = iota
	// keepConn: it waits for the next request.
	keepConn
	// drainConn: the handler asked to close it; it waits for the client to close it, serving
	// what still arrives, until DrainCloseTimeout.
	drainConn
)

// serveRequest runs the handler on req and sends its response.
func (s *Server) serveRequest(c *serverConn, br *bufio.Reader, req *http.Request) afterResponse {
	ctx, cancel := context.WithCancel(context.Background())
	ctx = context.WithValue(ctx, http.LocalAddrContextKey, c.LocalAddr())
	req = req.WithContext(ctx)
	w := &responseWriter{conn: c, br: br, header: http.Header{}, req: req}
	watch := watchPeer(c, br, cancel)
	w.watch = watch
	aborted := s.callHandler(w, req)
	peerGone := !w.hijacked && watch.stop()
	cancel()
	if w.hijacked {
		c.mu.Lock()
		c.hijacked = true
		c.mu.Unlock()
		s.setState(c, http.StateHijacked)
		return closeConn
	}
	if aborted || peerGone {
		return closeConn
	}
	keepAlive := !req.Close && !s.isClosing() && !s.noKeepAlive.Load()
	err := w.finish(keepAlive)
	for _, fn := range w.after {
		fn()
	}
	switch {
	case err != nil:
		return closeConn
	case w.keepAlive:
		return keepConn
	// Only the handler's own Connection: close waits for the client; a client that asked to
	// close, or a server shutting down, closes at once.
	case !keepAlive || !w.handlerClose || s.DrainCloseTimeout <= 0:
		return closeConn
	}
	return drainConn
}

// peerWatch reads ahead on an active connection so that a client that closes it is noticed
// while its request is being handled.
type peerWatch struct {
	conn net.Conn
	done chan struct{}
	gone atomic.Bool
}

func watchPeer(c net.Conn, br *bufio.Reader, cancel context.CancelFunc) *peerWatch {
	w := &peerWatch{conn: c, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		// Peek consumes nothing: a pipelined next request stays buffered for the loop.
		if _, err := br.Peek(1); err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return // stopped by stop()
			}
			w.gone.Store(true)
			cancel()
		}
	}()
	return w
}

// stop ends the read-ahead and reports whether the client went away.
func (w *peerWatch) stop() bool {
	_ = w.conn.SetReadDeadline(time.Unix(1, 0))
	<-w.done
	_ = w.conn.SetReadDeadline(time.Time{})
	return w.gone.Load()
}

// callHandler runs the handler; a panic with http.ErrAbortHandler aborts the connection
// without a response, as in net/http. It reports whether the connection was aborted.
func (s *Server) callHandler(w *responseWriter, req *http.Request) (aborted bool) {
	defer func() {
		if r := recover(); r != nil {
			if r != http.ErrAbortHandler && s.OnPanic != nil {
				s.OnPanic(r)
			}
			aborted = true
		}
	}()
	s.Handler.ServeHTTP(w, req)
	return false
}

// Shutdown stops accepting, closes idle connections, and waits for the active ones to send
// their current response, as net/http's Server.Shutdown does.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.init()
	s.closing = true
	for ln := range s.listeners {
		ln.Close()
	}
	s.mu.Unlock()
	for {
		if s.closeIdle() == 0 {
			return nil
		}
		timer := time.NewTimer(5 * time.Millisecond)
		select {
		case <-ctx.Done():
			timer.Stop()
			return ctx.Err()
		case <-timer.C:
		}
	}
}

// closeIdle closes idle connections and returns how many connections remain.
func (s *Server) closeIdle() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		c.mu.Lock()
		if !c.active && !c.hijacked {
			c.Close()
		}
		c.mu.Unlock()
	}
	return len(s.conns)
}

// Close stops accepting and closes every connection at once: requests in flight are cut.
func (s *Server) Close() error { return s.closeAll(false) }

// Abort is Close with a TCP reset on every connection, as when a process is SIGKILLed
// while its peers still send.
func (s *Server) Abort() error { return s.closeAll(true) }

func (s *Server) closeAll(reset bool) error {
	s.mu.Lock()
	s.init()
	s.closing = true
	for ln := range s.listeners {
		ln.Close()
	}
	for c := range s.conns {
		if reset {
			setLingerZero(c.Conn)
		}
		c.Close()
	}
	s.mu.Unlock()
	return nil
}

// Wait blocks until every connection handler has returned.
func (s *Server) Wait() { s.wg.Wait() }

// responseWriter buffers one response.
type responseWriter struct {
	conn        net.Conn
	br          *bufio.Reader
	req         *http.Request
	header      http.Header
	status      int
	body        bytes.Buffer
	hijacked    bool
	keepAlive   bool
	wroteHeader bool
	after       []func()
	watch       *peerWatch

	// handlerClose: the handler set Connection: close on the response.
	handlerClose bool
}

// AfterResponse runs fn once the response being written on w has been sent (or has failed),
// e.g. to exit a server only after it has answered the request that asked it to. Outside an
// httpwire handler fn runs at once.
func AfterResponse(w http.ResponseWriter, fn func()) {
	if rw, ok := w.(*responseWriter); ok {
		rw.after = append(rw.after, fn)
		return
	}
	fn()
}

func (w *responseWriter) Header() http.Header { return w.header }

func (w *responseWriter) WriteHeader(code int) {
	if w.wroteHeader {
		return
	}
	w.wroteHeader, w.status = true, code
}

func (w *responseWriter) Write(p []byte) (int, error) {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	return w.body.Write(p)
}

// Flush is accepted for handlers that stream; the response still goes out whole.
func (w *responseWriter) Flush() {}

// Hijack hands the connection to the handler, which then owns it.
func (w *responseWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	if w.watch != nil {
		// The read-ahead must not touch the reader the handler now owns.
		w.watch.stop()
	}
	w.hijacked = true
	return w.conn, bufio.NewReadWriter(w.br, bufio.NewWriter(w.conn)), nil
}

func (w *responseWriter) finish(keepAlive bool) error {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if w.header.Get("Connection") == "close" {
		keepAlive, w.handlerClose = false, true
	}
	w.header.Del("Connection")
	if w.body.Len() > 0 && w.header.Get("Content-Type") == "" {
		w.header.Set("Content-Type", http.DetectContentType(w.body.Bytes()))
	}
	w.header.Del("Content-Length")
	w.header.Del("Transfer-Encoding")
	w.keepAlive = keepAlive
	resp := &http.Response{
		Status:        strconv.Itoa(w.status) + " " + http.StatusText(w.status),
		StatusCode:    w.status,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        w.header,
		Body:          io.NopCloser(bytes.NewReader(w.body.Bytes())),
		ContentLength: int64(w.body.Len()),
		Close:         !keepAlive,
		Request:       w.req,
	}
	if w.req.Method == http.MethodHead {
		resp.Body = http.NoBody
	}
	bw := bufio.NewWriterSize(w.conn, 4096)
	if err := resp.Write(bw); err != nil {
		return err
	}
	return bw.Flush()
}

// setLingerZero makes Close send a TCP reset, looking through wrappers that expose the
// underlying connection with NetConn (as crypto/tls does).
func setLingerZero(c net.Conn) {
	for i := 0; i < 4; i++ {
		if l, ok := c.(interface{ SetLinger(int) error }); ok {
			_ = l.SetLinger(0)
			return
		}
		u, ok := c.(interface{ NetConn() net.Conn })
		if !ok {
			return
		}
		c = u.NetConn()
	}
}
