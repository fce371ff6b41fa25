package podsim

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/meshdrain/meshdrain/pkg/mesh"
	"github.com/meshdrain/meshdrain/pkg/operator/plan"
	"github.com/meshdrain/meshdrain/pkg/sim/loopback"
)

// MeshNone is a pod without a sidecar (issue 28): its clients connect straight to the app,
// and meshdrain reads the kernel (`prestop --mesh none`). It is the value of the flag contract
// (mesh.None).
const MeshNone = mesh.None

// MeshlessClients are the clients of a pod without a sidecar, by how they choose the pod and
// when they leave it (docs/facts.md §7). Each client sends QPS/Clients requests a second
// (Poisson arrivals), from its own loopback address.
type MeshlessClients struct {
	// Nodes is how many client nodes the per-connection clients are spread over (client i on
	// node i mod Nodes). Each node's kube-proxy syncs the pod's removal at its own lag, drawn
	// from the scenario's EDSLag: from then on that node's clients open no new connection to
	// the pod.
	Nodes int
	// PerRequest clients open a connection per request, routed per connection by their
	// node's kube-proxy. Every other one closes first (it closes after reading the response);
	// the rest ask Connection: close, so the app closes first.
	PerRequest int
	// Holders are keep-alive clients routed per connection: they never learn of the removal,
	// and keep sending on their connections until the app closes them; a new connection goes
	// where their node's kube-proxy sends it.
	Holders int
	// Ingress are ingress-like proxies routed per request (ingress-nginx's balancer): each
	// stops choosing the pod once it has learned of the removal (IngressLag), and leaves its
	// idle keep-alive connections to the pod open until its idle timeout (60s). What fails
	// on its connection to the pod its caller sees as a 502.
	Ingress int
	// IngressLag is the distribution of when one ingress has learned of the removal.
	IngressLag Dist
	// ProbePeriod is the kubelet's readiness probe period (0: no probe): an HTTP GET with
	// Connection: close from the node's address, which goes on during the termination.
	ProbePeriod time.Duration
	// AppMetrics: the app serves its request counter (http_requests_total, by path) at
	// /metrics on its own port, and meshdrain reads it beside the kernel (--app-metrics, the
	// probes' and its own paths left out).
	AppMetrics bool
}

// WithClients is m with n clients in all, each kind's share kept (rounded, at least one of
// each kind m has while n allows): simulate --clients with --mesh none.
func (m MeshlessClients) WithClients(n int) MeshlessClients {
	total := m.total()
	if total == 0 || n <= 0 {
		return m
	}
	kinds := []*int{&m.PerRequest, &m.Holders, &m.Ingress}
	want, had := make([]float64, len(kinds)), make([]bool, len(kinds))
	for i, k := range kinds {
		want[i], had[i] = float64(*k)*float64(n)/float64(total), *k > 0
	}
	left := n
	for i, k := range kinds { // one of each kind present first, while n allows
		if *k > 0 && left > 0 {
			*k, left, want[i] = 1, left-1, want[i]-1
		} else {
			*k = 0
		}
	}
	for ; left > 0; left-- { // then one at a time to the kind furthest below its share
		best := -1
		for i := range kinds {
			if !had[i] {
				continue // a kind the traffic has none of
			}
			if best < 0 || want[i] > want[best] {
				best = i
			}
		}
		*kinds[best]++
		want[best]--
	}
	return m
}

// total is how many clients send to the pod.
func (m MeshlessClients) total() int { return m.PerRequest + m.Holders + m.Ingress }

// clientKind is how a meshless client reaches the pod; "" is a mesh's client sidecar.
type clientKind string

const (
	kindPerRequest clientKind = "per-request"
	kindHolder     clientKind = "keep-alive"
	kindIngress    clientKind = "ingress"
)

// kindOf is the kind of meshless client i: the per-request clients first, then the holders,
// then the ingresses.
func (m MeshlessClients) kindOf(i int) clientKind {
	switch {
	case i < m.PerRequest:
		return kindPerRequest
	case i < m.PerRequest+m.Holders:
		return kindHolder
	default:
		return kindIngress
	}
}

// Lag distributions of the meshless world (docs/facts.md §7): kube-proxy applies an
// EndpointSlice change within its sync period (1 s minimum by default) plus the API's fan-out;
// ingress-nginx within its controller's sync (up to ~3.3 s) and its Lua balancer's 1 s poll.
var (
	kubeProxyLag  = Dist{Median: time.Second, P99: 5 * time.Second}
	ingressLag    = Dist{Median: 2 * time.Second, P99: 4300 * time.Millisecond}
	probeSourceIP = net.IPv4(127, 0, 255, 1) // the node's address: no client's (clientSourceIP)
)

// meshlessIdleGrace is how long a graceful app without a sidecar leaves its idle keep-alive
// connections open after SIGTERM for their client's next request, which it answers with
// Connection: close, before it closes those still idle: closing an idle connection races a
// client that sends on it right then, and a keep-alive client routed per connection never
// stops choosing the pod (docs/facts.md §7). A client that sends on it every few hundred
// milliseconds has sent within it.
const meshlessIdleGrace = time.Second

// defaultProbePeriod is a readiness probe's periodSeconds as commonly set (the kubelet's own
// default is 10 s): at this scale's grace period, one or two probes fall in every drain.
const defaultProbePeriod = 5 * time.Second

// MeshlessScenario is the reference pod without a sidecar: the user's app (P99 450 ms, 200
// threads, graceful shutdown, grace period 30 s) behind a plain Service, 400 QPS from clients
// of every kind on 5 nodes, probed by its kubelet. Plain clients retry nothing.
func MeshlessScenario() Scenario {
	sc := UserScenario()
	sc.Mesh, sc.Traffic, sc.QPS, sc.Retries = MeshNone, "mixed", 400, 0
	sc.EDSLag = kubeProxyLag
	sc.Meshless = MeshlessClients{Nodes: 5, PerRequest: 20, Holders: 10, Ingress: 2, IngressLag: ingressLag, ProbePeriod: defaultProbePeriod}
	sc.Clients = sc.Meshless.total()
	return sc
}

// MeshlessTraffics are the shapes of a pod without a sidecar, each a change of
// MeshlessScenario: one kind of client at a time, all of them, and none.
func MeshlessTraffics() []Traffic {
	only := func(perRequest, holders, ingress int) func(*Scenario) {
		return func(sc *Scenario) {
			sc.Meshless.PerRequest, sc.Meshless.Holders, sc.Meshless.Ingress = perRequest, holders, ingress
			sc.Clients = sc.Meshless.total()
		}
	}
	return []Traffic{
		{"mixed", "400 QPS from 20 per-request clients, 10 keep-alive clients on 5 nodes and 2 ingresses, probed every 5s", func(sc *Scenario) {}},
		{"per-request", "400 QPS from 40 clients on 5 nodes opening a connection per request (half close first, half ask Connection: close)", only(40, 0, 0)},
		{"keep-alive", "400 QPS from 20 keep-alive clients on 5 nodes, routed per connection: they never learn", only(0, 20, 0)},
		{"ingress", "400 QPS from 3 ingresses routed per request: they learn within ~4.3s and keep idle connections", only(0, 0, 3)},
		{"no-traffic", "0.3 QPS from 3 per-request clients, and the kubelet's probes", func(sc *Scenario) {
			only(3, 0, 0)(sc)
			sc.QPS = 0.3
		}},
	}
}

// TrafficFor returns the named traffic of a mesh's shapes (MeshlessTraffics for MeshNone,
// Traffics otherwise) and the scenario it changes.
func TrafficFor(m mesh.Mesh, name string) (Traffic, Scenario, error) {
	if m != MeshNone {
		t, err := TrafficByName(name)
		return t, UserScenario(), err
	}
	var names []string
	for _, t := range MeshlessTraffics() {
		if t.Name == name {
			return t, MeshlessScenario(), nil
		}
		names = append(names, t.Name)
	}
	return Traffic{}, Scenario{}, fmt.Errorf("traffic %q with mesh none: want one of %s", name, strings.Join(names, ", "))
}

// validateMeshless reports what a pod without a sidecar cannot have.
func (sc Scenario) validateMeshless() []error {
	var errs []error
	m := sc.Meshless
	if m.PerRequest < 0 || m.Holders < 0 || m.Ingress < 0 || m.ProbePeriod < 0 {
		errs = append(errs, errors.New("meshless clients and probe period must not be negative"))
	}
	if m.Nodes <= 0 && m.PerRequest+m.Holders > 0 {
		errs = append(errs, errors.New("meshless clients need nodes > 0: each node's kube-proxy routes its clients"))
	}
	if m.total() != sc.Clients {
		errs = append(errs, fmt.Errorf("clients %d: a pod without a sidecar has %d clients by kind (per-request %d, keep-alive %d, ingress %d)",
			sc.Clients, m.total(), m.PerRequest, m.Holders, m.Ingress))
	}
	if m.Ingress > 0 && m.IngressLag.P99 <= 0 {
		errs = append(errs, errors.New("ingress clients need an ingress lag"))
	}
	if sc.Protocol == ProtocolTCP || sc.ClientConns != "" || sc.Streams > 0 || sc.LateClientLag > 0 || (sc.Shape != ShapeSteady && sc.Shape != "") {
		errs = append(errs, errors.New("mesh none: the clients are set by kind (MeshlessClients), on an HTTP port, with steady arrivals"))
	}
	return errs
}

// planMeshless draws the meshless clients: each node's kube-proxy lag, then each client's
// kind, lag and requests, every client from its own random stream as planClients does. A
// holder's requests go on after its node's lag (it never learns): they are drawn up to the
// grace period, and the client stops once its connections to the pod are gone and a new
// one would go elsewhere (fleet.runClient).
func planMeshless(sc Scenario, lags LagModel) []clientPlan {
	m := sc.Meshless
	nodes := make([]time.Duration, m.Nodes)
	for n := range nodes {
		nodes[n] = min(drawLag(lags, sc.EDSLag, rand.New(rand.NewPCG(sc.Seed, 1<<32+uint64(n))), n), maxLag)
	}
	latency := latencyDist(sc.P99)
	perClient := sc.QPS / float64(m.total())
	plans := make([]clientPlan, m.total())
	for i := range plans {
		r := rand.New(rand.NewPCG(sc.Seed, uint64(i)+1))
		p := clientPlan{kind: m.kindOf(i)}
		end := sc.Warmup
		switch p.kind {
		case kindIngress:
			p.lag = min(drawLag(lags, m.IngressLag, r, i), maxLag)
			end += p.lag
		case kindHolder:
			p.lag = nodes[i%m.Nodes]
			end += max(sc.GracePeriod, p.lag)
		default:
			p.lag = nodes[i%m.Nodes]
			end += p.lag
			p.serverCloses = i%2 == 1
		}
		for at := time.Duration(r.ExpFloat64() / perClient * float64(time.Second)); at < end; at += time.Duration(r.ExpFloat64() / perClient * float64(time.Second)) {
			p.arrivals = append(p.arrivals, at)
			p.work = append(p.work, latency.Sample(r))
		}
		plans[i] = p
	}
	return plans
}

// policy is client p's pool: a mesh's clients share the scenario's; a meshless client's
// follows its kind.
func (p clientPlan) policy(sc Scenario) poolPolicy {
	switch p.kind {
	case kindPerRequest:
		return poolPolicy{}
	case kindHolder:
		// A plain HTTP client's pool: Go's http.Transport keeps 2 idle connections per host
		// (DefaultMaxIdleConnsPerHost) and closes the others as their responses end.
		return poolPolicy{reuse: true, routePerConnection: true, idleTimeout: sc.scale(envoyIdleTimeout), maxIdle: 2}
	case kindIngress:
		return poolPolicy{reuse: true, idleTimeout: sc.scale(ingressIdleTimeout)}
	}
	return sc.clientPolicy()
}

// Failures of a pod without a sidecar, as the client sees them.
const (
	// failConnRefused: a direct client's connection was refused (its node's kube-proxy
	// still sent it to a pod that no longer listens).
	failConnRefused = "connection refused"
	// failConnReset: a direct client's connection was closed or reset under its request.
	failConnReset = "connection reset"
	// failIngress502: an ingress answered its caller 502 (its connection to the pod was
	// refused, with no retry left, or reset after the request was sent).
	failIngress502 = "ingress 502"
)

// meshlessOutcome is what a meshless client's caller sees of one attempt on the pod; retry
// says that an ingress retries it on another endpoint (a refused connection, when the
// scenario allows retries: nginx's proxy_next_upstream error; a request that was sent is
// not retried, nginx's non_idempotent off).
func meshlessOutcome(kind clientKind, first attemptResult, retries int) (outcome string, retry bool) {
	if first == attemptOK {
		return outcomeOK, false
	}
	if first == attemptTimeout {
		return failTimeout, false
	}
	if kind == kindIngress {
		if first == attemptRefused && retries > 0 {
			return outcomeRetriedRefused, true
		}
		return failIngress502, false
	}
	switch first {
	case attemptRefused:
		return failConnRefused, false
	case attemptReset:
		return failConnReset, false
	}
	return failOther, false
}

// noSidecar is the pod's sidecar slot when there is none: the clients reach the app itself,
// nothing drains, and the "sidecar" is gone when the app is.
type noSidecar struct {
	appAddr string
	done    chan struct{}
	once    sync.Once
}

func startNoSidecar(_ Scenario, _ SidecarSpec, _ Strategy, appAddr string) (sidecar, error) {
	return &noSidecar{appAddr: appAddr, done: make(chan struct{})}, nil
}

func (n *noSidecar) AdminURL() string       { return "" }
func (n *noSidecar) InboundAddr(int) string { return n.appAddr }
func (n *noSidecar) Terminate()             {}
func (n *noSidecar) AppExited()             { n.end() }
func (n *noSidecar) Kill()                  { n.end() }
func (n *noSidecar) Done() <-chan struct{}  { return n.done }
func (n *noSidecar) ExitReason() string     { return "no sidecar" }
func (n *noSidecar) Close() error           { n.end(); return nil }
func (n *noSidecar) Errors() []sidecarError { return nil }
func (n *noSidecar) end()                   { n.once.Do(func() { close(n.done) }) }

// MeshlessPod is the pod without a sidecar with the preStop `meshdrain plan --mesh none`
// writes for it (plan.Recommend, Plan.PrestopArgs), so that what simulate measures is the hook
// the user gets: its flags, and the grace period and deadline that follow from the scenario's
// grace period as plan keeps it. The plan is given what an operator would give it for this
// world: the lag of the later of the last of Nodes kube-proxies and the last ingress (each by
// 99 deletions in 100), the app's port, its drain and latency.
func MeshlessPod(sc Scenario) (SidecarSpec, error) {
	m := sc.Meshless
	p, err := plan.Recommend(meshlessPlanInput(sc, sc.EDSLag, m.Nodes))
	if err != nil {
		return SidecarSpec{}, fmt.Errorf("no sidecar: %w", err)
	}
	if m.Ingress > 0 {
		pi, err := plan.Recommend(meshlessPlanInput(sc, m.IngressLag, m.Ingress))
		if err != nil {
			return SidecarSpec{}, fmt.Errorf("no sidecar, ingress: %w", err)
		}
		if pi.LastClientLag > p.LastClientLag {
			p = pi
		}
	}
	spec := planned(sc, p, p.Input)
	spec.Name, spec.Mesh = "no-sidecar", MeshNone
	spec.PlanPrestopArgs = p.PrestopArgs()
	grace := spec.takeGracePeriod(sc, p)
	var hook []string
	for _, tok := range spec.PlanPrestopArgs {
		if !strings.HasPrefix(tok, "--log-file=") {
			hook = append(hook, tok)
		}
	}
	spec.Note = fmt.Sprintf("no sidecar: clients reach the app; plan's preStop: meshdrain %s (deadline %s, which prestop derives; %s=%s, the kubelet's probes); %s. "+
		"Lag bound: the last of %d nodes' kube-proxy (lag %s)",
		strings.Join(hook, " "), fmtD(p.Deadline), plan.HostIPEnv, probeSourceIP, grace, m.Nodes, sc.EDSLag)
	if m.Ingress > 0 {
		spec.Note += fmt.Sprintf(" or of %d ingresses (lag %s)", m.Ingress, m.IngressLag)
	}
	spec.Note += ", by 99 deletions in 100"
	return spec, nil
}

// meshlessPlanInput is the plan.Input of `meshdrain plan --mesh none` for sc's pod with the
// clients' lag given as one client's distribution over n clients (a single lag when it is
// constant or n is 1): the app's port, and the app's metrics where it serves them.
func meshlessPlanInput(sc Scenario, lag Dist, n int) plan.Input {
	in := PlanInput(sc)
	in.Mesh, in.Sidecar, in.DrainDuration = MeshNone, "", 0
	in.Ports = []int{sc.Port}
	in.EDSLag, in.EDSLagMedian, in.Clients = lag.P99, 0, 0
	if !lag.Constant() && n > 1 {
		in.EDSLagMedian, in.Clients = lag.Median, n
	}
	if sc.Meshless.AppMetrics {
		in.AppMetrics, in.AppRequests = fmt.Sprintf("http://127.0.0.1:%d%s", sc.Port, appMetricsPath), appRequestsSelector
	}
	return in
}

// runProbes is the kubelet's readiness probe of the app until ctx ends: an HTTP GET with
// Connection: close (the kubelet's probes disable keep-alive) from the node's address, every
// period, whatever the pod's state. A probe's answer is nobody's request: it is not counted.
func runProbes(ctx context.Context, addr string, period, connect time.Duration) {
	if period <= 0 {
		return
	}
	dialer := loopback.Dialer(probeSourceIP, connect)
	tick := time.NewTicker(period)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		probe(ctx, dialer, addr, period)
	}
}

// probe is one readiness probe; the app's side closes the connection after its answer.
func probe(ctx context.Context, dialer *net.Dialer, addr string, timeout time.Duration) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	conn, err := dialer.DialContext(ctx, "tcp", addr)
	if err != nil {
		return // refused once the app has stopped: the probe fails, as it does in a pod
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(timeout))
	req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/ready", nil)
	req.Close = true
	req.Header.Set("User-Agent", "kube-probe/1.34")
	if req.Write(conn) != nil {
		return
	}
	buf := make([]byte, 512)
	for {
		if _, err := conn.Read(buf); err != nil {
			return // the app closed first: the socket's TIME_WAIT stays on the pod's side
		}
	}
}
