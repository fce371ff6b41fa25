package podsim

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/meshdrain/meshdrain/pkg/sim/loopback"
)

// ClientConns is how each client holds its connections to the pod, which decides what the
// pod's socket table can tell about that client (docs/facts.md §6): a client sidecar closes
// its idle connections when it applies the endpoint's removal, the other kinds do not, and
// the pod must then fall back on silence.
type ClientConns string

const (
	// ConnsPool is a client sidecar's Envoy upstream pool (HTTP/1.1 between sidecars): idle
	// connections are reused and closed after ClientIdleTimeout; at the client's EDS update the
	// removed host's pool is drained and deleted, idle connections closed at once, busy ones
	// when their request ends (envoyproxy/envoy source/common/upstream/cluster_manager_impl.cc
	// removeHosts, drainOrCloseConnPools; source/common/conn_pool/conn_pool_base.cc
	// drainConnectionsImpl with DrainAndDelete, closeIdleConnectionsForDrainingPool). On a TCP
	// port the pool is the caller's own, through its sidecar's TCP proxy: the drain does not
	// close a proxied connection (envoyproxy/envoy#27863), so it stays until its idle timeout.
	ConnsPool ClientConns = "pool"
	// ConnsPerRequest opens a connection for every request and closes it after the response:
	// the client holds nothing between requests, so nothing of it can be seen to let go.
	ConnsPerRequest ClientConns = "per-request"
	// ConnsPersistentSession is Envoy's pool for a service with Istio's persistent-session
	// label: the terminating endpoint stays in EDS as DRAINING, the client stops sending new
	// requests to it but its pool is not drained, so idle connections stay until
	// ClientIdleTimeout.
	ConnsPersistentSession ClientConns = "persistent-session"
	// ConnsNoSidecar is a client without a sidecar, such as an ingress controller's upstream
	// keep-alive pool: it stops sending when its endpoints change and keeps idle connections
	// until its own idle timeout (ClientIdleTimeout, default 60s: nginx's upstream
	// keepalive_timeout).
	ConnsNoSidecar ClientConns = "no-sidecar"
)

// Default client idle timeouts, in pod time.
const (
	// envoyIdleTimeout is the idle_timeout of Envoy's upstream HTTP connections when no
	// DestinationRule sets connectionPool.http.idleTimeout (envoyproxy.io "How do I configure
	// timeouts?").
	envoyIdleTimeout = time.Hour
	// ingressIdleTimeout is nginx's upstream keepalive_timeout (ingress-nginx
	// upstream-keepalive-timeout).
	ingressIdleTimeout = 60 * time.Second
)

// poolPolicy is what a client's pool does, worked out once from the scenario.
type poolPolicy struct {
	// reuse keeps a connection after its response for the next request.
	reuse bool
	// drainOnRemoval closes the pool's connections at the client's EDS update.
	drainOnRemoval bool
	// idleTimeout closes a connection idle this long (real time); zero: never.
	idleTimeout time.Duration
	// routePerConnection is a client whose routing (its node's kube-proxy) chooses the pod
	// when a connection opens: after the removal its open connections stay on the pod, and a
	// new one goes elsewhere (get returns errRoutedAway).
	routePerConnection bool
	// maxIdle caps the idle connections kept (0: no cap); one more is closed by the client
	// when its response ends.
	maxIdle int
}

// clientConns is the scenario's ClientConns with its default: a pool on HTTP ports, a
// connection per request on TCP ports (the matrix's "tcp" traffic).
func (sc Scenario) clientConns() ClientConns {
	if sc.ClientConns != "" {
		return sc.ClientConns
	}
	if sc.Protocol == ProtocolTCP {
		return ConnsPerRequest
	}
	return ConnsPool
}

// clientPolicy is the pool behaviour of the scenario's clients.
func (sc Scenario) clientPolicy() poolPolicy {
	conns := sc.clientConns()
	idle := sc.ClientIdleTimeout
	if idle == 0 {
		idle = envoyIdleTimeout
		if conns == ConnsNoSidecar {
			idle = ingressIdleTimeout
		}
	}
	return poolPolicy{
		reuse:          conns != ConnsPerRequest,
		drainOnRemoval: conns == ConnsPool && sc.Protocol != ProtocolTCP,
		idleTimeout:    sc.scale(idle),
	}
}

// clientSourceIP is client i's own loopback address, 127.0.X.Y, so that the pod's socket
// table tells the clients apart as it tells client pods apart by their IPs. Linux routes all
// of 127.0.0.0/8 to lo, so binding needs no setup. 127.0.0.1 (everything else on the machine)
// and host parts 0 and 255 are skipped; past 64768 clients addresses repeat.
func clientSourceIP(i int) net.IP {
	const perBlock = 253 // .2 to .254
	return net.IPv4(127, 0, byte(i/perBlock), byte(2+i%perBlock))
}

// errPoolClosed is returned for a request on a pool closed at the end of the run.
var errPoolClosed = errors.New("client connection pool closed")

// errRoutedAway is returned for a request that needs a new connection once a client routed
// per connection has applied the removal: that connection goes to another replica.
var errRoutedAway = errors.New("new connection routed to another replica")

// clientPool is one client's connections to the pod. It speaks HTTP/1.1 with keep-alive, as
// Istio sidecars do between themselves on http ports (h2UpgradePolicy DO_NOT_UPGRADE), and
// behaves as Envoy's upstream pool: the most recently used idle connection is reused first,
// a response with Connection: close closes its connection (the next request opens a new one:
// envoyproxy/envoy source/common/http/http1/conn_pool.cc, StreamWrapper::decodeHeaders and
// onDecodeComplete), a close by the pod is noticed while idle, an idle connection closes at
// the idle timeout, and a drained pool closes idle connections at once and busy ones after
// their request.
type clientPool struct {
	addr   string
	dialer *net.Dialer
	policy poolPolicy

	mu       sync.Mutex
	idle     []*pooledConn // most recently used last
	open     map[*pooledConn]struct{}
	draining bool
	closed   bool
	// removed: the client has applied the removal and routes per connection.
	removed bool
}

// pooledConn is one connection of a clientPool.
type pooledConn struct {
	net.Conn
	br *bufio.Reader

	// Guarded by the pool's mu: taken is set when the connection leaves the idle list (for a
	// request, a drain or the pool's close); watchDone is closed once the idle watcher has
	// returned, and peerGone tells whether it saw the pod close the connection (or bytes that
	// nobody asked for).
	taken     bool
	watchDone chan struct{}
	peerGone  bool
}

// newClientPool is a pool to addr whose connections leave from source.
func newClientPool(addr string, source net.IP, policy poolPolicy, connect time.Duration) *clientPool {
	return &clientPool{
		addr:   addr,
		dialer: loopback.Dialer(source, connect),
		policy: policy,
		open:   map[*pooledConn]struct{}{},
	}
}

// Do sends req on a pooled or new connection. The caller must close the response body; the
// connection goes back to the pool once the body has been read to its end.
func (p *clientPool) Do(req *http.Request) (*http.Response, error) {
	c, err := p.get(req.Context())
	if err != nil {
		return nil, err
	}
	ctx := req.Context()
	// The context alone ends the exchange: its expiry unblocks reads and writes at once.
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Unix(1, 0)) })
	bw := bufio.NewWriter(c)
	err = req.Write(bw)
	if err == nil {
		err = bw.Flush()
	}
	var resp *http.Response
	if err == nil {
		resp, err = http.ReadResponse(c.br, req)
	}
	if err != nil {
		stop()
		p.discard(c)
		if ctx.Err() != nil {
			return nil, errors.Join(ctx.Err(), err)
		}
		return nil, err
	}
	resp.Body = &poolBody{ReadCloser: resp.Body, pool: p, conn: c, keep: !resp.Close, stop: stop}
	return resp, nil
}

// get takes the most recently used idle connection that is still open, or dials a new one.
func (p *clientPool) get(ctx context.Context) (*pooledConn, error) {
	for {
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return nil, errPoolClosed
		}
		n := len(p.idle)
		if n == 0 {
			p.mu.Unlock()
			break
		}
		c := p.idle[n-1]
		p.idle = p.idle[:n-1]
		c.taken = true
		p.mu.Unlock()
		// Wake the idle watcher and wait for it, so that it no longer reads the connection.
		_ = c.SetReadDeadline(time.Unix(1, 0))
		<-c.watchDone
		if c.peerGone {
			p.discard(c)
			continue
		}
		_ = c.SetDeadline(time.Time{})
		return c, nil
	}
	p.mu.Lock()
	removed := p.removed
	p.mu.Unlock()
	if removed {
		return nil, errRoutedAway
	}
	raw, err := p.dialer.DialContext(ctx, "tcp", p.addr)
	if err != nil {
		return nil, err // a *net.OpError with Op "dial": attempt tells refused connections by it
	}
	c := &pooledConn{Conn: raw, br: bufio.NewReader(raw), taken: true}
	p.mu.Lock()
	closed := p.closed
	if !closed {
		p.open[c] = struct{}{}
	}
	p.mu.Unlock()
	if closed {
		_ = raw.Close()
		return nil, errPoolClosed
	}
	return c, nil
}

// put returns a connection whose response has been read in full; a drained or closed pool,
// or one that does not reuse connections, closes it instead.
func (p *clientPool) put(c *pooledConn) {
	p.mu.Lock()
	if p.draining || p.closed || !p.policy.reuse || (p.policy.maxIdle > 0 && len(p.idle) >= p.policy.maxIdle) {
		p.mu.Unlock()
		p.discard(c)
		return
	}
	c.taken, c.peerGone = false, false
	c.watchDone = make(chan struct{})
	var deadline time.Time
	if p.policy.idleTimeout > 0 {
		deadline = time.Now().Add(p.policy.idleTimeout)
	}
	// Set before the watcher starts, so that a get's wake-up cannot be overwritten by it.
	_ = c.SetReadDeadline(deadline)
	p.idle = append(p.idle, c)
	p.mu.Unlock()
	go p.watchIdle(c)
}

// watchIdle reads an idle connection until something happens: the pod closes it (EOF or
// reset), the idle timeout expires, or get, a drain or the pool's close takes it. Envoy's pool
// notices the first two on an idle connection at once and closes its side; the rest belong to
// whoever took the connection.
func (p *clientPool) watchIdle(c *pooledConn) {
	_, err := c.br.Peek(1)
	var ne net.Error
	timeout := errors.As(err, &ne) && ne.Timeout()
	p.mu.Lock()
	taken := c.taken
	if !taken {
		c.taken = true
		p.removeIdle(c)
	}
	// Bytes on an idle HTTP/1.1 connection, an EOF or a reset all mean it is done.
	c.peerGone = !timeout
	p.mu.Unlock()
	close(c.watchDone)
	if !taken {
		p.discard(c)
	}
}

// removeIdle takes c out of the idle list; p.mu is held.
func (p *clientPool) removeIdle(c *pooledConn) {
	for i, idle := range p.idle {
		if idle == c {
			p.idle = append(p.idle[:i], p.idle[i+1:]...)
			return
		}
	}
}

// discard closes a connection and forgets it.
func (p *clientPool) discard(c *pooledConn) {
	p.mu.Lock()
	delete(p.open, c)
	p.mu.Unlock()
	_ = c.Close()
}

// removeHost is the client's EDS update removing the pod. A pool that drains on removal
// closes its idle connections now and the busy ones as their requests end; the others keep
// theirs (the endpoint kept as DRAINING, a TCP proxy, a client without a sidecar).
func (p *clientPool) removeHost() {
	if p.policy.routePerConnection {
		p.mu.Lock()
		p.removed = true
		p.mu.Unlock()
		return
	}
	if !p.policy.drainOnRemoval {
		return
	}
	p.mu.Lock()
	p.draining = true
	idle := p.takeIdle()
	p.mu.Unlock()
	for _, c := range idle {
		p.discard(c)
	}
}

// routedAway says that a client routed per connection has applied the removal and holds no
// connection to the pod any more: whatever it sends next goes elsewhere.
func (p *clientPool) routedAway() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.removed && len(p.open) == 0
}

// takeIdle empties the idle list, marking its connections taken; p.mu is held.
func (p *clientPool) takeIdle() []*pooledConn {
	idle := p.idle
	p.idle = nil
	for _, c := range idle {
		c.taken = true
	}
	return idle
}

// closeAll closes every connection, busy or idle: the run is over.
func (p *clientPool) closeAll() {
	p.mu.Lock()
	p.closed = true
	p.takeIdle()
	conns := make([]*pooledConn, 0, len(p.open))
	for c := range p.open {
		conns = append(conns, c)
	}
	clear(p.open)
	p.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
	}
}

// poolBody returns the connection to the pool once the body has been read to its end.
type poolBody struct {
	io.ReadCloser
	pool *clientPool
	conn *pooledConn
	// keep: the response allows the connection to be reused (no Connection: close).
	keep bool
	eof  bool
	once sync.Once
	stop func() bool
}

func (b *poolBody) Read(buf []byte) (int, error) {
	n, err := b.ReadCloser.Read(buf)
	if errors.Is(err, io.EOF) {
		b.eof = true
	}
	return n, err
}

func (b *poolBody) Close() error {
	b.once.Do(func() {
		// stop false: the context's expiry has already spoilt the connection's deadline.
		intact := b.stop()
		err := b.ReadCloser.Close()
		if b.keep && b.eof && intact && err == nil {
			b.pool.put(b.conn)
			return
		}
		b.pool.discard(b.conn)
	})
	return nil
}
