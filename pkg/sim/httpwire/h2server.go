package httpwire

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// H2Server serves HTTP/2 in cleartext with prior knowledge (h2c), as Envoy's HTTP connection
// manager serves the clients' sidecars on an http2 or grpc port (inside their mTLS, which the
// simulator leaves out), with that connection manager's drain (docs/facts.md §6b):
//
//   - A handler that asks for its connection to be drained (H2Drainer, where an HTTP/1.1
//     handler sets Connection: close) starts the drain sequence: a GOAWAY with the last
//     stream id 2^31-1 goes out at once, before the response's headers, so every stream the
//     client has opened or opens until it reads it is still served; DrainTimeout later a
//     second GOAWAY names the highest stream received, later streams are refused, and the
//     connection closes as soon as no stream is open (envoyproxy/envoy
//     source/common/http/conn_manager_impl.cc startDrainSequence, onDrainTimeout,
//     checkForDeferredClose; source/common/http/http2/codec_impl.cc shutdownNotice, goAway).
//     Nothing is sent on a connection that carries no request.
//   - Responses are buffered and sent whole, as Server's are.
//
// It is the test world's, like the rest of httpwire: the meshdrain binary links none of it.
type H2Server struct {
	Handler http.Handler
	// IdleTimeout closes a connection that has had no open stream this long (default 60s).
	IdleTimeout time.Duration
	// DrainTimeout is the time from a connection's first GOAWAY to its second (default 5s,
	// the connection manager's drain_timeout).
	DrainTimeout time.Duration
	// OnPanic, when set, is told of a handler's panic (other than http.ErrAbortHandler); the
	// stream is reset either way.
	OnPanic func(recovered any)

	acceptor // mu guards conns too
	conns    map[*h2Conn]struct{}
	wg       sync.WaitGroup
}

// H2Drainer is implemented by the ResponseWriter of an H2Server: StartDrain starts the
// connection's drain sequence (its first GOAWAY) if it has not started yet, and reports
// whether this call started it, so that a caller counts each drained connection once, as
// Envoy's downstream_cx_drain_close does.
type H2Drainer interface {
	StartDrain() bool
}

// The HTTP/2 client connection preface (RFC 9113 §3.4).
const h2Preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// h2MaxStreamID is the last stream id of a shutdown notice: every stream is still served.
const h2MaxStreamID = math.MaxInt32

// h2DefaultWindow is HTTP/2's initial flow-control window (RFC 9113 §6.9.2).
const h2DefaultWindow = 65535

// h2MaxFrame is the largest frame this server sends (the protocol's default maximum).
const h2MaxFrame = 16384

// Drain states of a connection, as the connection manager names them.
type h2DrainState uint8

const (
	h2NotDraining h2DrainState = iota
	h2Draining                 // first GOAWAY sent, drain timer running
	h2Closing                  // second GOAWAY sent: close once no stream is open
)

// h2Conn is one connection: a reader goroutine owns the framer's reading side; writes,
// windows and streams are guarded by mu.
type h2Conn struct {
	srv  *H2Server
	conn net.Conn
	fr   *http2.Framer
	enc  *hpack.Encoder
	hbuf bytes.Buffer

	mu         sync.Mutex
	cond       *sync.Cond // a window grew, or the connection closed
	streams    map[uint32]*h2Stream
	lastStream uint32
	drain      h2DrainState
	drainTimer *time.Timer
	sendWindow int64 // connection-level
	initWindow int64 // the peer's SETTINGS_INITIAL_WINDOW_SIZE
	closed     bool
}

// h2Stream is one request: its body until END_STREAM, then its handler.
type h2Stream struct {
	id         uint32
	req        *http.Request
	body       bytes.Buffer
	cancel     context.CancelFunc
	sendWindow int64
	reset      bool
}

// Serve accepts connections on ln until Abort or Close.
func (s *H2Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	s.init()
	s.mu.Unlock()
	return s.acceptLoop(ln, func(c net.Conn) func() {
		hc := &h2Conn{srv: s, conn: c, streams: map[uint32]*h2Stream{}, sendWindow: h2DefaultWindow, initWindow: h2DefaultWindow}
		hc.cond = sync.NewCond(&hc.mu)
		s.conns[hc] = struct{}{}
		s.wg.Add(1)
		return func() { go hc.serve() }
	})
}

func (s *H2Server) init() {
	if s.listeners == nil {
		s.listeners = map[net.Listener]struct{}{}
		s.conns = map[*h2Conn]struct{}{}
	}
}

// Close stops accepting and closes every connection at once: streams in flight are cut.
func (s *H2Server) Close() error { return s.closeAll(false) }

// Abort is Close with a TCP reset on every connection, as when a process is SIGKILLed.
func (s *H2Server) Abort() error { return s.closeAll(true) }

func (s *H2Server) closeAll(reset bool) error {
	s.mu.Lock()
	s.init()
	s.closing = true
	for ln := range s.listeners {
		ln.Close()
	}
	conns := make([]*h2Conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		if reset {
			setLingerZero(c.conn)
		}
		c.close()
	}
	return nil
}

// Wait blocks until every connection's reader has returned.
func (s *H2Server) Wait() { s.wg.Wait() }

func (s *H2Server) idleTimeout() time.Duration {
	if s.IdleTimeout > 0 {
		return s.IdleTimeout
	}
	return 60 * time.Second
}

func (s *H2Server) drainTimeout() time.Duration {
	if s.DrainTimeout > 0 {
		return s.DrainTimeout
	}
	return 5 * time.Second
}

// serve reads the connection's frames until it closes.
func (c *h2Conn) serve() {
	defer c.srv.wg.Done()
	defer func() {
		c.close()
		c.srv.mu.Lock()
		delete(c.srv.conns, c)
		c.srv.mu.Unlock()
	}()
	_ = c.conn.SetReadDeadline(time.Now().Add(c.srv.idleTimeout()))
	preface := make([]byte, len(h2Preface))
	if _, err := io.ReadFull(c.conn, preface); err != nil || string(preface) != h2Preface {
		return
	}
	c.fr = http2.NewFramer(c.conn, c.conn)
	c.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	c.fr.MaxHeaderListSize = 1 << 20
	c.enc = hpack.NewEncoder(&c.hbuf)
	c.mu.Lock()
	// Envoy's default max_concurrent_streams (2^31-1): a client never needs a second connection.
	err := c.fr.WriteSettings(http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: h2MaxStreamID})
	c.mu.Unlock()
	if err != nil {
		return
	}
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			var se http2.StreamError
			if errors.As(err, &se) {
				c.resetStream(se.StreamID, se.Code)
				continue
			}
			return // EOF, reset, idle timeout or a connection error: the connection is over
		}
		if !c.handleFrame(f) {
			return
		}
	}
}

// handleFrame acts on one frame; false ends the connection.
func (c *h2Conn) handleFrame(f http2.Frame) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch f := f.(type) {
	case *http2.MetaHeadersFrame:
		return c.openStreamLocked(f)
	case *http2.DataFrame:
		c.receiveDataLocked(f)
	case *http2.RSTStreamFrame:
		if st := c.streams[f.StreamID]; st != nil {
			st.reset = true
			if st.cancel != nil {
				st.cancel()
			}
			c.forgetLocked(st)
		}
	case *http2.SettingsFrame:
		c.applySettingsLocked(f)
	case *http2.WindowUpdateFrame:
		if f.StreamID == 0 {
			c.sendWindow += int64(f.Increment)
		} else if st := c.streams[f.StreamID]; st != nil {
			st.sendWindow += int64(f.Increment)
		}
		c.cond.Broadcast()
	case *http2.PingFrame:
		if !f.IsAck() {
			_ = c.fr.WritePing(true, f.Data)
		}
	case *http2.GoAwayFrame:
		// The client is going away; it closes the connection when it is done.
	}
	return true
}

// openStreamLocked opens the client stream a HEADERS frame starts, and dispatches it when
// the frame ends it; false ends the connection.
func (c *h2Conn) openStreamLocked(f *http2.MetaHeadersFrame) bool {
	id := f.StreamID
	if id%2 == 0 || id <= c.lastStream {
		return false // a protocol error: not a new client stream
	}
	if c.drain == h2Closing {
		// After the second GOAWAY no stream above its last stream id is processed.
		_ = c.fr.WriteRSTStream(id, http2.ErrCodeRefusedStream)
		return true
	}
	c.lastStream = id
	st := &h2Stream{id: id, sendWindow: c.initWindow}
	st.req = newH2Request(f, c.conn)
	if st.req == nil {
		_ = c.fr.WriteRSTStream(id, http2.ErrCodeProtocol)
		return true
	}
	c.streams[id] = st
	_ = c.conn.SetReadDeadline(time.Time{})
	if f.StreamEnded() {
		c.dispatch(st)
	}
	return true
}

// receiveDataLocked adds a DATA frame to its stream's body, and dispatches the stream when
// the frame ends it.
func (c *h2Conn) receiveDataLocked(f *http2.DataFrame) {
	if f.Length > 0 {
		// Give the window back at once: bodies here are small and read whole.
		_ = c.fr.WriteWindowUpdate(0, f.Length)
	}
	st := c.streams[f.StreamID]
	if st == nil || st.cancel != nil {
		return
	}
	if f.Length > 0 {
		_ = c.fr.WriteWindowUpdate(f.StreamID, f.Length)
	}
	if n := len(f.Data()); n > 0 {
		if st.body.Len()+n > maxBody {
			c.resetStreamLocked(st, http2.ErrCodeRefusedStream)
			return
		}
		st.body.Write(f.Data())
	}
	if f.StreamEnded() {
		c.dispatch(st)
	}
}

// applySettingsLocked applies the client's SETTINGS (only its initial window matters to
// what this server sends) and acknowledges them.
func (c *h2Conn) applySettingsLocked(f *http2.SettingsFrame) {
	if f.IsAck() {
		return
	}
	if v, ok := f.Value(http2.SettingInitialWindowSize); ok {
		delta := int64(v) - c.initWindow
		c.initWindow = int64(v)
		for _, st := range c.streams {
			st.sendWindow += delta
		}
		c.cond.Broadcast()
	}
	_ = c.fr.WriteSettingsAck()
}

// newH2Request builds the request of a HEADERS frame; nil if its pseudo-headers are wrong.
func newH2Request(f *http2.MetaHeadersFrame, conn net.Conn) *http.Request {
	method, path, authority := f.PseudoValue("method"), f.PseudoValue("path"), f.PseudoValue("authority")
	if method == "" || path == "" {
		return nil
	}
	req, err := http.NewRequest(method, "http://"+authority+path, nil)
	if err != nil {
		return nil
	}
	req.Proto, req.ProtoMajor, req.ProtoMinor = "HTTP/2.0", 2, 0
	req.RequestURI, req.Host, req.RemoteAddr = path, authority, conn.RemoteAddr().String()
	for _, hf := range f.RegularFields() {
		req.Header.Add(hf.Name, hf.Value)
	}
	if cl := req.Header.Get("Content-Length"); cl != "" {
		req.ContentLength, _ = strconv.ParseInt(cl, 10, 64)
	}
	return req
}

// dispatch runs the handler of a stream whose request is complete; c.mu is held.
func (c *h2Conn) dispatch(st *h2Stream) {
	ctx, cancel := context.WithCancel(context.Background())
	ctx = context.WithValue(ctx, http.LocalAddrContextKey, c.conn.LocalAddr())
	st.cancel = cancel
	req := st.req.WithContext(ctx)
	req.Body = io.NopCloser(bytes.NewReader(st.body.Bytes()))
	if st.body.Len() == 0 {
		req.Body = http.NoBody
	}
	go c.runHandler(st, req)
}

func (c *h2Conn) runHandler(st *h2Stream, req *http.Request) {
	w := &h2ResponseWriter{c: c, header: http.Header{}}
	if c.callHandler(w, req) {
		c.mu.Lock()
		if !st.reset && !c.closed {
			c.resetStreamLocked(st, http2.ErrCodeInternal)
		}
		c.mu.Unlock()
		return
	}
	c.writeResponse(st, w)
}

// callHandler runs the handler and reports whether it panicked (http.ErrAbortHandler
// included): the stream is then reset, as Envoy resets a downstream stream whose upstream
// reset mid-response.
func (c *h2Conn) callHandler(w *h2ResponseWriter, req *http.Request) (aborted bool) {
	defer func() {
		if r := recover(); r != nil {
			if r != http.ErrAbortHandler && c.srv.OnPanic != nil {
				c.srv.OnPanic(r)
			}
			aborted = true
		}
	}()
	c.srv.Handler.ServeHTTP(w, req)
	return false
}

// h2HopHeaders are connection-specific: HTTP/2 forbids them (RFC 9113 §8.2.2).
var h2HopHeaders = []string{"Connection", "Keep-Alive", "Proxy-Connection", "Transfer-Encoding", "Upgrade"}

// writeResponse sends a finished handler's response: HEADERS, then DATA within the windows.
func (c *h2Conn) writeResponse(st *h2Stream, w *h2ResponseWriter) {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	for _, h := range h2HopHeaders {
		w.header.Del(h)
	}
	body := w.body.Bytes()
	c.mu.Lock()
	defer c.mu.Unlock()
	if st.reset || c.closed {
		return
	}
	c.hbuf.Reset()
	_ = c.enc.WriteField(hpack.HeaderField{Name: ":status", Value: strconv.Itoa(w.status)})
	for k, vs := range w.header {
		if k == "Content-Length" {
			continue
		}
		for _, v := range vs {
			_ = c.enc.WriteField(hpack.HeaderField{Name: strings.ToLower(k), Value: v})
		}
	}
	_ = c.enc.WriteField(hpack.HeaderField{Name: "content-length", Value: strconv.Itoa(len(body))})
	block := c.hbuf.Bytes()
	first := block[:min(len(block), h2MaxFrame)]
	if err := c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: st.id, BlockFragment: first, EndStream: len(body) == 0, EndHeaders: len(first) == len(block)}); err != nil {
		return
	}
	for rest := block[len(first):]; len(rest) > 0; {
		n := min(len(rest), h2MaxFrame)
		if err := c.fr.WriteContinuation(st.id, n == len(rest), rest[:n]); err != nil {
			return
		}
		rest = rest[n:]
	}
	for len(body) > 0 {
		for (c.sendWindow <= 0 || st.sendWindow <= 0) && !st.reset && !c.closed {
			c.cond.Wait()
		}
		if st.reset || c.closed {
			return
		}
		n := int(min(int64(len(body)), int64(h2MaxFrame), c.sendWindow, st.sendWindow))
		if err := c.fr.WriteData(st.id, n == len(body), body[:n]); err != nil {
			return
		}
		c.sendWindow -= int64(n)
		st.sendWindow -= int64(n)
		body = body[n:]
	}
	c.forgetLocked(st)
}

// resetStream resets a stream the framer rejected.
func (c *h2Conn) resetStream(id uint32, code http2.ErrCode) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if st := c.streams[id]; st != nil {
		c.resetStreamLocked(st, code)
		return
	}
	_ = c.fr.WriteRSTStream(id, code)
}

func (c *h2Conn) resetStreamLocked(st *h2Stream, code http2.ErrCode) {
	st.reset = true
	if st.cancel != nil {
		st.cancel()
	}
	_ = c.fr.WriteRSTStream(st.id, code)
	c.forgetLocked(st)
}

// forgetLocked ends a stream; a closing connection with no stream left closes, an idle one
// waits for its next stream no longer than the idle timeout.
func (c *h2Conn) forgetLocked(st *h2Stream) {
	if _, ok := c.streams[st.id]; !ok {
		return
	}
	delete(c.streams, st.id)
	if st.cancel != nil {
		st.cancel()
	}
	if len(c.streams) > 0 {
		return
	}
	if c.drain == h2Closing {
		c.closeLocked()
		return
	}
	_ = c.conn.SetReadDeadline(time.Now().Add(c.srv.idleTimeout()))
}

// startDrain sends the shutdown notice and starts the drain timer; c.mu is held.
func (c *h2Conn) startDrain() bool {
	if c.drain != h2NotDraining || c.closed {
		return false
	}
	c.drain = h2Draining
	_ = c.fr.WriteGoAway(h2MaxStreamID, http2.ErrCodeNo, nil)
	c.drainTimer = time.AfterFunc(c.srv.drainTimeout(), c.onDrainTimeout)
	return true
}

// onDrainTimeout sends the second GOAWAY, naming the last stream received, and closes the
// connection if no stream is open.
func (c *h2Conn) onDrainTimeout() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	c.drain = h2Closing
	_ = c.fr.WriteGoAway(c.lastStream, http2.ErrCodeNo, nil)
	if len(c.streams) == 0 {
		c.closeLocked()
	}
}

func (c *h2Conn) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closeLocked()
}

// closeLocked closes the socket and cancels every stream; c.mu is held.
func (c *h2Conn) closeLocked() {
	if c.closed {
		return
	}
	c.closed = true
	if c.drainTimer != nil {
		c.drainTimer.Stop()
	}
	for _, st := range c.streams {
		if st.cancel != nil {
			st.cancel()
		}
	}
	c.cond.Broadcast()
	_ = c.conn.Close()
}

// h2ResponseWriter buffers one stream's response.
type h2ResponseWriter struct {
	c           *h2Conn
	header      http.Header
	status      int
	body        bytes.Buffer
	wroteHeader bool
}

func (w *h2ResponseWriter) Header() http.Header { return w.header }

func (w *h2ResponseWriter) WriteHeader(code int) {
	if w.wroteHeader {
		return
	}
	w.wroteHeader, w.status = true, code
}

func (w *h2ResponseWriter) Write(p []byte) (int, error) {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	return w.body.Write(p)
}

// Flush is accepted for handlers that stream; the response still goes out whole.
func (w *h2ResponseWriter) Flush() {}

// StartDrain is H2Drainer's: the connection's first GOAWAY goes out now, before this
// response's headers.
func (w *h2ResponseWriter) StartDrain() bool {
	w.c.mu.Lock()
	defer w.c.mu.Unlock()
	return w.c.startDrain()
}
