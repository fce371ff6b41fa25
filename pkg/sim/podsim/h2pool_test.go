package podsim

import (
	"io"
	"net"
	"net/http"
	"net/netip"
	"testing"
	"time"

	"github.com/meshdrain/meshdrain/pkg/clock/clocktest"
	"github.com/meshdrain/meshdrain/pkg/sim/httpwire"
)

// On a grpc port each client holds one multiplexed connection. In a pod that drains at t0
// (regime a), a connection that carries a request is sent a GOAWAY with the response, and its
// client closes it once that stream ends (the TIME_WAIT on its side): such a close says
// nothing. A connection idle since t0 is told nothing and stays until its client's EDS
// update, when the client closes it: that close is the evidence, as on HTTP/1.1.
func TestGRPCClientsLetGoAtTheirEDSUpdate(t *testing.T) {
	sc := connScenario()
	sc.Protocol = ProtocolGRPC
	if err := sc.Validate(); err != nil {
		t.Fatal(err)
	}
	judgeAtATimelyScale(t, sc, grpcClientsLetGo)
}

func grpcClientsLetGo(t *judged, sc Scenario) {
	// t0 is at 1s; the EDS updates at 2.5s and 3.5s; client 1 sends once more at 1.6s.
	w := startConnWorld(t, sc, []clientPlan{
		handPlan(1500*ms, 100*ms, 300*ms, 500*ms),
		handPlan(2500*ms, 200*ms, 600*ms, 1600*ms),
	})
	c0, c1 := clientAddr(0), clientAddr(1)

	during := w.table(1300 * ms)
	for _, c := range []netip.Addr{c0, c1} {
		if n := during.podSide(c, "ESTABLISHED"); n != 1 {
			t.Errorf("during the drain: %d established connections from %s, want its one multiplexed connection", n, c)
		}
	}

	afterGoAway := w.table(2000 * ms)
	if n := afterGoAway.podSide(c1, "ESTABLISHED"); n != 0 {
		t.Errorf("client 1 after its response with GOAWAY: %d established, want 0", n)
	}
	if n := afterGoAway.clientSide(c1, "TIME_WAIT"); n != 1 {
		t.Errorf("client 1: %d TIME_WAIT on its side, want 1: it closes after the GOAWAY'd stream", n)
	}
	if n := afterGoAway.podSide(c0, "ESTABLISHED"); n != 1 {
		t.Errorf("client 0 before its EDS update: %d established, want its idle connection", n)
	}

	afterEDS := w.table(3000 * ms)
	if n, tw := afterEDS.podSide(c0, "ESTABLISHED"), afterEDS.clientSide(c0, "TIME_WAIT"); n != 0 || tw != 1 {
		t.Errorf("client 0 after its EDS update: %d established, %d TIME_WAIT on its side; want 0 and 1 (closed by the client)", n, tw)
	}
	if n := afterEDS.podSide(c0, "TIME_WAIT"); n != 0 {
		t.Errorf("client 0: %d TIME_WAIT on the pod's side, want 0", n)
	}
}

// At its EDS update a client's HTTP/2 pool closes an idle connection at once and a busy one
// only when its last stream ends, as Envoy's pool drain does; it opens no new stream there.
func TestH2PoolRemovalWaitsForStreams(t *testing.T) {
	release := make(chan struct{})
	srv := &httpwire.H2Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/held" {
			<-release
		}
		_, _ = io.WriteString(w, "ok")
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	pod := netip.MustParseAddrPort(ln.Addr().String())
	sc := connScenario()
	sc.Protocol = ProtocolGRPC
	table := func() connTable { return connTable{pod: pod, sockets: readTCPTable(t, pod.Port())} }
	send := func(p *h2Pool, path string) error {
		req, _ := http.NewRequest(http.MethodGet, "http://"+pod.String()+path, nil)
		resp, err := p.Do(req)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.Body.Close()
	}
	idle := newH2Pool(pod.String(), clientSourceIP(1), sc.clientPolicy(), time.Second)
	busy := newH2Pool(pod.String(), clientSourceIP(2), sc.clientPolicy(), time.Second)
	t.Cleanup(idle.closeAll)
	t.Cleanup(busy.closeAll)
	if err := send(idle, "/"); err != nil {
		t.Fatal(err)
	}
	if err := send(busy, "/"); err != nil {
		t.Fatal(err)
	}
	held := make(chan error, 1)
	go func() { held <- send(busy, "/held") }()
	clocktest.Eventually(t, "two streams carried on one connection per client", func() bool {
		est := table().established()
		return est[clientAddr(1)] == 1 && est[clientAddr(2)] == 1 && len(srvStreams(busy)) == 1
	})

	idle.removeHost()
	busy.removeHost()
	clocktest.Eventually(t, "the idle client's connection closed by the client", func() bool {
		tb := table()
		return tb.podSide(clientAddr(1), "ESTABLISHED") == 0 && tb.clientSide(clientAddr(1), "TIME_WAIT") == 1
	})
	if n := table().podSide(clientAddr(2), "ESTABLISHED"); n != 1 {
		t.Fatalf("busy client after its EDS update: %d established, want its connection kept for the open stream", n)
	}
	close(release)
	if err := <-held; err != nil {
		t.Fatalf("the open stream: %v", err)
	}
	clocktest.Eventually(t, "the busy client's connection closed after its last stream", func() bool {
		tb := table()
		return tb.podSide(clientAddr(2), "ESTABLISHED") == 0 && tb.clientSide(clientAddr(2), "TIME_WAIT") == 1
	})
}

// Concurrent first requests of one client share one connection: they wait for the one being
// dialled, as Envoy's pending streams wait for its connecting client.
func TestH2PoolOneConnectionForConcurrentStreams(t *testing.T) {
	release := make(chan struct{})
	srv := &httpwire.H2Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-release
		_, _ = io.WriteString(w, "ok")
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	pod := netip.MustParseAddrPort(ln.Addr().String())
	sc := connScenario()
	sc.Protocol = ProtocolGRPC
	pool := newH2Pool(pod.String(), clientSourceIP(3), sc.clientPolicy(), time.Second)
	t.Cleanup(pool.closeAll)
	const streams = 8
	done := make(chan error, streams)
	for range streams {
		go func() {
			req, _ := http.NewRequest(http.MethodGet, "http://"+pod.String()+"/", nil)
			resp, err := pool.Do(req)
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				err = resp.Body.Close()
			}
			done <- err
		}()
	}
	clocktest.Eventually(t, "every stream open", func() bool {
		n := 0
		for _, s := range srvStreams(pool) {
			n += s
		}
		return n == streams
	})
	if n := (connTable{pod: pod, sockets: readTCPTable(t, pod.Port())}).podSide(clientAddr(3), "ESTABLISHED"); n != 1 {
		t.Errorf("%d connections for %d concurrent streams, want 1", n, streams)
	}
	close(release)
	for range streams {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}

// srvStreams are the pool's connections with a stream open.
func srvStreams(p *h2Pool) []int {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []int
	for cc := range p.all {
		if n := cc.State().StreamsActive; n > 0 {
			out = append(out, n)
		}
	}
	return out
}
