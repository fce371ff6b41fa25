package podsim

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/meshdrain/meshdrain/pkg/sim/httpwire"
)

// maxLag caps a client's drawn EDS lag: a lognormal has no upper bound, and a run must end.
const maxLag = 60 * time.Second

// Envoy's retry back-off base interval (25ms); the jitter Envoy adds is not modelled.
const retryBackoff = 25 * time.Millisecond

// Istio's default cluster connectTimeout.
const connectTimeout = 10 * time.Second

// clientPlan is everything one client sidecar will do, drawn before the run from the seed:
// when it learns the pod is gone and the requests it sends to the pod until then.
type clientPlan struct {
	// lag is the time from t0 until this client stops sending to the pod.
	lag time.Duration
	// arrivals are the request send times from the start of the run, in pod time, and
	// work the service time of each: only those before warmup+lag, since later requests go
	// to the other replicas and cannot fail here.
	arrivals []time.Duration
	work     []time.Duration
	// kind is a meshless client's way of reaching the pod ("" for a mesh's client sidecar),
	// and serverCloses says that a per-request client asks Connection: close, so that the
	// app's side closes first.
	kind         clientKind
	serverCloses bool
}

// toPod are the arrivals that go to the pod whatever the strategy: those before the client
// learns. Only a keep-alive client (a holder) has more, which reach the pod as long as it
// holds a connection there.
func (p clientPlan) toPod(warmup time.Duration) []time.Duration {
	n := len(p.arrivals)
	for n > 0 && p.arrivals[n-1] >= warmup+p.lag {
		n--
	}
	return p.arrivals[:n]
}

// planClients draws the clients' lags and requests. Each client has its own random stream,
// so the draws do not depend on the order in which anything runs.
func planClients(sc Scenario) []clientPlan { return planClientsWith(sc, nil) }

// planClientsWith is planClients with the lags drawn by lags instead of the scenario's
// lognormals (nil: the scenario's), as the calibration replays them (PlanDrain).
func planClientsWith(sc Scenario, lags LagModel) []clientPlan {
	if sc.meshless() {
		return planMeshless(sc, lags)
	}
	latency := latencyDist(sc.P99)
	perClient := sc.QPS / float64(sc.Clients)
	// The synchronised bursts' common phase.
	common := time.Duration(rand.New(rand.NewPCG(sc.Seed, 0)).Float64() * float64(sc.BurstPeriod))
	plans := make([]clientPlan, sc.Clients, sc.Clients+1)
	for i := range plans {
		r := rand.New(rand.NewPCG(sc.Seed, uint64(i)+1))
		p := clientPlan{lag: min(drawLag(lags, sc.EDSLag, r, i), maxLag)}
		end := sc.Warmup + p.lag
		switch sc.Shape {
		case ShapeBursts:
			p.arrivals = burstArrivals(r, common, sc.BurstPeriod, perClient*sc.BurstPeriod.Seconds(), end)
		case ShapeClientBursts:
			phase := time.Duration(r.Float64() * float64(sc.BurstPeriod))
			p.arrivals = burstArrivals(r, phase, sc.BurstPeriod, perClient*sc.BurstPeriod.Seconds(), end)
		default:
			// Poisson arrivals: independent callers behind each client sidecar.
			for at := time.Duration(r.ExpFloat64() / perClient * float64(time.Second)); at < end; at += time.Duration(r.ExpFloat64() / perClient * float64(time.Second)) {
				p.arrivals = append(p.arrivals, at)
				p.work = append(p.work, latency.Sample(r))
			}
		}
		for len(p.work) < len(p.arrivals) {
			p.work = append(p.work, latency.Sample(r))
		}
		plans[i] = p
	}
	if sc.LateClientLag > 0 {
		r := rand.New(rand.NewPCG(sc.Seed, uint64(sc.Clients)+1))
		p := clientPlan{lag: sc.LateClientLag}
		p.arrivals = periodicArrivals(r, sc.LateClientPeriod, sc.Warmup+p.lag)
		for range p.arrivals {
			p.work = append(p.work, latency.Sample(r))
		}
		plans = append(plans, p)
	}
	return plans
}

// trafficPauses is the longest pause between two requests planned for the pod whatever the
// strategy (clientPlan.toPod), and when the last one is sent, from the start of the run.
func trafficPauses(plans []clientPlan, warmup time.Duration) (longest, last time.Duration) {
	var all []time.Duration
	for _, p := range plans {
		all = append(all, p.toPod(warmup)...)
	}
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	for i := 1; i < len(all); i++ {
		longest = max(longest, all[i]-all[i-1])
	}
	if len(all) > 0 {
		last = all[len(all)-1]
	}
	return longest, last
}

// plannedRequests is how many requests the plans send to the pod (first attempts).
func plannedRequests(plans []clientPlan) int {
	n := 0
	for _, p := range plans {
		n += len(p.arrivals)
	}
	return n
}

// lastLag is when the last client stops sending, from t0.
func lastLag(plans []clientPlan) time.Duration {
	var last time.Duration
	for _, p := range plans {
		last = max(last, p.lag)
	}
	return last
}

// Outcome kinds of one request, as the calling application sees it.
const (
	outcomeOK = "ok"
	// outcomeRetriedRefused: the pod refused the connection (connect-failure), the retry
	// to another replica succeeded.
	outcomeRetriedRefused = "retried-refused"
	// outcomeRetried503: the pod's sidecar answered 503 (retriable-status-codes), the
	// retry succeeded.
	outcomeRetried503 = "retried-503"
	// outcomeElsewhere: a keep-alive client routed per connection whose node has synced
	// opened its new connection to another replica: the request never reached the pod.
	outcomeElsewhere = "elsewhere"
	// Failures seen by the caller.
	failCut     = "503 UC (cut in flight)"
	failTimeout = "504 UT (route timeout)"
	failRefused = "503 UF (refused, not retried)"
	fail503     = "503 (not retried)"
	// fail502: Linkerd's proxy answered 502 for an app that refused or reset the connection
	// (l5d-proxy-error); Linkerd clients retry nothing by default.
	fail502      = "502 l5d-proxy-error (Linkerd: not retried)"
	failOther    = "other"
	failRetryErr = "retry failed"
	// failTCPClosed: on a TCP port, the connection ended without a response (the pod's
	// sidecar could not reach the app, or was killed): there is nothing to retry at HTTP level.
	failTCPClosed = "TCP closed (no response, not retried)"
	// failStreamCut: a long-lived stream cut by a kill rather than closed by the app.
	failStreamCut = "stream cut"
)

// streamHeader marks a long-lived stream: the app holds it open until it shuts down, then
// closes it as a WebSocket or gRPC server sends its close frame or GOAWAY.
const streamHeader = "X-Podsim-Stream"

// fleet is the set of client sidecars. Each client sidecar dials the pod from its own
// loopback address and holds its own connection pool (clientPool: Envoy's HTTP/1.1 pool, or
// what Scenario.ClientConns says), applies the pod's removal at its own EDS lag, sends open
// loop, and applies Istio's default retry policy: connect-failure and 503 are retried on
// another endpoint (previous_hosts), a reset after the request was sent is not.
type fleet struct {
	sc        Scenario
	plans     []clientPlan
	podAddr   string
	otherAddr string
	// other is the connection pool to the other replicas, where retries go.
	other *httpwire.Client

	// pools are the clients' pools that warm opened before the run, by client.
	pools []podPool

	mu       sync.Mutex
	outcomes map[string]int
	failedAt []time.Time
	requests int
	wg       sync.WaitGroup

	// The oracle's knowledge: the requests planned for the pod, and how many of them have
	// been sent and answered (their first attempt is over).
	planned, answered int
	lastAnswered      chan struct{}
	lastOnce          sync.Once

	// lateSend and lateRemoval are the latest a client sent a request, or applied its EDS
	// update, after the time its plan gave it (pod time from t0, from the start of the
	// pod's deletion on): a loaded machine delays them, and a run whose clients did not keep
	// their plan says so (timingWarnings).
	lateSend, lateRemoval clientLateness
}

// clientLateness is how late one kind of client action ran at worst, in real time, and when
// its plan had it (pod time from t0).
type clientLateness struct {
	by       time.Duration
	plannedS float64
}

// note keeps by if it is the latest so far.
func (l *clientLateness) note(by time.Duration, plannedS float64) {
	if by > l.by {
		l.by, l.plannedS = by, plannedS
	}
}

func newFleet(sc Scenario, plans []clientPlan, podAddr, otherAddr string) *fleet {
	f := &fleet{
		sc:           sc,
		plans:        plans,
		podAddr:      podAddr,
		otherAddr:    otherAddr,
		other:        newClientTransport(sc),
		outcomes:     map[string]int{},
		planned:      plannedRequests(plans),
		lastAnswered: make(chan struct{}),
		pools:        make([]podPool, len(plans)),
	}
	if f.planned == 0 {
		close(f.lastAnswered)
	}
	return f
}

// LastAnswered is closed once the last request planned for the pod has been answered (or has
// failed): from then on nothing will ever reach the pod. It is what the oracle waits for.
func (f *fleet) LastAnswered() <-chan struct{} { return f.lastAnswered }

func (f *fleet) answeredOne() {
	f.mu.Lock()
	f.answered++
	last := f.answered == f.planned
	f.mu.Unlock()
	if last {
		f.lastOnce.Do(func() { close(f.lastAnswered) })
	}
}

// roundTripper sends one request: a client's pool to the pod, or the pool to the other
// replicas.
type roundTripper interface {
	Do(req *http.Request) (*http.Response, error)
}

// podPool is one client's connections to the pod: Envoy's HTTP/1.1 pool, or its HTTP/2 pool
// on a grpc port.
type podPool interface {
	roundTripper
	removeHost()
	closeAll()
	// routedAway: the client has applied the removal and holds no connection to the pod any
	// more, so its requests go elsewhere.
	routedAway() bool
}

// newPool is the connection pool of client i (the plans' index; streams come after them).
func (f *fleet) newPool(i int) podPool {
	policy := f.sc.clientPolicy()
	if i < len(f.plans) {
		policy = f.plans[i].policy(f.sc)
	}
	if f.sc.Protocol == ProtocolGRPC {
		return newH2Pool(f.podAddr, clientSourceIP(i), policy, f.sc.scale(connectTimeout))
	}
	return newClientPool(f.podAddr, clientSourceIP(i), policy, f.sc.scale(connectTimeout))
}

// newClientTransport is the connection pool to the other replicas, which are never drained
// and whose sockets nobody reads.
func newClientTransport(sc Scenario) *httpwire.Client {
	d := &net.Dialer{Timeout: sc.scale(connectTimeout)}
	idle := 256
	if sc.Protocol == ProtocolTCP {
		// A TCP port: one connection per request, closed after the response.
		idle = -1
	}
	return &httpwire.Client{
		Dial: func(ctx context.Context, addr string) (net.Conn, error) {
			conn, err := d.DialContext(ctx, "tcp", addr)
			if tcp, ok := conn.(*net.TCPConn); ok {
				// Close with a reset rather than a FIN: these connections stand for other
				// pods' sockets, which would not be in this machine's socket table.
				_ = tcp.SetLinger(0)
			}
			return conn, err
		},
		MaxIdlePerHost: idle,
		// Envoy's upstream pools do not silently resend a request that may have reached the
		// server; retries are the policy's business (fleet.request).
		NoStaleRetry: true,
	}
}

// warmConcurrency bounds the warm-up requests in flight, so that they do not storm the pod.
const warmConcurrency = 32

// warm opens, before the run, a connection from every pooling client that will send: a
// client of a running service has sent to the pod within its pool's idle timeout (an hour
// for Envoy), so when the warm-up begins its pool holds a connection that has carried
// requests. One request without work stands for them; it is not counted.
func (f *fleet) warm(ctx context.Context) {
	sem := make(chan struct{}, warmConcurrency)
	var wg sync.WaitGroup
	for i := range f.plans {
		if len(f.plans[i].arrivals) == 0 || !f.plans[i].policy(f.sc).reuse {
			continue
		}
		f.pools[i] = f.newPool(i)
		wg.Add(1)
		sem <- struct{}{}
		go func(tr podPool) {
			defer func() { <-sem; wg.Done() }()
			attempt(ctx, tr, f.podAddr, 0)
		}(f.pools[i])
	}
	wg.Wait()
}

// start launches every client at start; it returns at once. wait blocks until all requests
// are answered.
func (f *fleet) start(ctx context.Context, start time.Time) {
	for i := range f.plans {
		f.wg.Add(1)
		go f.runClient(ctx, start, i)
	}
	for k := range f.sc.Streams {
		f.wg.Add(1)
		go f.runStream(ctx, len(f.plans)+k)
	}
}

// runStream holds one long-lived stream open to the pod from the start of the run until the
// app closes it (or the run ends). It is client i, with its own address.
func (f *fleet) runStream(ctx context.Context, i int) {
	defer f.wg.Done()
	tr := f.newPool(i)
	defer tr.closeAll()
	f.mu.Lock()
	f.requests++
	f.mu.Unlock()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+f.podAddr+"/stream", nil)
	if err != nil {
		return
	}
	req.Header.Set(streamHeader, "1")
	req.Header.Set(workHeader, maxLag.String())
	outcome := outcomeOK
	if resp, err := tr.Do(req); err != nil {
		outcome = failStreamCut
	} else {
		if _, err := io.Copy(io.Discard, resp.Body); err != nil || resp.StatusCode != http.StatusOK {
			outcome = failStreamCut
		}
		_ = resp.Body.Close()
	}
	if ctx.Err() != nil {
		return
	}
	f.mu.Lock()
	f.outcomes[outcome]++
	if isFailure(outcome) {
		f.failedAt = append(f.failedAt, time.Now())
	}
	f.mu.Unlock()
}

func (f *fleet) wait() { f.wg.Wait() }

// runClient sends client i's planned requests to the pod. Its EDS update, at t0 plus its
// lag, goes to its pool on a timer of its own: the pool may keep connections open after the
// client's last request, until then or (for the kinds of clients that keep them) until their
// idle timeout or the end of the run, so the pool outlives this function.
func (f *fleet) runClient(ctx context.Context, start time.Time, i int) {
	defer f.wg.Done()
	p := &f.plans[i]
	tr := f.pools[i]
	if tr == nil {
		tr = f.newPool(i)
	}
	removeAt := start.Add(f.sc.scale(f.sc.Warmup + p.lag))
	removal := time.AfterFunc(time.Until(removeAt), func() {
		f.noteLate(&f.lateRemoval, time.Since(removeAt), p.lag)
		tr.removeHost()
	})
	context.AfterFunc(ctx, func() {
		removal.Stop()
		tr.closeAll()
	})
	var inFlight sync.WaitGroup
	defer inFlight.Wait()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for i, at := range p.arrivals {
		sendAt := start.Add(f.sc.scale(at))
		timer.Reset(time.Until(sendAt))
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		if tr.routedAway() {
			return // a holder whose connections to the pod are gone: the rest goes elsewhere
		}
		if at >= f.sc.Warmup {
			f.noteLate(&f.lateSend, time.Since(sendAt), at-f.sc.Warmup)
		}
		f.mu.Lock()
		f.requests++
		f.mu.Unlock()
		inFlight.Add(1)
		go func(work time.Duration) {
			defer inFlight.Done()
			outcome := f.request(ctx, tr, p, work)
			f.mu.Lock()
			if outcome == outcomeElsewhere {
				f.requests-- // it never reached the pod
				f.mu.Unlock()
				return
			}
			f.outcomes[outcome]++
			if isFailure(outcome) {
				f.failedAt = append(f.failedAt, time.Now())
			}
			f.mu.Unlock()
		}(p.work[i])
	}
}

// noteLate records that a client action planned for planned (from t0) ran late by by.
func (f *fleet) noteLate(l *clientLateness, by, planned time.Duration) {
	f.mu.Lock()
	l.note(by, planned.Seconds())
	f.mu.Unlock()
}

func isFailure(outcome string) bool {
	switch outcome {
	case outcomeOK, outcomeRetriedRefused, outcomeRetried503, "":
		return false
	}
	return true
}

// request sends one request to the pod and, if Istio's default policy allows, retries it
// on another replica. It returns the outcome kind; "" means the run was cancelled.
func (f *fleet) request(ctx context.Context, tr roundTripper, p *clientPlan, work time.Duration) string {
	reqCtx := ctx
	if f.sc.RouteTimeout > 0 {
		var cancel context.CancelFunc
		reqCtx, cancel = context.WithTimeout(ctx, f.sc.scale(f.sc.RouteTimeout))
		defer cancel()
	}
	first := attemptClose(reqCtx, tr, f.podAddr, work, p.serverCloses)
	f.answeredOne()
	if ctx.Err() != nil {
		return ""
	}
	if first == attemptElsewhere {
		return outcomeElsewhere
	}
	retryAs := outcomeRetriedRefused
	if f.sc.meshless() {
		outcome, retry := meshlessOutcome(p.kind, first, f.sc.Retries)
		if !retry {
			return outcome
		}
		return f.retry(ctx, reqCtx, work, retryAs)
	}
	if f.sc.Protocol == ProtocolTCP {
		// A TCP proxy has no request to retry: whatever went wrong, the caller saw it.
		switch first {
		case attemptOK:
			return outcomeOK
		case attemptRefused:
			return failRefused
		case attemptTimeout:
			return failTimeout
		default:
			return failTCPClosed
		}
	}
	if f.sc.linkerd() {
		// Linkerd retries only what a route's retry annotations allow, none by default. A
		// refused connection is another matter: the client proxy's balancer sends the request
		// to a ready endpoint instead (see FIDELITY.md in pkg/mesh/linkerd: not confirmed against
		// the proxy's source), modelled as Istio's connect-failure retry below.
		switch first {
		case attempt502:
			return fail502
		case attempt503:
			return fail503
		}
	}
	switch first {
	case attemptOK:
		return outcomeOK
	case attemptRefused:
		retryAs = outcomeRetriedRefused
	case attempt503:
		retryAs = outcomeRetried503
	case attemptTimeout:
		return failTimeout
	case attemptReset:
		return failCut
	default:
		return failOther
	}
	if f.sc.Retries == 0 {
		if first == attemptRefused {
			return failRefused
		}
		return fail503
	}
	return f.retry(ctx, reqCtx, work, retryAs)
}

// retry sends a request that failed on the pod to another replica, after Envoy's back-off,
// and returns retryAs if it succeeds there. previous_hosts: the retry goes to another
// replica, which is healthy; one retry is therefore enough and the second of the budget is
// never used.
func (f *fleet) retry(ctx, reqCtx context.Context, work time.Duration, retryAs string) string {
	t := time.NewTimer(f.sc.scale(retryBackoff))
	select {
	case <-reqCtx.Done():
		t.Stop()
		if ctx.Err() != nil {
			return ""
		}
		return failTimeout
	case <-t.C:
	}
	switch attempt(reqCtx, f.other, f.otherAddr, work) {
	case attemptOK:
		return retryAs
	case attemptTimeout:
		if ctx.Err() != nil {
			return ""
		}
		return failTimeout
	default:
		return failRetryErr
	}
}

type attemptResult int

const (
	attemptOK attemptResult = iota
	attemptRefused
	attempt503
	attempt502
	attemptOtherStatus
	attemptReset
	attemptTimeout
	// attemptElsewhere: the client's routing sent the connection to another replica.
	attemptElsewhere
)

// attempt is one try against addr.
func attempt(ctx context.Context, tr roundTripper, addr string, work time.Duration) attemptResult {
	return attemptClose(ctx, tr, addr, work, false)
}

// attemptClose is one try against addr; closeConn asks Connection: close, so that the
// server closes the connection after its response.
func attemptClose(ctx context.Context, tr roundTripper, addr string, work time.Duration, closeConn bool) attemptResult {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/", nil)
	if err != nil {
		return attemptOtherStatus
	}
	req.Header.Set(workHeader, work.String())
	req.Close = closeConn
	resp, err := tr.Do(req)
	if err != nil {
		var opErr *net.OpError
		switch {
		case errors.Is(err, errRoutedAway):
			return attemptElsewhere
		case ctx.Err() != nil:
			return attemptTimeout
		case errors.As(err, &opErr) && opErr.Op == "dial", errors.Is(err, errRefusedStream):
			return attemptRefused
		default:
			return attemptReset
		}
	}
	_, copyErr := io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusServiceUnavailable:
		return attempt503
	case resp.StatusCode == http.StatusBadGateway:
		return attempt502
	case copyErr != nil:
		if ctx.Err() != nil {
			return attemptTimeout
		}
		return attemptReset
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		return attemptOK
	default:
		return attemptOtherStatus
	}
}

// clientTally is what the fleet saw, for the result.
type clientTally struct {
	requests int
	outcomes map[string]int
	failedAt []time.Time
	// lateSend and lateRemoval: how late the clients ran at worst (fleet).
	lateSend, lateRemoval clientLateness
}

func (f *fleet) tally() clientTally {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := clientTally{requests: f.requests, outcomes: map[string]int{}, lateSend: f.lateSend, lateRemoval: f.lateRemoval}
	for k, v := range f.outcomes {
		out.outcomes[k] = v
	}
	out.failedAt = append(out.failedAt, f.failedAt...)
	sort.Slice(out.failedAt, func(i, j int) bool { return out.failedAt[i].Before(out.failedAt[j]) })
	return out
}

func (t clientTally) failures() (n int, byKind map[string]int) {
	byKind = map[string]int{}
	for k, v := range t.outcomes {
		if isFailure(k) {
			n += v
			byKind[k] = v
		}
	}
	return n, byKind
}
