package linkerdsim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/meshdrain/meshdrain/pkg/sim/httpwire"
)

// errConnectApp marks a failed connection to the app.
var errConnectApp = errors.New("connection to the app failed")

// AccessLogEntry is one request through an inbound port, for the simulator's report. (The
// real proxy logs requests only with LINKERD2_PROXY_ACCESS_LOG; this is the emulator's own
// record.)
type AccessLogEntry struct {
	Start    time.Time
	Duration time.Duration
	Port     int
	Method   string
	Path     string
	Route    string // "default" or "probe"
	// Code is the status the client got; 0 when it got none (it went away first, or the
	// proxy cut the connection).
	Code int
	// ProxyError is set when the proxy answered for the app (l5d-proxy-error): the app
	// refused the connection or reset it. Empty for the app's own answers.
	ProxyError string
	// AppRefused tells a refused connection (nothing reached the app) from a reset one.
	AppRefused bool
}

// inboundListener is one inbound port: a real listener that proxies HTTP/1.1 to the app and
// counts like the proxy's inbound stack.
type inboundListener struct {
	s        *Sidecar
	port     InboundPort
	addr     string
	srv      *httpwire.Server
	upstream *httpwire.Client
	connLbls string // tcp_* labels of client connections
}

func startInbound(s *Sidecar, port InboundPort) (*inboundListener, error) {
	ln, err := net.Listen("tcp", port.ListenAddr)
	if err != nil {
		return nil, fmt.Errorf("inbound port %d: listen on %s: %w", port.Port, port.ListenAddr, err)
	}
	l := &inboundListener{s: s, port: port, addr: ln.Addr().String(),
		connLbls: s.labels.clientConn(s.cfg.PodIP, port.Port)}
	l.upstream = &httpwire.Client{
		Dial:           func(ctx context.Context, _ string) (net.Conn, error) { return l.dialApp(ctx) },
		MaxIdlePerHost: 1024,
	}
	l.srv = &httpwire.Server{Handler: l, OnPanic: func(r any) { s.log.Error("inbound handler panic", zap.String("panic", fmt.Sprint(r))) }}
	counted := &countingListener{Listener: ln, reg: s.metrics, labels: l.connLbls}
	go func() { _ = l.srv.Serve(counted) }()
	return l, nil
}

// dialApp connects to the app, counted as the proxy's own inbound connection (peer="dst").
func (l *inboundListener) dialApp(ctx context.Context) (net.Conn, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", l.port.AppAddr)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errConnectApp, err)
	}
	reg := l.s.metrics
	reg.add(reg.tcpOpened, appConn, 1)
	reg.add(reg.tcpOpen, appConn, 1)
	return newCountedConn(conn, reg, appConn), nil
}

// hopHeaders are not forwarded (RFC 9110 §7.6.1).
var hopHeaders = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// ServeHTTP is the inbound HTTP stack of the port. request_total counts the request as it
// starts; response_total counts it when its response ends or it fails; a request the client
// abandons before the response is counted in neither response_total nor anywhere else, as in
// linkerd/http/metrics/src/requests/service.rs (the response future is dropped unrecorded).
func (l *inboundListener) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	route := "default"
	if slices.Contains(l.s.cfg.ProbePaths, r.URL.Path) {
		route = "probe"
	}
	reg := l.s.metrics
	endpoint := l.s.labels.endpoint(l.s.cfg.PodIP, l.port.Port, route)
	reg.add(reg.requests, endpoint, 1)
	reg.add(reg.routeRequests, routeRequest(l.port.Port, route), 1)
	entry := AccessLogEntry{Start: start, Port: l.port.Port, Method: r.Method, Path: r.URL.RequestURI(), Route: route}
	defer func() {
		entry.Duration = time.Since(start)
		l.s.logRequest(entry)
	}()

	out := r.Clone(r.Context())
	out.URL.Scheme, out.URL.Host, out.RequestURI = "http", l.port.AppAddr, ""
	for _, h := range hopHeaders {
		out.Header.Del(h)
	}
	if r.ContentLength == 0 {
		out.Body = nil
	}
	resp, err := l.upstream.Do(out)
	if err != nil {
		if r.Context().Err() != nil {
			return // the client went away first: no response, nothing recorded
		}
		entry.AppRefused = errors.Is(err, errConnectApp)
		entry.ProxyError = "connection closed before message completed"
		if entry.AppRefused {
			entry.ProxyError = "connection refused"
		}
		// The proxy turns an I/O error reaching the app into a 502 inside its HTTP metrics
		// layer, which records it as a response like the app's own (linkerd2-proxy
		// linkerd/app/inbound/src/http/router.rs: ClientRescue, pushed below http_endpoint
		// metrics "so that we can report 5XX failures in tap and metrics").
		entry.Code = l.proxyError(w, entry.ProxyError)
		reg.add(reg.responses, response(endpoint, entry.Code, false, ""), 1)
		return
	}
	defer resp.Body.Close()
	for k, vs := range resp.Header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	for _, h := range hopHeaders {
		w.Header().Del(h)
	}
	w.WriteHeader(resp.StatusCode)
	entry.Code = resp.StatusCode
	firstByte := time.Since(start)
	_, err = io.Copy(w, resp.Body)
	reg.observe(reg.latency, latency(endpoint, resp.StatusCode), float64(firstByte.Milliseconds()))
	if err != nil {
		// The app reset mid-body: the response ends in an error, still counted once with
		// its status, and the client's connection is cut.
		reg.add(reg.responses, response(endpoint, resp.StatusCode, true, "response body error"), 1)
		entry.ProxyError, entry.Code = "response body error", 0
		panic(http.ErrAbortHandler)
	}
	reg.add(reg.responses, response(endpoint, resp.StatusCode, false, ""), 1)
}

// proxyError answers for the app as the proxy does: 502 with the error in l5d-proxy-error
// (to meshed clients) and the connection closed (errors/respond.rs bad_gateway).
func (l *inboundListener) proxyError(w http.ResponseWriter, msg string) int {
	if l.s.cfg.ClientID != "" {
		w.Header().Set("l5d-proxy-error", msg)
		w.Header().Set("l5d-proxy-connection", "close")
	}
	w.Header().Set("Content-Length", "0")
	w.Header().Set("Connection", "close")
	w.WriteHeader(http.StatusBadGateway)
	return http.StatusBadGateway
}

// countingListener counts accepted client connections (peer="src") and their closing.
type countingListener struct {
	net.Listener
	reg    *registry
	labels string
}

func (cl *countingListener) Accept() (net.Conn, error) {
	conn, err := cl.Listener.Accept()
	if err != nil {
		return nil, err
	}
	cl.reg.add(cl.reg.tcpOpened, cl.labels, 1)
	cl.reg.add(cl.reg.tcpOpen, cl.labels, 1)
	return newCountedConn(conn, cl.reg, cl.labels), nil
}

// countedConn updates the transport metrics of one connection: bytes and the close are
// recorded when it closes, as the proxy's sensor does.
type countedConn struct {
	net.Conn
	reg         *registry
	labels      string
	mu          sync.Mutex
	read, wrote int64
	once        sync.Once
}

func newCountedConn(c net.Conn, reg *registry, labels string) *countedConn {
	return &countedConn{Conn: c, reg: reg, labels: labels}
}

// NetConn exposes the socket, so an exiting proxy can reset it.
func (c *countedConn) NetConn() net.Conn { return c.Conn }

func (c *countedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.mu.Lock()
	c.read += int64(n)
	c.mu.Unlock()
	return n, err
}

func (c *countedConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.mu.Lock()
	c.wrote += int64(n)
	c.mu.Unlock()
	return n, err
}

func (c *countedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.mu.Lock()
		read, wrote := c.read, c.wrote
		c.mu.Unlock()
		c.reg.add(c.reg.tcpOpen, c.labels, -1)
		c.reg.add(c.reg.tcpReadBytes, c.labels, float64(read))
		c.reg.add(c.reg.tcpWriteBytes, c.labels, float64(wrote))
		c.reg.add(c.reg.tcpClosed, closed(c.labels), 1)
	})
	return err
}

// portOf returns the port of a host:port.
func portOf(addr string) (string, int) {
	host, portText, err := net.SplitHostPort(addr)
	if err != nil {
		return addr, 0
	}
	p, _ := strconv.Atoi(portText)
	return host, p
}
