package envoysim

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/meshdrain/meshdrain/pkg/sim/httpwire"
)

// Envoy's local reply bodies for upstream failures (as seen by clients).
const (
	bodyConnectFailure     = "upstream connect error or disconnect/reset before headers. reset reason: connection failure"
	bodyConnectTermination = "upstream connect error or disconnect/reset before headers. reset reason: connection termination"
)

// hcmIdleTimeout is the HTTP connection manager's default idle_timeout for downstream
// connections.
const hcmIdleTimeout = time.Hour

// errConnectFailure marks a failed connection to the app (response flag UF).
var errConnectFailure = errors.New("upstream connection failure")

// inboundListener is one inbound port: a real listener that proxies HTTP/1.1 to the app and
// counts like Envoy's inbound listener, HTTP connection manager and inbound cluster. Its
// clients speak HTTP/1.1 to it, or HTTP/2 on a grpc port.
type inboundListener struct {
	s        *Sidecar
	port     InboundPort // with its stat names filled
	addr     string
	ln       net.Listener
	srv      inboundServer
	upstream *httpwire.Client
	listener *listenerStats

	stopOnce sync.Once
	serveErr chan error

	// http.<prefix>.*; cxProtoTotal, cxProtoActive and rqProtoTotal are the http1 or http2
	// ones, as the port's clients speak.
	cxTotal, cxActive, cxProtoTotal, cxProtoActive, cxDestroy, cxDrainClose *stat
	rqTotal, rqProtoTotal, rqActive, rqCompleted, rqRxReset                 *stat
	rqClass                                                                 [6]*stat
	rqTime                                                                  *stat
	// cluster.<name>.*
	upCxTotal, upCxActive, upCxConnectFail, upCxDestroy *stat
	upRqTotal, upRqActive, upRqCompleted, upRqCancelled *stat
	upRqPendingTotal, upRqPendingFailure, upRqRxReset   *stat
	upRqClass                                           [6]*stat
	upRqTime                                            *stat
	membershipHealthy, membershipTotal                  *stat
}

func startInbound(s *Sidecar, port InboundPort) (*inboundListener, error) {
	ln, err := listenAddr(port.ListenAddr)
	if err != nil {
		return nil, fmt.Errorf("inbound port %d: %w", port.Port, err)
	}
	l := &inboundListener{s: s, port: port, addr: ln.Addr().String(), serveErr: make(chan error, 1)}
	l.createStats()
	l.upstream = &httpwire.Client{
		Dial:           func(ctx context.Context, _ string) (net.Conn, error) { return l.dialApp(ctx, "tcp", "") },
		MaxIdlePerHost: 1024,
		// Envoy's inbound cluster has no retry policy: a request sent on a keep-alive
		// connection the app had just closed fails with 503 UC, it is not re-sent.
		NoStaleRetry: true,
	}
	l.ln = &countingListener{Listener: ln, l: l}
	if port.Protocol == ProtocolGRPC {
		l.srv = &httpwire.H2Server{
			Handler:     l,
			IdleTimeout: hcmIdleTimeout,
			// The drain's first GOAWAY goes with the next response, the second one and the
			// close a drain_timeout later (docs/facts.md §6b).
			DrainTimeout: s.cfg.HCMDrainTimeout,
			OnPanic:      func(r any) { s.log.Error("inbound handler panic", zap.String("panic", fmt.Sprint(r))) },
		}
		go func() { l.serveErr <- l.srv.Serve(l.ln) }()
		return l, nil
	}
	l.srv = &httpwire.Server{
		Handler: l,
		// Envoy's HTTP connection manager keeps an idle downstream connection for its
		// idle_timeout, 1 h by default (common_http_protocol_options; envoyproxy.io "How do I
		// configure timeouts?"), and a drain does not close it: only a connection that carries
		// a request is told (Connection: close), envoyproxy/envoy#14350.
		IdleTimeout: hcmIdleTimeout,
		// After that Connection: close the connection waits for the client to close it first,
		// closed from this side only at the drain_timeout (conn_manager_impl.cc
		// startDrainSequence, onDrainTimeout).
		DrainCloseTimeout: s.cfg.HCMDrainTimeout,
		// zap.String, not zap.Any: Any links every field constructor, 160 KB of the binary.
		OnPanic: func(r any) { s.log.Error("inbound handler panic", zap.String("panic", fmt.Sprint(r))) },
	}
	go func() { l.serveErr <- l.srv.Serve(l.ln) }()
	return l, nil
}

// inboundServer is the port's HTTP server: HTTP/1.1, or HTTP/2 on a grpc port.
type inboundServer interface {
	Serve(net.Listener) error
	Abort() error
}

func (l *inboundListener) createStats() {
	st, n := l.s.store, l.s.names
	h := func(stat string) string { return n.http(l.port.HTTPPrefix, stat) }
	c := func(stat string) string { return n.cluster(l.port.ClusterName, stat) }
	proto := "http1"
	if l.port.Protocol == ProtocolGRPC {
		proto = "http2"
	}
	l.cxTotal, l.cxActive = st.counter(h("downstream_cx_total")), st.gauge(h("downstream_cx_active"))
	l.cxProtoTotal, l.cxProtoActive = st.counter(h("downstream_cx_"+proto+"_total")), st.gauge(h("downstream_cx_"+proto+"_active"))
	l.cxDestroy, l.cxDrainClose = st.counter(h("downstream_cx_destroy")), st.counter(h("downstream_cx_drain_close"))
	l.rqTotal, l.rqProtoTotal = st.counter(h("downstream_rq_total")), st.counter(h("downstream_rq_"+proto+"_total"))
	l.rqActive, l.rqCompleted = st.gauge(h("downstream_rq_active")), st.counter(h("downstream_rq_completed"))
	l.rqRxReset = st.counter(h("downstream_rq_rx_reset"))
	l.rqTime = st.histogram(h("downstream_rq_time"))
	for class := 1; class <= 5; class++ {
		l.rqClass[class] = st.counter(h(fmt.Sprintf("downstream_rq_%dxx", class)))
	}
	l.upCxTotal, l.upCxActive = st.counter(c("upstream_cx_total")), st.gauge(c("upstream_cx_active"))
	l.upCxConnectFail, l.upCxDestroy = st.counter(c("upstream_cx_connect_fail")), st.counter(c("upstream_cx_destroy"))
	l.upRqTotal, l.upRqActive = st.counter(c("upstream_rq_total")), st.gauge(c("upstream_rq_active"))
	l.upRqCompleted, l.upRqCancelled = st.counter(c("upstream_rq_completed")), st.counter(c("upstream_rq_cancelled"))
	l.upRqPendingTotal = st.counter(c("upstream_rq_pending_total"))
	l.upRqPendingFailure = st.counter(c("upstream_rq_pending_failure_eject"))
	l.upRqRxReset = st.counter(c("upstream_rq_rx_reset"))
	l.upRqTime = st.histogram(c("upstream_rq_time"))
	for class := 1; class <= 5; class++ {
		l.upRqClass[class] = st.counter(c(fmt.Sprintf("upstream_rq_%dxx", class)))
	}
	l.createFailureStats()
	l.membershipHealthy, l.membershipTotal = st.gauge(c("membership_healthy")), st.gauge(c("membership_total"))
	l.membershipHealthy.set(1)
	l.membershipTotal.set(1)
	l.s.mu.Lock()
	l.listener = l.s.listenerStats(l.port.ListenerAddress)
	l.s.mu.Unlock()
}

// stopListening closes the listening socket only: Envoy's stopListeners.
func (l *inboundListener) stopListening() {
	l.stopOnce.Do(func() { _ = l.ln.Close() })
}

// close closes the listener and every connection, cutting requests in flight.
func (l *inboundListener) close() {
	l.stopListening()
	_ = l.srv.Abort()
	l.upstream.CloseIdle()
}

// countingListener counts accepted connections on the listener, its worker and the HTTP
// connection manager, and their closing.
type countingListener struct {
	net.Listener
	l *inboundListener
}

func (cl *countingListener) Accept() (net.Conn, error) {
	conn, err := cl.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l := cl.l
	active := l.listener.accepted()
	stats{l.cxTotal, l.cxProtoTotal}.inc()
	active = append(active, l.cxActive, l.cxProtoActive)
	stats{l.cxActive, l.cxProtoActive}.inc()
	l.s.server.totalConnections.inc()
	return &countedConn{Conn: conn, onClose: func() {
		active.dec()
		l.s.server.totalConnections.dec()
		l.cxDestroy.inc()
		l.listener.cxDestroy.inc()
	}}, nil
}

// countedConn runs onClose once, when the connection closes.
type countedConn struct {
	net.Conn
	once    sync.Once
	onClose func()
}

// NetConn exposes the socket, so a killed Envoy can reset it.
func (c *countedConn) NetConn() net.Conn { return c.Conn }

func (c *countedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.onClose)
	return err
}

// dialApp connects to the app, counting the upstream connection like Envoy's cluster.
func (l *inboundListener) dialApp(ctx context.Context, network, _ string) (net.Conn, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, network, l.port.AppAddr)
	if err != nil {
		if ctx.Err() == nil {
			l.upCxConnectFail.inc()
			l.upCxTotal.inc()
		}
		return nil, fmt.Errorf("%w: %w", errConnectFailure, err)
	}
	l.upCxTotal.inc()
	l.upCxActive.inc()
	return &countedConn{Conn: conn, onClose: func() {
		l.upCxActive.dec()
		l.upCxDestroy.inc()
	}}, nil
}

// hopHeaders are not forwarded (RFC 9110 §7.6.1).
var hopHeaders = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// ServeHTTP is the HTTP connection manager and router of the inbound port.
func (l *inboundListener) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	l.rqTotal.inc()
	l.rqProtoTotal.inc()
	l.rqActive.inc()
	entry := AccessLogEntry{Start: start, Port: l.port.Port, Method: r.Method, Path: r.URL.RequestURI(), Flags: "-"}
	defer func() {
		l.rqActive.dec()
		entry.Duration = time.Since(start)
		l.rqTime.record(float64(entry.Duration.Milliseconds()))
		l.s.logRequest(entry, l)
	}()

	out := l.toApp(r)
	l.upRqPendingTotal.inc()
	up := &upstreamRq{l: l, start: time.Now()}
	resp, err := l.upstream.Do(out.WithContext(httpwire.WithGotConn(r.Context(), up.gotConn)))
	if err != nil {
		l.upstreamFailed(w, r, err, &entry, up)
		return
	}
	defer resp.Body.Close()
	l.relay(w, r, resp, &entry, up)
}

// toApp is the request as the router forwards it to the app.
func (l *inboundListener) toApp(r *http.Request) *http.Request {
	out := r.Clone(r.Context())
	out.URL.Scheme, out.URL.Host, out.RequestURI = "http", l.port.AppAddr, ""
	for _, h := range hopHeaders {
		out.Header.Del(h)
	}
	if out.Header.Get("X-Request-Id") == "" {
		out.Header.Set("X-Request-Id", requestID())
	}
	out.Header.Set("X-Forwarded-Proto", "http")
	if r.ContentLength == 0 {
		out.Body = nil
	}
	return out
}

// upstreamRq is one request to the app as the upstream stats count it: pending until it has
// a connection, then active until it is finished.
type upstreamRq struct {
	l        *inboundListener
	start    time.Time
	attached atomic.Bool
}

func (u *upstreamRq) gotConn(bool) {
	if u.attached.CompareAndSwap(false, true) {
		u.l.upRqTotal.inc()
		u.l.upRqActive.inc()
	}
}

// finish ends the request, charging code (0: none, the client went away) to the cluster.
func (u *upstreamRq) finish(code int) {
	if u.attached.CompareAndSwap(true, false) {
		u.l.upRqActive.dec()
	}
	if code > 0 {
		u.l.chargeUpstream(code)
		u.l.upRqTime.record(float64(time.Since(u.start).Milliseconds()))
	}
}

// upstreamFailed answers a request the app did not answer: nothing when the client went away
// first, else Envoy's 503 for a refused connection (UF) or a reset one (UC).
func (l *inboundListener) upstreamFailed(w http.ResponseWriter, r *http.Request, err error, entry *AccessLogEntry, up *upstreamRq) {
	switch {
	case r.Context().Err() != nil:
		// The client went away first: no response at all.
		entry.Flags, entry.Code = "DC", 0
		l.rqRxReset.inc()
		l.upRqCancelled.inc()
		up.finish(0)
	case errors.Is(err, errConnectFailure):
		entry.Flags = "UF"
		l.upRqPendingFailure.inc()
		up.finish(http.StatusServiceUnavailable)
		entry.Code, entry.Body = l.localReply(w, http.StatusServiceUnavailable, bodyConnectFailure)
	default:
		entry.Flags = "UC"
		l.chargeConnectionTermination()
		up.finish(http.StatusServiceUnavailable)
		entry.Code, entry.Body = l.localReply(w, http.StatusServiceUnavailable, bodyConnectTermination)
	}
}

// relay sends the app's response on to the client. An app that resets mid-body makes Envoy
// reset the client's stream too: relay then aborts the handler.
func (l *inboundListener) relay(w http.ResponseWriter, r *http.Request, resp *http.Response, entry *AccessLogEntry, up *upstreamRq) {
	for k, vs := range resp.Header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	for _, h := range hopHeaders {
		w.Header().Del(h)
	}
	w.Header().Set("X-Envoy-Upstream-Service-Time", strconv.FormatInt(time.Since(up.start).Milliseconds(), 10))
	l.setServerHeader(w)
	l.maybeDrainClose(w)
	w.WriteHeader(resp.StatusCode)
	entry.Code = resp.StatusCode
	if _, err := copyFlushing(w, resp.Body); err != nil {
		up.finish(resp.StatusCode)
		if r.Context().Err() != nil {
			entry.Flags = "DC"
			l.rqRxReset.inc()
			return
		}
		// The app reset mid-body: Envoy resets the downstream stream too.
		entry.Flags = "UC"
		l.chargeConnectionTermination()
		l.chargeDownstream(resp.StatusCode)
		// The deferred access log still runs.
		panic(http.ErrAbortHandler)
	}
	up.finish(resp.StatusCode)
	l.chargeDownstream(resp.StatusCode)
}

// localReply writes an Envoy-generated response (text/plain, with Envoy's body) and returns
// the code and body for the access log.
func (l *inboundListener) localReply(w http.ResponseWriter, code int, body string) (int, string) {
	w.Header().Set("Content-Type", "text/plain")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	l.setServerHeader(w)
	l.maybeDrainClose(w)
	w.WriteHeader(code)
	_, _ = io.WriteString(w, body)
	l.chargeDownstream(code)
	return code, body
}

func (l *inboundListener) setServerHeader(w http.ResponseWriter) {
	if l.s.cfg.Profile.istio() {
		w.Header().Set("Server", "istio-envoy")
	} else {
		w.Header().Set("Server", "envoy")
	}
}

// maybeDrainClose adds Connection: close when the drain manager says so (HTTP/1.1); the
// connection then closes when the client closes it, or at the drain timeout. On HTTP/2 it
// starts the connection's drain sequence instead, once: a GOAWAY before this response.
func (l *inboundListener) maybeDrainClose(w http.ResponseWriter) {
	if !l.s.drainClose() {
		return
	}
	if d, ok := w.(httpwire.H2Drainer); ok {
		if d.StartDrain() {
			l.cxDrainClose.inc()
		}
		return
	}
	w.Header().Set("Connection", "close")
	l.cxDrainClose.inc()
}

func (l *inboundListener) chargeDownstream(code int) {
	l.rqCompleted.inc()
	if class := code / 100; class >= 1 && class <= 5 {
		l.rqClass[class].inc()
	}
}

func (l *inboundListener) chargeUpstream(code int) {
	l.upRqCompleted.inc()
	if class := code / 100; class >= 1 && class <= 5 {
		l.upRqClass[class].inc()
	}
	l.s.store.counter(l.s.names.cluster(l.port.ClusterName, fmt.Sprintf("upstream_rq_%d", code))).inc()
}

// copyFlushing copies the app's body to the client, flushing so that streaming works.
func copyFlushing(w http.ResponseWriter, body io.Reader) (int64, error) {
	flusher, _ := w.(http.Flusher)
	buf := make([]byte, 32*1024)
	var written int64
	for {
		n, err := body.Read(buf)
		if n > 0 {
			m, werr := w.Write(buf[:n])
			written += int64(m)
			if werr != nil {
				return written, werr
			}
			if flusher != nil {
				flusher.Flush()
			}
		}
		if errors.Is(err, io.EOF) {
			return written, nil
		}
		if err != nil {
			return written, err
		}
	}
}

func requestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// randFloat is a uniform float in [0, 1) for the gradual drain's coin.
func randFloat() float64 {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return float64(binary.BigEndian.Uint64(b[:])>>11) / (1 << 53)
}
