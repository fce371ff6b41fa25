package podsim

import (
	"context"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshdrain/meshdrain/pkg/mesh"
	"github.com/meshdrain/meshdrain/pkg/operator/plan"
	"github.com/meshdrain/meshdrain/pkg/sim/httpwire"
)

// TestPlanMeshless checks the draws of a pod without a sidecar: clients by kind, the
// per-connection clients of one node sharing its kube-proxy's lag, the holders sending past
// it (they never learn), every other per-request client asking Connection: close, and the
// same seed drawing the same plans.
func TestPlanMeshless(t *testing.T) {
	sc := MeshlessScenario()
	if err := sc.Validate(); err != nil {
		t.Fatal(err)
	}
	m := sc.Meshless
	plans := planClients(sc)
	if len(plans) != m.total() {
		t.Fatalf("%d plans, want %d", len(plans), m.total())
	}
	nodeLag := map[int]time.Duration{}
	kinds := map[clientKind]int{}
	for i, p := range plans {
		kinds[p.kind]++
		if len(p.arrivals) == 0 {
			t.Fatalf("client %d (%s) sends nothing", i, p.kind)
		}
		last := p.arrivals[len(p.arrivals)-1]
		switch p.kind {
		case kindPerRequest, kindHolder:
			if lag, seen := nodeLag[i%m.Nodes]; seen && lag != p.lag {
				t.Errorf("client %d on node %d learns at %v, its node's other clients at %v", i, i%m.Nodes, p.lag, lag)
			}
			nodeLag[i%m.Nodes] = p.lag
		}
		switch p.kind {
		case kindHolder:
			if last < sc.Warmup+p.lag {
				t.Errorf("holder %d stops sending at %v, before its node's lag %v: it must keep sending (it never learns)", i, last, sc.Warmup+p.lag)
			}
			if n := len(p.toPod(sc.Warmup)); n >= len(p.arrivals) || n == 0 {
				t.Errorf("holder %d: %d of %d arrivals reach the pod whatever the strategy, want those before its lag", i, n, len(p.arrivals))
			}
		default:
			if last >= sc.Warmup+p.lag {
				t.Errorf("%s client %d sends at %v, after it learned at %v", p.kind, i, last, sc.Warmup+p.lag)
			}
		}
		if p.kind == kindPerRequest && p.serverCloses != (i%2 == 1) {
			t.Errorf("per-request client %d serverCloses %v: every other one asks Connection: close", i, p.serverCloses)
		}
	}
	if kinds[kindPerRequest] != m.PerRequest || kinds[kindHolder] != m.Holders || kinds[kindIngress] != m.Ingress {
		t.Errorf("kinds %v, want %d per-request, %d keep-alive, %d ingress", kinds, m.PerRequest, m.Holders, m.Ingress)
	}
	if again := planClients(sc); len(again) != len(plans) || !slices.Equal(again[3].arrivals, plans[3].arrivals) || again[3].lag != plans[3].lag {
		t.Error("the same seed drew other plans")
	}
}

// TestMeshlessPrestopArgs checks the meshdrain strategy's invocation without a sidecar, as the
// flag contract of issue 28 fixes it: --mesh none, the app's own listening port, the node's
// address left out with --ignore-source (plan's $(HOST_IP), which the hook reads from its
// environment), no admin URL and no sidecar flag.
func TestMeshlessPrestopArgs(t *testing.T) {
	sc := MeshlessScenario()
	spec, err := MeshlessPod(sc)
	if err != nil {
		t.Fatal(err)
	}
	args := strings.Join(meshdrainArgs(sc, spec, "", 43210), " ")
	for _, want := range []string{"prestop --mesh none --port 43210 --ignore-source $(HOST_IP) ", "--eds-lag-bound "} {
		if !strings.Contains(args, want) {
			t.Errorf("args %q lack %q", args, want)
		}
	}
	for _, not := range []string{"--admin", "--inbound-listener-port", "--drain-at", "--client-evidence"} {
		if strings.Contains(args, not) {
			t.Errorf("args %q have %s, which --mesh none has not", args, not)
		}
	}
	if spec.MeshdrainLagBound < sc.EDSLag.P99 || spec.MeshdrainLagBound < sc.Meshless.IngressLag.P99 {
		t.Errorf("lag bound %v: want at least one node's and one ingress's p99 (%v, %v)", spec.MeshdrainLagBound, sc.EDSLag.P99, sc.Meshless.IngressLag.P99)
	}
}

func TestMeshlessOutcome(t *testing.T) {
	for _, tc := range []struct {
		kind    clientKind
		first   attemptResult
		retries int
		want    string
		retry   bool
	}{
		{kindPerRequest, attemptOK, 0, outcomeOK, false},
		{kindPerRequest, attemptRefused, 2, failConnRefused, false},
		{kindHolder, attemptReset, 2, failConnReset, false},
		{kindIngress, attemptRefused, 0, failIngress502, false},
		{kindIngress, attemptRefused, 1, outcomeRetriedRefused, true},
		{kindIngress, attemptReset, 3, failIngress502, false},
	} {
		got, retry := meshlessOutcome(tc.kind, tc.first, tc.retries)
		if got != tc.want || retry != tc.retry {
			t.Errorf("%s, attempt %d, retries %d: %q retry %v, want %q retry %v", tc.kind, tc.first, tc.retries, got, retry, tc.want, tc.retry)
		}
	}
}

// countingServer serves on loopback and records each request's source address and whether
// it asked Connection: close.
type countingServer struct {
	ln  net.Listener
	srv *httpwire.Server
	mu  sync.Mutex
	got []struct {
		from  string
		close bool
	}
}

func startCounting(t *testing.T, reqClose bool) *countingServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &countingServer{ln: ln}
	s.srv = &httpwire.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, _, _ := net.SplitHostPort(r.RemoteAddr)
		s.mu.Lock()
		s.got = append(s.got, struct {
			from  string
			close bool
		}{host, r.Close})
		s.mu.Unlock()
		if reqClose {
			w.Header().Set("Connection", "close")
		}
		_, _ = io.WriteString(w, "ok\n")
	})}
	go func() { _ = s.srv.Serve(ln) }()
	t.Cleanup(func() { _ = s.srv.Close() })
	return s
}

func (s *countingServer) requests() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.got)
}

// TestHolderRoutedPerConnection: a keep-alive client routed per connection keeps using its
// connection to the pod after its node has synced the removal, and once the app closes it
// (Connection: close), its next request needs a new connection, which goes elsewhere.
func TestHolderRoutedPerConnection(t *testing.T) {
	sc := MeshlessScenario()
	sc.TimeScale = 1
	keep := startCounting(t, false)
	pool := newClientPool(keep.ln.Addr().String(), clientSourceIP(7), clientPlan{kind: kindHolder}.policy(sc), time.Second)
	defer pool.closeAll()
	ctx := context.Background()
	if got := attempt(ctx, pool, keep.ln.Addr().String(), 0); got != attemptOK {
		t.Fatalf("first request: %d", got)
	}
	pool.removeHost()
	if pool.routedAway() {
		t.Fatal("routed away while it still holds a connection to the pod")
	}
	for i := range 3 {
		if got := attempt(ctx, pool, keep.ln.Addr().String(), 0); got != attemptOK {
			t.Fatalf("request %d on the held connection after the removal: %d, want ok", i, got)
		}
	}
	if n := keep.requests(); n != 4 {
		t.Errorf("the pod served %d requests, want 4: the holder keeps its connection after the removal", n)
	}
	// The app answers with Connection: close (its graceful shutdown): the connection goes.
	closing := startCounting(t, true)
	pool2 := newClientPool(closing.ln.Addr().String(), clientSourceIP(8), clientPlan{kind: kindHolder}.policy(sc), time.Second)
	defer pool2.closeAll()
	if got := attempt(ctx, pool2, closing.ln.Addr().String(), 0); got != attemptOK {
		t.Fatalf("request before the removal: %d", got)
	}
	pool2.removeHost()
	if !pool2.routedAway() {
		t.Error("not routed away once the app closed its only connection after the removal")
	}
	if got := attempt(ctx, pool2, closing.ln.Addr().String(), 0); got != attemptElsewhere {
		t.Errorf("request after the removal with no connection left: %d, want attemptElsewhere", got)
	}
	if n := closing.requests(); n != 1 {
		t.Errorf("the pod served %d requests, want 1", n)
	}
}

// TestPerRequestCloseOrders: a per-request client that asks Connection: close lets the app
// close first; the other closes its connection itself after the response.
func TestPerRequestCloseOrders(t *testing.T) {
	s := startCounting(t, false)
	sc := MeshlessScenario()
	for _, serverCloses := range []bool{false, true} {
		pool := newClientPool(s.ln.Addr().String(), clientSourceIP(3), clientPlan{kind: kindPerRequest}.policy(sc), time.Second)
		if got := attemptClose(context.Background(), pool, s.ln.Addr().String(), 0, serverCloses); got != attemptOK {
			t.Fatalf("serverCloses %v: attempt %d", serverCloses, got)
		}
		pool.mu.Lock()
		open := len(pool.open)
		pool.mu.Unlock()
		if open != 0 {
			t.Errorf("serverCloses %v: the client keeps %d connections, want none (one per request)", serverCloses, open)
		}
	}
	if len(s.got) != 2 || s.got[0].close || !s.got[1].close {
		t.Errorf("requests %+v: want the first without Connection: close, the second with it", s.got)
	}
}

// TestProbeFromNodeAddress: the kubelet's readiness probe comes from the node's address and
// asks Connection: close.
func TestProbeFromNodeAddress(t *testing.T) {
	s := startCounting(t, false)
	probe(context.Background(), &net.Dialer{LocalAddr: &net.TCPAddr{IP: probeSourceIP}}, s.ln.Addr().String(), 5*time.Second)
	if len(s.got) != 1 || s.got[0].from != probeSourceIP.String() || !s.got[0].close {
		t.Errorf("probe seen as %+v, want one request from %s with Connection: close", s.got, probeSourceIP)
	}
}

// TestGracefulAppIdleGrace: a graceful app without a sidecar does not close an idle
// keep-alive connection at SIGTERM: the client's next request on it is answered, with
// Connection: close, and the app exits once the connection is gone. Closing it at SIGTERM
// (idleGrace 0) would have left the request to a new connection, refused.
func TestGracefulAppIdleGrace(t *testing.T) {
	a, err := startApp(2, 1, AppGraceful)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Kill()
	a.idleGrace = time.Minute // longer than the test: the request, not the grace, ends the connection
	sc := MeshlessScenario()
	pool := newClientPool(a.Addr(), clientSourceIP(9), clientPlan{kind: kindHolder}.policy(sc), time.Second)
	defer pool.closeAll()
	ctx := context.Background()
	if got := attempt(ctx, pool, a.Addr(), 0); got != attemptOK {
		t.Fatalf("request before SIGTERM: %d", got)
	}
	a.Terminate()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+a.Addr()+"/", nil)
	resp, err := pool.Do(req)
	if err != nil {
		t.Fatalf("request on the idle connection after SIGTERM: %v, want an answer", err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if !resp.Close {
		t.Error("the answer after SIGTERM lacks Connection: close")
	}
	select {
	case <-a.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("the app did not exit once its last connection closed")
	}
}

func TestMeshlessWithClients(t *testing.T) {
	m := MeshlessScenario().Meshless // 20 per-request, 10 keep-alive, 2 ingress
	for _, tc := range []struct {
		n                         int
		perRequest, holders, ingr int
	}{{32, 20, 10, 2}, {5, 3, 1, 1}, {64, 40, 20, 4}, {2, 1, 1, 0}} {
		got := m.WithClients(tc.n)
		if only := (MeshlessClients{Holders: 20}).WithClients(tc.n); only.Holders != tc.n || only.PerRequest+only.Ingress != 0 {
			t.Errorf("%d clients of a keep-alive-only traffic: %+v", tc.n, only)
		}
		if got.PerRequest != tc.perRequest || got.Holders != tc.holders || got.Ingress != tc.ingr || got.total() != tc.n {
			t.Errorf("%d clients: %d/%d/%d, want %d/%d/%d", tc.n, got.PerRequest, got.Holders, got.Ingress, tc.perRequest, tc.holders, tc.ingr)
		}
	}
}

// TestHolderKeepsTwoIdle: a keep-alive client keeps at most two idle connections, as Go's
// http.Transport does per host, and closes the others as their responses end: a graceful app
// then has few idle connections to close, each a race with the client's next send.
func TestHolderKeepsTwoIdle(t *testing.T) {
	a, err := startApp(8, 1, AppGraceful)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Kill()
	pool := newClientPool(a.Addr(), clientSourceIP(11), clientPlan{kind: kindHolder}.policy(MeshlessScenario()), 5*time.Second)
	defer pool.closeAll()
	var wg sync.WaitGroup
	for range 5 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if got := attempt(context.Background(), pool, a.Addr(), 200*time.Millisecond); got != attemptOK {
				t.Errorf("attempt %d", got)
			}
		}()
	}
	wg.Wait()
	pool.mu.Lock()
	idle, open := len(pool.idle), len(pool.open)
	pool.mu.Unlock()
	if idle > 2 || open > 2 {
		t.Errorf("%d idle, %d open connections after 5 concurrent requests; want at most 2", idle, open)
	}
}

// TestMeshlessRunsPlansPrestop: the hook simulate runs for a pod without a sidecar is the one
// `meshdrain plan --mesh none` writes for the same world (issue 37: with --grace-period 45s
// simulate ran --deadline 11s where plan's hook derives 39s). Every flag of plan's preStop is
// there with its value in pod time; the simulator only puts the app's loopback port for plan's
// --port and gives the hook the node's address in HOST_IP, as the downward API does; the
// deadline it passes, scaled, is the one prestop derives from plan's grace period.
func TestMeshlessRunsPlansPrestop(t *testing.T) {
	sc := MeshlessScenario()
	sc.TimeScale, sc.GracePeriod = 0.1, 45*time.Second
	// One lag: the nodes' kube-proxies (no ingress), as the user gives it to plan:
	// meshdrain plan --mesh none --port 8080 --p99 450ms --eds-lag p50=1s,p99=5s --clients 5
	// --app-drain 5s --grace-period 45s.
	sc.Meshless.PerRequest, sc.Meshless.Holders, sc.Meshless.Ingress = 10, 5, 0
	sc.Clients = sc.Meshless.total()
	if err := sc.Validate(); err != nil {
		t.Fatal(err)
	}
	p, err := plan.Recommend(plan.Input{Mesh: mesh.None, Ports: []int{sc.Port}, P99: sc.P99,
		EDSLag: sc.EDSLag.P99, EDSLagMedian: sc.EDSLag.Median, Clients: sc.Meshless.Nodes, AppDrain: sc.AppDrain,
		CurrentGracePeriod: sc.GracePeriod, KeepLonger: plan.Bounds{GracePeriod: sc.GracePeriod}})
	if err != nil {
		t.Fatal(err)
	}
	spec, err := MeshlessPod(sc)
	if err != nil {
		t.Fatal(err)
	}
	const listenerPort = 43210
	args := meshdrainArgs(sc, spec, "", listenerPort)
	ran := flagValues(t, sc, args)
	if want := p.Deadline.String(); ran["deadline"] != want {
		t.Errorf("--deadline %s (pod time), plan's hook derives %s from grace %s", ran["deadline"], want, p.GracePeriod)
	}
	if sc.grace(spec) != p.GracePeriod {
		t.Errorf("the kubelet's grace period %s, plan's %s", sc.grace(spec), p.GracePeriod)
	}
	for _, tok := range p.PrestopArgs()[1:] {
		name, value, _ := strings.Cut(strings.TrimPrefix(tok, "--"), "=")
		switch name {
		case "log-file":
			if _, ok := ran[name]; ok {
				t.Errorf("--log-file passed: the simulator reads the hook's stderr")
			}
			continue
		case "port":
			value = strconv.Itoa(listenerPort)
		}
		if d, err := time.ParseDuration(value); err == nil {
			value = d.String()
		}
		if ran[name] != value {
			t.Errorf("--%s %q, plan writes %q (args %q)", name, ran[name], value, args)
		}
	}
	if env := preStopEnv(spec); !slices.Contains(env, plan.HostIPEnv+"="+probeSourceIP.String()) {
		t.Errorf("the hook's environment has no %s=%s (the kubelet's probes' address, for --ignore-source=%s)", plan.HostIPEnv, probeSourceIP, plan.IgnoreHostIP)
	}
}

// TestMeshlessPlanAppMetrics: with the app's counter, plan's --app-metrics names the pod's
// port; the hook reads the simulated app's loopback port, with plan's counter selector.
func TestMeshlessPlanAppMetrics(t *testing.T) {
	sc := MeshlessScenario()
	sc.Meshless.AppMetrics = true
	spec, err := MeshlessPod(sc)
	if err != nil {
		t.Fatal(err)
	}
	if planned := strings.Join(spec.PlanPrestopArgs, " "); !strings.Contains(planned, "--app-metrics=http://127.0.0.1:8080/metrics") {
		t.Fatalf("plan's preStop %q: want --app-metrics on the pod's port", planned)
	}
	ran := flagValues(t, sc, meshdrainArgs(sc, spec, "", 43210))
	if ran["app-metrics"] != "http://127.0.0.1:43210/metrics" || ran["app-requests"] != appRequestsSelector {
		t.Errorf("--app-metrics %q --app-requests %q: want the app's loopback port 43210 and %q", ran["app-metrics"], ran["app-requests"], appRequestsSelector)
	}
}

// TestPlanArgsRepeatable: a repeatable flag plan writes twice (--ignore-source for the node
// and for loopback probes) reaches the hook twice, in place of the simulator's one.
func TestPlanArgsRepeatable(t *testing.T) {
	sc := MeshlessScenario()
	sc.TimeScale = 0.5
	got := strings.Join(planArgs([]string{"prestop", "--ignore-source", "127.0.255.1", "--quiet", "1s"},
		[]string{"prestop", "--ignore-source=$(HOST_IP)", "--ignore-source=127.0.0.0/8", "--quiet=2s", "--log-file=/proc/1/fd/1"}, sc), " ")
	if want := "prestop --ignore-source $(HOST_IP) --ignore-source 127.0.0.0/8 --quiet 1s"; got != want {
		t.Errorf("planArgs = %q, want %q", got, want)
	}
}
