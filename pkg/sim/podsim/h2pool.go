package podsim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/http2"

	"github.com/meshdrain/meshdrain/pkg/sim/loopback"
)

// h2Pool is one client sidecar's HTTP/2 pool to the pod, as Envoy keeps it on an http2 or
// grpc port (docs/facts.md §6b): one connection carries every stream (Istio allows 2^30
// concurrent streams on it); a GOAWAY from the pod makes it draining: new streams go to a
// new connection and the old one closes when its last stream ends (x/net's ClientConn does
// both, as Envoy's MultiplexedActiveClientBase::onGoAway does); a close by the pod is
// noticed at once; at the client's EDS update the pool closes an idle connection at once
// and a busy one when its last stream ends (envoyproxy/envoy
// source/common/conn_pool/conn_pool_base.cc, DrainAndDelete). A client's Envoy sends no
// GOAWAY of its own when it closes, so a connection closed unused shows no bytes.
type h2Pool struct {
	addr   string
	dialer *net.Dialer
	policy poolPolicy
	tr     *http2.Transport

	mu       sync.Mutex
	cc       *http2.ClientConn // where new streams go
	all      map[*http2.ClientConn]struct{}
	dialing  chan struct{} // closed when the dial under way ends
	draining bool
	closed   bool
}

func newH2Pool(addr string, source net.IP, policy poolPolicy, connect time.Duration) *h2Pool {
	return &h2Pool{
		addr:   addr,
		dialer: loopback.Dialer(source, connect),
		policy: policy,
		tr: &http2.Transport{
			AllowHTTP:          true,
			DisableCompression: true,
			// Envoy's upstream idle_timeout (ClientIdleTimeout): an idle connection closes.
			IdleConnTimeout: policy.idleTimeout,
		},
		all: map[*http2.ClientConn]struct{}{},
	}
}

// errRefusedStream is a stream the pod did not process: above the last stream id of its
// GOAWAY. Envoy's client resets it as refused, which Istio's default retry policy retries
// (refused-stream) like a refused connection.
var errRefusedStream = errors.New("stream refused by the pod's GOAWAY")

// Do sends req as a stream on the pool's connection, opening one if it has none that takes
// new streams. The caller must close the response body.
func (p *h2Pool) Do(req *http.Request) (*http.Response, error) {
	for tries := 0; ; tries++ {
		cc, err := p.get(req.Context())
		if err != nil {
			return nil, err
		}
		resp, err := cc.RoundTrip(req)
		if err != nil {
			p.release(cc)
			switch {
			case strings.Contains(err.Error(), "client conn not usable") && tries == 0:
				// A GOAWAY came between the reservation and the stream: Envoy, single-threaded,
				// would have put the stream on a new connection.
				continue
			case strings.Contains(err.Error(), "GOAWAY"):
				return nil, fmt.Errorf("%w: %w", errRefusedStream, err)
			}
			return nil, err
		}
		resp.Body = &h2Body{ReadCloser: resp.Body, release: func() { p.release(cc) }}
		return resp, nil
	}
}

// h2Body tells the pool when a stream is over.
type h2Body struct {
	io.ReadCloser
	once    sync.Once
	release func()
}

func (b *h2Body) Close() error {
	err := b.ReadCloser.Close()
	b.once.Do(b.release)
	return err
}

// release closes a connection of a drained (or closed) pool once it carries no stream: a
// request sent after the client's EDS update (only a machine too busy to keep the plan's
// times sends one) goes on a connection of its own, closed after it, as on HTTP/1.1.
func (p *h2Pool) release(cc *http2.ClientConn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.draining && !p.closed && p.policy.reuse {
		return
	}
	if st := cc.State(); st.StreamsActive == 0 && st.StreamsReserved == 0 && st.StreamsPending == 0 {
		_ = cc.Close()
		delete(p.all, cc)
	}
}

// get reserves a stream on the current connection, or dials a new one (the dial's error is
// the *net.OpError attempt tells refused connections by). Streams that find no connection
// wait for the one being dialled, as Envoy's pending streams wait for its connecting client,
// so that a client holds one connection, not one per concurrent request.
func (p *h2Pool) get(ctx context.Context) (*http2.ClientConn, error) {
	for {
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return nil, errPoolClosed
		}
		if p.cc != nil && p.cc.ReserveNewRequest() {
			cc := p.cc
			p.mu.Unlock()
			return cc, nil
		}
		if wait := p.dialing; wait != nil && !p.draining {
			p.mu.Unlock()
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		done := make(chan struct{})
		if !p.draining {
			p.dialing = done
		}
		p.mu.Unlock()
		cc, err := p.dial(ctx)
		p.mu.Lock()
		if p.dialing == done {
			p.dialing = nil
		}
		close(done)
		if err != nil {
			p.mu.Unlock()
			return nil, err
		}
		if p.closed {
			p.mu.Unlock()
			_ = cc.Close()
			return nil, errPoolClosed
		}
		p.all[cc] = struct{}{}
		// A drained pool's connection closes after its stream (release).
		if !p.draining && p.policy.reuse && (p.cc == nil || !p.cc.CanTakeNewRequest()) {
			p.cc = cc
		}
		ok := cc.ReserveNewRequest()
		p.mu.Unlock()
		if !ok {
			_ = cc.Close()
			return nil, errPoolClosed
		}
		return cc, nil
	}
}

// dial opens a connection to the pod and starts HTTP/2 on it.
func (p *h2Pool) dial(ctx context.Context) (*http2.ClientConn, error) {
	raw, err := p.dialer.DialContext(ctx, "tcp", p.addr)
	if err != nil {
		return nil, err
	}
	cc, err := p.tr.NewClientConn(raw)
	if err != nil {
		_ = raw.Close()
		return nil, err
	}
	return cc, nil
}

// removeHost is the client's EDS update removing the pod: an idle connection closes now, a
// busy one after its last stream (release), sending nothing.
func (p *h2Pool) removeHost() {
	if !p.policy.drainOnRemoval {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.draining = true
	p.cc = nil
	for cc := range p.all {
		st := cc.State()
		if st.Closed {
			delete(p.all, cc)
			continue
		}
		if st.StreamsActive == 0 && st.StreamsReserved == 0 && st.StreamsPending == 0 {
			_ = cc.Close()
			delete(p.all, cc)
		}
	}
}

// routedAway says whether the client has applied the removal and closed every connection.
func (p *h2Pool) routedAway() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.draining && len(p.all) == 0
}

// closeAll closes every connection, busy or idle: the run is over.
func (p *h2Pool) closeAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	p.cc = nil
	for cc := range p.all {
		_ = cc.Close()
	}
	clear(p.all)
}
