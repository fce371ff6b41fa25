// Package evidencetest is the mixed busy and idle clients of issue 27 on real sockets, for the
// tests of the per-client evidence that prestop counts and status shows: an emulated Istio
// sidecar (pkg/sim/envoysim) in front of an app, and three client pods, each dialing from its
// own loopback address with an HTTP/1.1 keep-alive pool, as a client's Envoy keeps one. The
// drain runs in either regime, one step between two polls, and each step says what every
// client is at the poll after it: the ground truth the classification must match. Tests step
// the polls themselves; they wait only for the kernel to settle, and at least a read interval
// where a pool must show.
package evidencetest

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/meshdrain/meshdrain/pkg/mesh"
	"github.com/meshdrain/meshdrain/pkg/mesh/envoy"
	"github.com/meshdrain/meshdrain/pkg/sim/envoysim"
	"github.com/meshdrain/meshdrain/pkg/sim/loopback"
	"github.com/meshdrain/meshdrain/pkg/sockets"
)

// Regime is who drains the pod (docs/decision-rule.md, "The two drain regimes").
type Regime int

const (
	// SidecarDrains is regime (a): the sidecar drains at the deletion (Istio's default), so
	// every response says Connection: close and a busy client opens a connection per request.
	SidecarDrains Regime = iota
	// DrainDeferred is regime (b), prestop --drain-at end: nothing drains until meshdrain
	// decides, so clients keep their pooled connections until they drop the endpoint.
	DrainDeferred
)

func (r Regime) String() string {
	if r == DrainDeferred {
		return "drain-deferred"
	}
	return "sidecar-drains"
}

// The client pods, each its own address.
const (
	Busy  = "127.0.27.1" // sends at every step until it leaves
	Idle1 = "127.0.27.2" // holds its idle pooled connection, then lets go while Busy sends
	Idle2 = "127.0.27.3" // likewise, a step later
)

// Clients are the client pods' addresses.
var Clients = []string{Busy, Idle1, Idle2}

// Every is the read interval the tests give prestop's Table and status's Watch: an answered
// connection still open this long later shows a pool (sockets.Tracker.Undrained).
const Every = 50 * time.Millisecond

// requestsPerStep is what Busy sends between two polls.
const requestsPerStep = 5

// Pod is the emulated sidecar, its app and the client pods.
type Pod struct {
	Regime  Regime
	Sidecar *envoysim.Sidecar
	Admin   *envoy.Client
	// Port is the sidecar's inbound listener port, whose connections are the clients'.
	Port    int
	clients map[string]*http.Client
	// gone receives the kernel's records of the connections freed on Port, and open are
	// the cookies of the connections the last settle saw open: settle waits for the records
	// of those that closed since, so that a poll finds them however late a loaded machine
	// runs the kernel's work queue.
	gone *sockets.GoneWatch
	open []uint64
}

// Start starts the pod, lets every client send one request (each keeps its connection in its
// pool), starts the sidecar's drain in regime (a), and waits until each client holds one idle
// connection, answered at least Every ago: the drain's start, as the first poll sees it.
func Start(t testing.TB, regime Regime) *Pod {
	t.Helper()
	if _, err := (sockets.DiagReader{}).Read([]uint16{1}); err != nil {
		t.Skipf("inet_diag is refused here: %v", err)
	}
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }))
	t.Cleanup(app.Close)
	sim, err := envoysim.Start(envoysim.Config{
		Inbound:   []envoysim.InboundPort{{Port: 8080, AppAddr: strings.TrimPrefix(app.URL, "http://")}},
		DrainTime: time.Hour, TerminationDrainDuration: time.Hour,
	})
	if err != nil {
		t.Fatalf("envoysim.Start: %v", err)
	}
	t.Cleanup(func() { _ = sim.Close() })
	admin, err := envoy.New(sim.AdminURL(), envoy.Options{RequestTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	_, portText, _ := net.SplitHostPort(sim.InboundAddr(8080))
	port, _ := strconv.Atoi(portText)
	gone, err := sockets.WatchGone([]uint16{uint16(port)})
	if err != nil {
		t.Skipf("the kernel's socket destroy broadcasts cannot be joined here: %v", err)
	}
	t.Cleanup(func() { _ = gone.Close() })
	p := &Pod{Regime: regime, Sidecar: sim, Admin: admin, Port: port, clients: map[string]*http.Client{}, gone: gone}
	for _, ip := range Clients {
		d := loopback.Dialer(net.ParseIP(ip), 2*time.Second)
		transport := &http.Transport{Proxy: nil, DialContext: d.DialContext, MaxConnsPerHost: 1, MaxIdleConnsPerHost: 1}
		p.clients[ip] = &http.Client{Timeout: 5 * time.Second, Transport: transport}
		t.Cleanup(transport.CloseIdleConnections)
		p.send(t, ip, 1)
	}
	if regime == SidecarDrains {
		if err := admin.DrainListeners(context.Background(), mesh.DrainGraceful); err != nil {
			t.Fatalf("drain: %v", err)
		}
	}
	p.settle(t, map[string]int{Busy: 1, Idle1: 1, Idle2: 1})
	return p
}

// Snapshot reads the sidecar's inbound stats as prestop and status read them.
func (p *Pod) Snapshot(t testing.TB) mesh.Snapshot {
	t.Helper()
	snap, err := p.Admin.Inbound(context.Background(), mesh.Selector{Ports: []int{8080}})
	if err != nil {
		t.Fatalf("inbound stats: %v", err)
	}
	return snap
}

// Step is what happens between two polls, and where every client stands at the poll after.
type Step struct {
	Name string
	// Do acts and waits for the kernel to settle; nil for the first poll, the drain's start.
	Do func(t testing.TB)
	// Want is each client's state, WantOpen its connections open.
	Want     map[string]sockets.ClientState
	WantOpen map[string]int
}

// Steps are the polls of the drain, the first one its start. The busy client sends at every
// step until the last; the idle clients let go one after the other while it sends, so that
// requests reach the pod in the very interval in which each one closes its connection.
func (p *Pod) Steps() []Step {
	// Where the busy client stands while it sends: in regime (a) each response tells it to
	// close, so it opens a connection per request and its closes say nothing (sending); in
	// regime (b) it keeps its pooled connection, idle at each poll (holding).
	busySending, busyOpen := sockets.Sending, 0
	busyGone := sockets.Sending // in regime (a) only silence tells it has gone
	if p.Regime == DrainDeferred {
		busySending, busyOpen, busyGone = sockets.Holding, 1, sockets.Left
	}
	return []Step{{
		Name:     "drain starts: every client holds an idle pooled connection",
		Want:     map[string]sockets.ClientState{Busy: sockets.Holding, Idle1: sockets.Holding, Idle2: sockets.Holding},
		WantOpen: map[string]int{Busy: 1, Idle1: 1, Idle2: 1},
	}, {
		Name: "busy client sends",
		Do: func(t testing.TB) {
			p.send(t, Busy, requestsPerStep)
			p.settle(t, map[string]int{Busy: busyOpen, Idle1: 1, Idle2: 1})
		},
		Want:     map[string]sockets.ClientState{Busy: busySending, Idle1: sockets.Holding, Idle2: sockets.Holding},
		WantOpen: map[string]int{Busy: busyOpen, Idle1: 1, Idle2: 1},
	}, {
		Name: "first idle client lets go while the busy one sends",
		Do: func(t testing.TB) {
			p.clients[Idle1].CloseIdleConnections()
			p.send(t, Busy, requestsPerStep)
			p.settle(t, map[string]int{Busy: busyOpen, Idle1: 0, Idle2: 1})
		},
		Want:     map[string]sockets.ClientState{Busy: busySending, Idle1: sockets.Left, Idle2: sockets.Holding},
		WantOpen: map[string]int{Busy: busyOpen, Idle1: 0, Idle2: 1},
	}, {
		Name: "second idle client lets go while the busy one sends",
		Do: func(t testing.TB) {
			p.send(t, Busy, 2)
			p.clients[Idle2].CloseIdleConnections()
			p.send(t, Busy, requestsPerStep-2)
			p.settle(t, map[string]int{Busy: busyOpen, Idle1: 0, Idle2: 0})
		},
		Want:     map[string]sockets.ClientState{Busy: busySending, Idle1: sockets.Left, Idle2: sockets.Left},
		WantOpen: map[string]int{Busy: busyOpen, Idle1: 0, Idle2: 0},
	}, {
		Name: "busy client lets go (drops the endpoint: closes its pool, sends no more)",
		Do: func(t testing.TB) {
			p.clients[Busy].CloseIdleConnections()
			p.settle(t, map[string]int{Busy: 0, Idle1: 0, Idle2: 0})
		},
		Want:     map[string]sockets.ClientState{Busy: busyGone, Idle1: sockets.Left, Idle2: sockets.Left},
		WantOpen: map[string]int{Busy: 0, Idle1: 0, Idle2: 0},
	}}
}

// send makes n requests from the client at ip, one after the other.
func (p *Pod) send(t testing.TB, ip string, n int) {
	t.Helper()
	for range n {
		resp, err := p.clients[ip].Get("http://" + p.Sidecar.InboundAddr(8080) + "/")
		if err != nil {
			t.Fatalf("%s: %v", ip, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: status %d", ip, resp.StatusCode)
		}
	}
}

// settle waits until the pod's table shows, of the client pods, open (ESTABLISHED)
// connections as many as open says and none closing (a close travels in softirq context and
// the sidecar closes its end once it reads the client's), and until the kernel has broadcast
// its record of each connection open at the last settle and gone since; then at least Every
// more, so that a connection answered and kept open shows a pool. It gives up after ten
// seconds: the bound of a machine too loaded to run the test at all.
func (p *Pod) settle(t testing.TB, open map[string]int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	var stillOpen []uint64
	for {
		socks, err := (sockets.DiagReader{}).Read([]uint16{uint16(p.Port)})
		if err != nil {
			t.Fatal(err)
		}
		got, closing := map[string]int{}, 0
		stillOpen = stillOpen[:0]
		for _, s := range socks {
			ip := s.Remote.Addr().String()
			if _, ours := open[ip]; !ours {
				continue
			}
			if s.State == sockets.Established {
				got[ip]++
				stillOpen = append(stillOpen, s.Cookie)
			} else {
				closing++
			}
		}
		settled := closing == 0
		for ip, n := range open {
			settled = settled && got[ip] == n
		}
		if settled {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the table did not settle on %v open connections: %v open, %d closing", open, got, closing)
		}
		time.Sleep(5 * time.Millisecond)
	}
	var closed []uint64
	for _, cookie := range p.open {
		if !slices.Contains(stillOpen, cookie) {
			closed = append(closed, cookie)
		}
	}
	p.gone.Await(closed, time.Until(deadline))
	final, _ := p.gone.Take()
	for _, cookie := range closed {
		if !slices.ContainsFunc(final, func(f sockets.Socket) bool { return f.Cookie == cookie }) {
			t.Fatalf("the kernel broadcast no record of connection %d within ten seconds of its close", cookie)
		}
	}
	p.open = slices.Clone(stillOpen)
	time.Sleep(2 * Every)
}

// Describe says a poll's states for a failure message.
func Describe(states map[string]sockets.ClientState, open map[string]int) string {
	var b strings.Builder
	for _, ip := range Clients {
		fmt.Fprintf(&b, " %s=%v/open %d", ip, states[ip], open[ip])
	}
	return b.String()
}
