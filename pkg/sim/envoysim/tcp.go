package envoysim

import (
	"context"
	"net"
	"sync"
	"time"
)

// inboundSocket is one inbound port's listener: an HTTP connection manager or a TCP proxy.
type inboundSocket interface {
	target() InboundPort
	address() string
	// stopListening closes the listening socket only (Envoy's stopListeners).
	stopListening()
	// close closes the listener and every connection, cutting what is in flight.
	close()
}

func (l *inboundListener) target() InboundPort { return l.port }
func (l *inboundListener) address() string     { return l.addr }

// tcpConnectTimeout is Istio's default cluster connect timeout.
const tcpConnectTimeout = 10 * time.Second

// tcpListener is an inbound port whose filter chain is a tcp_proxy (a port Istio does not
// know as HTTP): Envoy pipes bytes to the app and sees only connections. It counts like
// Envoy: tcp.<prefix>.downstream_cx_total and the byte counters; the inbound cluster's
// upstream_cx_*; and, because the TCP connection pool hands out one "stream" per proxied
// connection, upstream_rq_total/upstream_rq_active once per connection, active until it closes
// (source/common/conn_pool/conn_pool_base.cc attachStreamToClient, onStreamClosed).
type tcpListener struct {
	s        *Sidecar
	port     InboundPort
	addr     string
	ln       net.Listener
	listener *listenerStats

	stopOnce sync.Once
	mu       sync.Mutex
	conns    map[net.Conn]struct{}
	closed   bool
	ctx      context.Context
	cancel   context.CancelFunc

	// tcp.<prefix>.*
	cxTotal, cxNoRoute, rxBytes, txBytes, idleTimeout, flushTotal *stat
	flushActive                                                   *stat
	// cluster.<name>.*
	upCxTotal, upCxActive, upCxConnectFail, upCxDestroy *stat
	upRqTotal, upRqActive                               *stat
	membershipHealthy, membershipTotal                  *stat
}

func startTCP(s *Sidecar, port InboundPort) (*tcpListener, error) {
	ln, err := listenAddr(port.ListenAddr)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	t := &tcpListener{s: s, port: port, addr: ln.Addr().String(), ln: ln, conns: map[net.Conn]struct{}{}, ctx: ctx, cancel: cancel}
	st, n := s.store, s.names
	tcp := func(stat string) string { return n.tcp(port.TCPPrefix, stat) }
	c := func(stat string) string { return n.cluster(port.ClusterName, stat) }
	t.cxTotal, t.cxNoRoute = st.counter(tcp("downstream_cx_total")), st.counter(tcp("downstream_cx_no_route"))
	t.rxBytes, t.txBytes = st.counter(tcp("downstream_cx_rx_bytes_total")), st.counter(tcp("downstream_cx_tx_bytes_total"))
	t.idleTimeout, t.flushTotal = st.counter(tcp("idle_timeout")), st.counter(tcp("upstream_flush_total"))
	t.flushActive = st.gauge(tcp("upstream_flush_active"))
	t.upCxTotal, t.upCxActive = st.counter(c("upstream_cx_total")), st.gauge(c("upstream_cx_active"))
	t.upCxConnectFail, t.upCxDestroy = st.counter(c("upstream_cx_connect_fail")), st.counter(c("upstream_cx_destroy"))
	t.upRqTotal, t.upRqActive = st.counter(c("upstream_rq_total")), st.gauge(c("upstream_rq_active"))
	t.membershipHealthy, t.membershipTotal = st.gauge(c("membership_healthy")), st.gauge(c("membership_total"))
	t.membershipHealthy.set(1)
	t.membershipTotal.set(1)
	t.flushActive.set(0)
	s.mu.Lock()
	t.listener = s.listenerStats(port.ListenerAddress)
	s.mu.Unlock()
	go t.serve()
	return t, nil
}

func (t *tcpListener) target() InboundPort { return t.port }
func (t *tcpListener) address() string     { return t.addr }

func (t *tcpListener) stopListening() { t.stopOnce.Do(func() { _ = t.ln.Close() }) }

func (t *tcpListener) close() {
	t.stopListening()
	t.cancel()
	t.mu.Lock()
	t.closed = true
	conns := make([]net.Conn, 0, len(t.conns))
	for c := range t.conns {
		conns = append(conns, c)
	}
	t.mu.Unlock()
	for _, c := range conns {
		// A dying Envoy resets its connections rather than closing them cleanly.
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
		_ = c.Close()
	}
}

// track registers a connection to cut on close; false when the listener is closed.
func (t *tcpListener) track(c net.Conn) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return false
	}
	t.conns[c] = struct{}{}
	return true
}

func (t *tcpListener) untrack(c net.Conn) {
	t.mu.Lock()
	delete(t.conns, c)
	t.mu.Unlock()
}

func (t *tcpListener) serve() {
	for {
		conn, err := t.ln.Accept()
		if err != nil {
			return
		}
		go t.proxy(conn)
	}
}

// proxy is one downstream connection: connect to the app, pipe both ways until either side
// closes, then close the other.
func (t *tcpListener) proxy(down net.Conn) {
	start := time.Now()
	active := t.listener.accepted()
	t.cxTotal.inc()
	t.s.server.totalConnections.inc()
	defer func() {
		active.dec()
		t.s.server.totalConnections.dec()
		t.listener.cxDestroy.inc()
	}()
	entry := AccessLogEntry{Start: start, Port: t.port.Port, Flags: "-"}
	defer func() {
		entry.Duration = time.Since(start)
		t.s.logConnection(entry, t)
	}()
	if !t.track(down) {
		_ = down.Close()
		return
	}
	defer t.untrack(down)
	defer down.Close()

	ctx, cancel := context.WithTimeout(t.ctx, tcpConnectTimeout)
	var d net.Dialer
	up, err := d.DialContext(ctx, "tcp", t.port.AppAddr)
	cancel()
	t.upCxTotal.inc()
	if err != nil {
		// Envoy closes the downstream connection: there is no protocol to answer in.
		t.upCxConnectFail.inc()
		entry.Flags = "UF"
		return
	}
	if !t.track(up) {
		_ = up.Close()
		entry.Flags = "UC"
		return
	}
	defer t.untrack(up)
	t.upCxActive.inc()
	t.upRqTotal.inc()
	t.upRqActive.inc()
	defer func() {
		t.upRqActive.dec()
		t.upCxActive.dec()
		t.upCxDestroy.inc()
	}()

	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn, counter *stat) {
		buf := make([]byte, 16*1024)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				counter.add(uint64(n))
				if _, werr := dst.Write(buf[:n]); werr != nil {
					break
				}
			}
			if err != nil {
				break
			}
		}
		done <- struct{}{}
	}
	go pipe(up, down, t.rxBytes)
	go pipe(down, up, t.txBytes)
	<-done
	// One side closed: Envoy closes the other (after flushing what it holds).
	_ = up.Close()
	_ = down.Close()
	<-done
	select {
	case <-t.ctx.Done():
		entry.Flags = "UC"
	default:
	}
}
