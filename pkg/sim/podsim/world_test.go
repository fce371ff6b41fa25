package podsim

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshdrain/meshdrain/pkg/localhttp/localhttptest"
)

// post sends one request with a service time to addr.
func post(t *testing.T, addr string, work time.Duration) (int, error) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/", nil)
	req.Header.Set(workHeader, work.String())
	resp, err := (&http.Transport{}).RoundTrip(req)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// A graceful app finishes what it has and refuses new connections; an immediate one cuts.
func TestAppShutdown(t *testing.T) {
	for _, mode := range []AppShutdown{AppGraceful, AppImmediate} {
		t.Run(string(mode), func(t *testing.T) {
			a, err := startApp(2, 1, mode)
			if err != nil {
				t.Fatal(err)
			}
			defer a.Kill()
			type result struct {
				code int
				err  error
			}
			inFlight := make(chan result, 1)
			go func() {
				code, err := post(t, a.Addr(), 100*time.Millisecond)
				inFlight <- result{code, err}
			}()
			waitFor(t, func() bool { a.mu.Lock(); defer a.mu.Unlock(); return a.inFlight == 1 })
			a.Terminate()
			if _, err := net.DialTimeout("tcp", a.Addr(), time.Second); err == nil {
				t.Error("app still accepts connections after SIGTERM")
			}
			r := <-inFlight
			<-a.Done()
			switch mode {
			case AppGraceful:
				if r.err != nil || r.code != 200 {
					t.Errorf("in-flight request: %d, %v; want 200", r.code, r.err)
				}
			case AppImmediate:
				if r.err == nil {
					t.Errorf("in-flight request answered %d; want it cut", r.code)
				}
			}
		})
	}
}

// The worker pool bounds concurrency as Tomcat's maxThreads does.
func TestAppWorkerPool(t *testing.T) {
	a, err := startApp(1, 1, AppGraceful)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Kill()
	start := time.Now()
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() { defer wg.Done(); _, _ = post(t, a.Addr(), 20*time.Millisecond) }()
	}
	wg.Wait()
	if elapsed := time.Since(start); elapsed < 60*time.Millisecond {
		t.Errorf("3 requests of 20ms on 1 thread took %v", elapsed)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met")
		}
		time.Sleep(time.Millisecond)
	}
}

// Istio's default retry policy: a refused connection and a 503 are retried on another
// replica; a request cut after it was sent is not.
func TestFleetRetryPolicy(t *testing.T) {
	sc := UserScenario()
	sc.TimeScale = 0.001
	other, err := startOtherReplicas(sc.TimeScale)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()

	refusing := localhttptest.RefusingAddr(t)
	unavailable := serve(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	cutting := serve(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close()
		}
	}))
	slow := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(time.Second):
		}
	}))

	for _, tc := range []struct {
		name    string
		addr    string
		retries int
		timeout time.Duration
		want    string
	}{
		{"refused", refusing, 2, 0, outcomeRetriedRefused},
		{"503", unavailable, 2, 0, outcomeRetried503},
		{"cut", cutting, 2, 0, failCut},
		{"refused without retries", refusing, 0, 0, failRefused},
		{"503 without retries", unavailable, 0, 0, fail503},
		{"route timeout", slow, 2, 20 * time.Second, failTimeout},
		{"healthy", other.Addr(), 2, 0, outcomeOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sc := sc
			sc.Retries, sc.RouteTimeout = tc.retries, tc.timeout
			f := newFleet(sc, nil, tc.addr, other.Addr())
			if got := f.request(context.Background(), newClientTransport(sc), &clientPlan{}, time.Millisecond); got != tc.want {
				t.Errorf("outcome %q, want %q", got, tc.want)
			}
		})
	}
}

func serve(t *testing.T, h http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

// fakeSidecar is a plain reverse proxy with pilot-agent's timing, enough to test the
// kubelet's ordering without the emulator.
type fakeSidecar struct {
	mode      SidecarMode
	tdd       time.Duration
	ln        net.Listener
	srv       *http.Server
	done      chan struct{}
	appExited chan struct{}
	once      sync.Once
	appOnce   sync.Once
	mu        sync.Mutex
	errs      []sidecarError
	reason    string
}

func startFake(sc Scenario, spec SidecarSpec, _ Strategy, appAddr string) (sidecar, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	f := &fakeSidecar{mode: spec.Mode, tdd: sc.scale(spec.TerminationDrainDuration), ln: ln,
		done: make(chan struct{}), appExited: make(chan struct{})}
	proxy := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: "http", Host: appAddr})
	proxy.ErrorHandler = func(w http.ResponseWriter, _ *http.Request, err error) {
		flags := "UC"
		var opErr *net.OpError
		if errors.As(err, &opErr) && opErr.Op == "dial" {
			flags = "UF"
		}
		f.mu.Lock()
		f.errs = append(f.errs, sidecarError{At: time.Now(), Code: 503, Flags: flags})
		f.mu.Unlock()
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	f.srv = &http.Server{Handler: proxy}
	go func() { _ = f.srv.Serve(ln) }()
	return f, nil
}

func (f *fakeSidecar) AdminURL() string       { return "http://127.0.0.1:1" }
func (f *fakeSidecar) InboundAddr(int) string { return f.ln.Addr().String() }
func (f *fakeSidecar) Done() <-chan struct{}  { return f.done }
func (f *fakeSidecar) Kill()                  { f.exit("killed") }
func (f *fakeSidecar) Close() error           { f.Kill(); return nil }
func (f *fakeSidecar) AppExited()             { f.appOnce.Do(func() { close(f.appExited) }) }
func (f *fakeSidecar) ExitReason() string     { f.mu.Lock(); defer f.mu.Unlock(); return f.reason }
func (f *fakeSidecar) Errors() []sidecarError {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]sidecarError(nil), f.errs...)
}
func (f *fakeSidecar) exit(reason string) {
	f.once.Do(func() {
		f.mu.Lock()
		f.reason = reason
		f.mu.Unlock()
		f.srv.Close()
		close(f.done)
	})
}

func (f *fakeSidecar) Terminate() {
	switch f.mode {
	case SidecarNative:
		go func() {
			select {
			case <-f.appExited:
				f.exit("after app")
			case <-f.done:
			}
		}()
	default:
		time.AfterFunc(f.tdd, func() { f.exit("terminationDrainDuration") })
	}
}

// tinyScenario runs a whole pod deletion in under a second of real time (the 30s grace
// period is 0.6s; 3s under the race detector, which slows the world tenfold), slow enough
// that scheduling jitter stays well below the tolerances on an idle machine.
func tinyScenario() Scenario {
	sc := UserScenario()
	sc.QPS, sc.Clients = 20, 2
	sc.EDSLag = Dist{Median: time.Second, P99: time.Second}
	sc.Warmup = time.Second
	sc.TimeScale = 0.02
	if raceEnabled {
		sc.TimeScale = 0.1
	}
	return sc
}

func TestKubeletOrdering(t *testing.T) {
	sc := tinyScenario()
	classic := ModeSidecar(SidecarClassic, 5*time.Second, 45*time.Second, 5*time.Second)
	native := ModeSidecar(SidecarNative, 5*time.Second, 45*time.Second, 5*time.Second)
	sleep := func(d time.Duration) Strategy { return Strategy{Kind: StrategySleep, Sleep: d} }
	stop := timerLateness()
	results, err := Run(context.Background(), Options{
		Scenario:     sc,
		Strategies:   []Strategy{{Kind: StrategyNone}, sleep(10 * time.Second), sleep(40 * time.Second)},
		Sidecars:     []SidecarSpec{classic, native},
		startSidecar: startFake,
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != 6 {
		t.Fatalf("%d results", len(results))
	}
	byName := map[string]Result{}
	for _, r := range results {
		byName[r.Strategy+"/"+r.Sidecar] = r
		if r.Requests == 0 {
			t.Errorf("%s/%s: no requests", r.Strategy, r.Sidecar)
		}
	}
	// Generous bounds: the point is the order of events, not the exact timing. A timer of the
	// run may fire as late as this process's timers did meanwhile.
	late := stop().Seconds() / sc.TimeScale
	t.Logf("timers of this process fired up to %.2fs of pod time late", late)
	near := func(got, want float64) bool { return got >= want-0.01 && got <= want+3+late }

	r := byName["none/classic"]
	if !near(r.AppStopS, 0) || !near(r.SidecarExit, 5) || !r.Killed {
		t.Errorf("none/classic: app stop %.2f, sidecar exit %.2f, killed %v", r.AppStopS, r.SidecarExit, r.Killed)
	}
	// Requests after SIGTERM are refused by the app and retried; only those caught in flight
	// by the sidecar's kill at 5s may fail (at this tiny scale, a few).
	if r.Sidecar5xx == 0 || r.Retried == 0 || r.ClientFailures != r.FailuresByKind[failCut] {
		t.Errorf("none/classic: %d sidecar 5xx, %d retried, failures %v; want refused-and-retried requests", r.Sidecar5xx, r.Retried, r.FailuresByKind)
	}
	r = byName["sleep:10s/classic"]
	if !near(r.AppStopS, 10) || !near(r.PodGoneS, 10) {
		t.Errorf("sleep:10s/classic: app stop %.2f, pod gone %.2f", r.AppStopS, r.PodGoneS)
	}
	// A preStop longer than the grace period: everything is SIGKILLed at 30s.
	r = byName["sleep:40s/native"]
	if !r.Killed || !near(r.PodGoneS, 30) || len(r.KilledDetail) != 2 {
		t.Errorf("sleep:40s/native: killed %v %v, pod gone %.2f", r.Killed, r.KilledDetail, r.PodGoneS)
	}
	// Native: Envoy leaves only after the app.
	r = byName["sleep:10s/native"]
	if r.SidecarExit < r.AppExitS || !near(r.SidecarExit, 10) || r.Killed {
		t.Errorf("sleep:10s/native: app exit %.2f, sidecar exit %.2f, killed %v", r.AppExitS, r.SidecarExit, r.Killed)
	}
}

// timerLateness measures, until the function it returns is called, how late a timer of this
// process fires at worst (it arms one every millisecond): what a bound on when a timer of a
// run fired must allow for on a loaded machine.
func timerLateness() (stop func() time.Duration) {
	done, worst := make(chan struct{}), make(chan time.Duration, 1)
	go func() {
		var late time.Duration
		t := time.NewTimer(time.Millisecond)
		defer t.Stop()
		due := time.Now().Add(time.Millisecond)
		for {
			select {
			case <-done:
				worst <- late
				return
			case <-t.C:
				late = max(late, time.Since(due))
				due = time.Now().Add(time.Millisecond)
				t.Reset(time.Millisecond)
			}
		}
	}()
	return func() time.Duration { close(done); return <-worst }
}

func TestRunStopsOnCancel(t *testing.T) {
	sc := tinyScenario()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := Run(ctx, Options{Scenario: sc, Strategies: DefaultStrategies()[:1],
		Sidecars: []SidecarSpec{IstioDefaultSidecar()}, startSidecar: startFake})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("err = %v, want context.Canceled", err)
	}
}

// killOnly is a sidecar the kubelet can only kill: enough for its end-of-run bookkeeping.
type killOnly struct{ sidecar }

func (killOnly) Kill()              {}
func (killOnly) ExitReason() string { return "killed" }

// TestSidecarKilledWithTheGracePeriod: a classic sidecar whose terminationDrainDuration is
// the grace period, as plan sets it, is killed by pilot-agent and the kubelet at one moment;
// whichever of the two timers fires first by a millisecond, the row says both, as plan's
// timeline does ("t0+52s pilot-agent kills Envoy; t0+52s kubelet SIGKILL"). Apart, each
// kill is its own.
func TestSidecarKilledWithTheGracePeriod(t *testing.T) {
	t0 := time.Now()
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	run := func(tdd time.Duration, kill func(p *podRun)) []string {
		spec := ModeSidecar(SidecarClassic, tdd, 45*time.Second, 5*time.Second)
		spec.GracePeriod = 52 * time.Second
		p := newPodRun(UserScenario(), nil, Strategy{Kind: StrategyNone}, spec)
		p.clock = podClock{t0: t0, scale: 1}
		p.hook = &preStop{cancel: func() {}}
		p.side = killOnly{}
		p.appExited = true // the app exited by 51 s
		kill(p)
		return p.res.KilledDetail
	}
	pilotAgentFirst := func(p *podRun) { p.sidecarHasExited(at(52)) }
	kubeletFirst := func(p *podRun) { p.gracePeriodOver(at(52)); p.sidecarHasExited(at(52.01)) }
	for _, tc := range []struct {
		name string
		tdd  time.Duration
		kill func(*podRun)
		want string
	}{
		{"together, pilot-agent's timer first", 52 * time.Second, pilotAgentFirst, "istio-proxy by kubelet and pilot-agent at 52.0s"},
		{"together, the kubelet's timer first", 52 * time.Second, kubeletFirst, "istio-proxy by kubelet and pilot-agent at 52.0s"},
		{"pilot-agent before the grace period", 5 * time.Second, func(p *podRun) { p.sidecarHasExited(at(5)) }, "envoy by pilot-agent at 5.0s"},
		{"the grace period before pilot-agent", 60 * time.Second, kubeletFirst, "istio-proxy by kubelet at 52.0s"},
	} {
		if got := run(tc.tdd, tc.kill); len(got) != 1 || got[0] != tc.want {
			t.Errorf("%s: killed %q, want %q", tc.name, got, tc.want)
		}
	}
}

// TestDrainRegime: each row says who drained its sidecar and when.
func TestDrainRegime(t *testing.T) {
	sc := UserScenario()
	held, err := RecommendedNativeSidecar(sc)
	if err != nil {
		t.Fatal(err)
	}
	misdeferred, err := RegimeASidecar(sc)
	if err != nil {
		t.Fatal(err)
	}
	misdeferred.MeshdrainDrainAtEnd = true
	noop := SidecarSpec{Name: "no-op preStop", Mode: SidecarNative, DeferDrain: true}
	md, sleep := Strategy{Kind: StrategyMeshdrain}, Strategy{Kind: StrategySleep, Sleep: 5 * time.Second}
	for _, tc := range []struct {
		spec  SidecarSpec
		strat Strategy
		want  string
	}{
		{IstioDefaultSidecar(), md, "drain regime (a): the sidecar drains at the deletion (pilot-agent"},
		{ModeSidecar(SidecarNative, 0, 45*time.Second, 0), sleep, "drain regime (a): the sidecar drains at the deletion (the native sidecar's preStop)"},
		{held, md, "drain regime (b): the sidecar's drain is deferred by meshdrain hold until meshdrain's --drain-at end"},
		{held, sleep, "drain regime (b) without meshdrain: meshdrain hold drains the sidecar"},
		{noop, md, "drain regime (b): the sidecar's drain is deferred until meshdrain's --drain-at end"},
		{noop, sleep, "nothing drains before the app exits"},
		{misdeferred, md, "drain regime (a), though meshdrain runs --drain-at end"},
		{LinkerdDefaultSidecar(), md, "no drain regime: Linkerd has no drain call"},
	} {
		if got := drainRegime(tc.spec, tc.strat); !strings.Contains(got, tc.want) {
			t.Errorf("%s with %s: %q, want %q", tc.spec.Name, tc.strat, got, tc.want)
		}
	}
}
