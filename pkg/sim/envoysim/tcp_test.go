package envoysim

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/meshdrain/meshdrain/pkg/clock/clocktest"
	"github.com/meshdrain/meshdrain/pkg/hook/drain"
	"github.com/meshdrain/meshdrain/pkg/localhttp/localhttptest"
	"github.com/meshdrain/meshdrain/pkg/mesh"
	"github.com/meshdrain/meshdrain/pkg/mesh/envoy"
)

// tcpApp is a line echo server: it answers each line and keeps the connection open until the
// client closes it, like a database or a message broker.
func tcpApp(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					_, _ = io.WriteString(c, "echo "+line)
				}
			}()
		}
	}()
	return ln.Addr().String()
}

func tcpSidecar(t *testing.T, profile Profile, app string, inclusion ...string) *Sidecar {
	cfg := Config{Profile: profile, Inbound: []InboundPort{{Port: 5432, Protocol: ProtocolTCP, AppAddr: app}}}
	if inclusion != nil {
		cfg.Inclusion, cfg.InclusionPrefixes = InclusionIstioDefault, inclusion
	}
	return startSidecar(t, cfg, "")
}

func exchange(t *testing.T, c net.Conn, r *bufio.Reader, line string) {
	t.Helper()
	if _, err := io.WriteString(c, line+"\n"); err != nil {
		t.Fatal(err)
	}
	got, err := r.ReadString('\n')
	if err != nil || got != "echo "+line+"\n" {
		t.Fatalf("echo %q: %q, %v", line, got, err)
	}
}

// A TCP proxy port counts like Envoy's tcp_proxy and TCP connection pool: a connection is one
// tcp.<prefix>.downstream_cx_total and one upstream request of the inbound cluster, active
// until the connection closes.
func TestTCPProxyCountsLikeEnvoy(t *testing.T) {
	s := tcpSidecar(t, ProfileIstio, tcpApp(t))
	c, err := net.Dial("tcp", s.InboundAddr(5432))
	if err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(c)
	exchange(t, c, r, "hello")
	exchange(t, c, r, "again")
	want := map[string]int{
		"tcp.inbound|5432||.downstream_cx_total":           1,
		"tcp.inbound|5432||.downstream_cx_rx_bytes_total":  12,
		"tcp.inbound|5432||.downstream_cx_tx_bytes_total":  22,
		"cluster.inbound|5432||;.upstream_rq_total":        1,
		"cluster.inbound|5432||;.upstream_rq_active":       1,
		"cluster.inbound|5432||;.upstream_cx_active":       1,
		"listener.0.0.0.0_15006.downstream_cx_active":      1,
		"listener.0.0.0.0_15006.downstream_cx_total":       1,
		"http.inbound_0.0.0.0_5432;.downstream_rq_total":   -1, // not an HTTP port
		"tcp.inbound|5432||;.downstream_cx_total":          -1, // the TCP prefix is not delimited
		"cluster.inbound|5432||;.upstream_cx_connect_fail": 0,
	}
	for name, v := range want {
		if got := statValue(t, s, name); got != v {
			t.Errorf("%s = %d, want %d", name, got, v)
		}
	}
	_ = c.Close()
	clocktest.Eventually(t, "upstream request closed with the connection", func() bool {
		return statValue(t, s, "cluster.inbound|5432||;.upstream_rq_active") == 0
	})
	// Prometheus names and labels: tcp_prefix is a tag of every Istio profile.
	_, prom := adminDo(t, s, "GET", "/stats/prometheus?filter=downstream_cx_total")
	if !strings.Contains(prom, `envoy_tcp_downstream_cx_total{tcp_prefix="inbound|5432||"} 1`) {
		t.Errorf("prometheus output lacks the tcp_prefix series:\n%s", prom)
	}
}

// The app refusing: Envoy closes the client's connection (no protocol to answer in) and logs UF.
func TestTCPProxyAppRefusesClosesTheConnection(t *testing.T) {
	s := tcpSidecar(t, ProfileIstio, localhttptest.RefusingAddr(t))
	c, err := net.Dial("tcp", s.InboundAddr(5432))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatalf("read %d bytes from a connection whose app refused", n)
	}
	clocktest.Eventually(t, "UF logged", func() bool {
		log := s.AccessLog()
		return len(log) == 1 && log[0].Flags == "UF" && log[0].Code == 0
	})
	if got := statValue(t, s, "cluster.inbound|5432||;.upstream_cx_connect_fail"); got != 1 {
		t.Errorf("connect failures %d", got)
	}
}

// Killing Envoy cuts open TCP connections.
func TestTCPProxyKillCutsConnections(t *testing.T) {
	s := tcpSidecar(t, ProfileIstio, tcpApp(t))
	c, err := net.Dial("tcp", s.InboundAddr(5432))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	exchange(t, c, r, "hello")
	s.Kill()
	<-s.Done()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := r.ReadString('\n'); err == nil {
		t.Error("connection still open after Envoy was killed")
	}
	mustRefuse(t, s.InboundAddr(5432))
}

// meshdrain's client reads a TCP port whichever of its stats the sidecar includes, and a port
// with an open connection never reads as idle.
func TestMeshdrainReadsTCPPortsUnderEveryInclusion(t *testing.T) {
	app := tcpApp(t)
	cases := []struct {
		name      string
		inclusion []string
		signal    mesh.Signal
		active    *float64
	}{
		{"all stats", nil, mesh.SignalClusterRequests, f(1)},
		{"cluster.inbound| only", []string{"cluster.inbound|"}, mesh.SignalClusterRequests, f(1)},
		{"tcp.inbound| and the listener", []string{"tcp.inbound|", "listener.0.0.0.0_15006"}, mesh.SignalTCPConnections, f(1)},
		{"tcp.inbound| only", []string{"tcp.inbound|"}, mesh.SignalTCPConnections, nil},
		{"listener only", []string{"listener.0.0.0.0_15006"}, mesh.SignalConnections, f(1)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := tcpSidecar(t, ProfileIstio, app, tc.inclusion...)
			c, err := net.Dial("tcp", s.InboundAddr(5432))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			exchange(t, c, bufio.NewReader(c), "hello")
			client, err := envoy.New(s.AdminURL(), envoy.Options{})
			if err != nil {
				t.Fatal(err)
			}
			snap, err := client.Inbound(context.Background(), mesh.Selector{})
			if err != nil {
				t.Fatal(err)
			}
			r := snap.Read()
			if r.Signal != tc.signal || r.Arrivals == nil || *r.Arrivals != 1 || !eqF(r.Active, tc.active) {
				t.Errorf("reading {%s arrivals=%v active=%v}, want {%s arrivals=1 active=%v}", r.Signal, deref(r.Arrivals), deref(r.Active), tc.signal, deref(tc.active))
			}
		})
	}
}

// Istio <= 1.16 writes istio_requests_total tags first, metric last, in its text names; its
// Prometheus form is the usual one. meshdrain's filter finds it.
func TestIstio116TelemetryV2Names(t *testing.T) {
	app := startApp(t, nil)
	s := startSidecar(t, Config{Profile: ProfileIstio116, Inclusion: InclusionIstioDefault}, appAddr(app))
	resp, err := http.Get("http://" + s.InboundAddr(8080) + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	clocktest.Eventually(t, "request logged", func() bool { return len(s.AccessLog()) == 1 })
	_, text := adminDo(t, s, "GET", "/stats?filter="+urlQuery("istio_requests_total"))
	if !strings.HasPrefix(text, "reporter=.=destination;.;source_workload=.=unknown;.;") || !strings.Contains(text, ";.;response_code=.=200;.;") ||
		!strings.HasSuffix(strings.TrimSpace(text), ";.;istio_requests_total: 1") {
		t.Errorf("text name %q", text)
	}
	_, prom := adminDo(t, s, "GET", "/stats/prometheus?filter="+urlQuery(envoy.StatsFilter(mesh.Selector{Completions: true})))
	if !strings.Contains(prom, "# TYPE istio_requests_total counter\nistio_requests_total{reporter=\"destination\"") {
		t.Errorf("prometheus output:\n%s", prom)
	}
	client, _ := envoy.New(s.AdminURL(), envoy.Options{})
	snap, err := client.Inbound(context.Background(), mesh.Selector{Completions: true})
	if err != nil {
		t.Fatal(err)
	}
	if r := snap.Read(); r.Signal != mesh.SignalCompletedRequests || !eqF(r.Arrivals, f(1)) || snap.Naming != mesh.NamingIstio {
		t.Errorf("reading %+v naming %s", r, snap.Naming)
	}
}

// server.uptime moves only at each stats flush, as Envoy's does.
func TestServerUptimeRefreshedAtFlush(t *testing.T) {
	s := startSidecar(t, Config{StatsFlushInterval: time.Second}, "")
	if got := statValue(t, s, "server.uptime"); got != 0 {
		t.Errorf("uptime %d before the first flush", got)
	}
	clocktest.Eventually(t, "first flush", func() bool { return statValue(t, s, "server.uptime") == 1 })
}

func f(v float64) *float64 { return &v }

func eqF(a, b *float64) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return *a == *b
}

func deref(p *float64) any {
	if p == nil {
		return nil
	}
	return *p
}

// The drain never calls a TCP port with an open connection "quiet", whichever of its stats
// the sidecar includes: strict, it waits to the deadline; otherwise it ends with
// quiet-streams; once the connection is closed, it is quiet.
func TestDrainNeverQuietWithAnOpenTCPConnection(t *testing.T) {
	app := tcpApp(t)
	for _, inclusion := range [][]string{nil, {"tcp.inbound|", "listener.0.0.0.0_15006"}, {"tcp.inbound|"}} {
		t.Run(strings.Join(append([]string{"include"}, inclusion...), " "), func(t *testing.T) {
			s := tcpSidecar(t, ProfileIstio, app, inclusion...)
			c, err := net.Dial("tcp", s.InboundAddr(5432))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			exchange(t, c, bufio.NewReader(c), "hello")
			client, _ := envoy.New(s.AdminURL(), envoy.Options{})
			cfg := drain.Config{DrainMode: mesh.DrainNone, Deadline: 800 * time.Millisecond, Quiet: 100 * time.Millisecond, Poll: 20 * time.Millisecond}
			if res := drain.Run(context.Background(), cfg, client); res.Reason != drain.ReasonDeadline {
				t.Errorf("strict: reason %s, want deadline", res.Reason)
			}
			// Any ending but the deadline needs the answers shown fresh: without Envoy's admin
			// request counter (Istio's default stats) that is /server_info's uptime stepping,
			// which takes up to a second, so the deadline must leave room for it.
			cfg.StreamsWait, cfg.Deadline = 100*time.Millisecond, 3*time.Second
			if res := drain.Run(context.Background(), cfg, client); res.Reason != drain.ReasonQuietStreams {
				t.Errorf("reason %s, want quiet-streams", res.Reason)
			}
			_ = c.Close()
			cfg.StreamsWait = 0
			want := drain.ReasonQuiet
			if len(inclusion) == 1 {
				want = drain.ReasonDeadline // no gauge: open connections are unknown, never 0
			}
			clocktest.Eventually(t, "connection closed", func() bool { return statValue(t, s, "listener.0.0.0.0_15006.downstream_cx_active") <= 0 })
			if res := drain.Run(context.Background(), cfg, client); res.Reason != want {
				t.Errorf("after close: reason %s, want %s", res.Reason, want)
			}
		})
	}
}
