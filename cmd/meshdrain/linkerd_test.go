package main

import (
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meshdrain/meshdrain/pkg/localhttp/localhttptest"
	"github.com/meshdrain/meshdrain/pkg/sim/envoysim"
	"github.com/meshdrain/meshdrain/pkg/sim/linkerdsim"
)

// These run the binary as the kubelet would against pkg/sim/linkerdsim, the Linkerd proxy
// emulator, on 127.0.0.1: the app's preStop of a Linkerd pod.

// linkerdPod is an emulated proxy with inbound port 8080 in front of an app, and its client.
type linkerdPod struct {
	proxy *linkerdsim.Sidecar
	*emulation
}

func startLinkerdPod(t *testing.T, cfg linkerdsim.Config) *linkerdPod {
	t.Helper()
	proxy, e := linkerdEmulation(t, cfg)
	return &linkerdPod{proxy: proxy, emulation: e}
}

// traffic sends a request every 5 ms until stop; the first is answered before it returns, so
// the port has its series when prestop starts.
func (p *linkerdPod) traffic(t *testing.T) {
	p.send(&http.Client{Timeout: time.Second, Transport: &http.Transport{Proxy: nil}})
	p.start()
}

func linkerdFlags(admin string) []string {
	return []string{"prestop", "--mesh", "linkerd", "--admin", admin, "--poll", poll.String(), "--quiet", quiet.String(), "--connect-timeout", "500ms", "--min-wait", "0"}
}

// A native proxy keeps serving through the app's preStop: prestop sees the clients stop and
// returns after the quiet window, with no drain call and the final line saying why.
func TestPrestopLinkerdNativeQuiet(t *testing.T) {
	pod := startLinkerdPod(t, linkerdsim.Config{})
	pod.traffic(t)
	pod.proxy.Terminate() // t0: a native sidecar is left alone
	// The clients stop once 40 requests have been answered since the hook began watching:
	// the hook sees them however a busy machine spaces them.
	var once sync.Once
	res := runBinaryWatching(append(linkerdFlags(pod.proxy.AdminURL()), "--port", "8080"), nil, func(line string) {
		if strings.Contains(line, `"phase":"watch"`) {
			once.Do(func() { pod.afterAnswers(40, pod.stop) })
		}
	})
	if res.startErr != nil {
		t.Fatal(res.startErr)
	}
	if res.code != 0 {
		t.Fatalf("exit %d\n%s", res.code, res.stderr)
	}
	final := res.final(t)
	if final["reason"] != "quiet" || final["naming"] != "linkerd" || final["signal"] != "http-requests" || final["active_at_end"] != 0.0 ||
		final["drain_called"] != false || !strings.Contains(final["no_drain_call"].(string), "no drain endpoint") {
		t.Errorf("final event %v", final)
	}
	if n, _ := final["requests_after_drain"].(float64); n < 20 {
		t.Errorf("requests seen while watching: %v", final["requests_after_drain"])
	}
	if n, _ := final["frozen_answers"].(float64); n != 0 {
		t.Errorf("a live proxy's answers counted frozen: %v", final)
	}
	// Within the window the hook used (--quiet, longer where a busy machine spaced the
	// requests further apart) + 4 polls + the time it waited for a CPU (none when strict).
	late, allow := res.exited.Sub(pod.last()), res.runDelay
	window := time.Duration(final["window_ms"].(float64)) * time.Millisecond
	if strictTiming() {
		allow, window = 0, quiet
	}
	if late < quiet || late > window+4*poll+allow {
		t.Errorf("exited %v after the last request, want within [quiet, window %v + 4 polls + %v waited for a CPU] = [%v, %v]", late, window, allow, quiet, window+4*poll+allow)
	}
	if pod.proxy.State() != linkerdsim.StateRunning {
		t.Errorf("proxy state %s: prestop must not stop a Linkerd proxy", pod.proxy.State())
	}
}

// A classic proxy without proxy-wait-before-exit-seconds gets SIGTERM at the deletion and
// closes every port at once, the admin port with them: under traffic that is the incident
// (sidecar-gone-busy, exit 5) and the fix named is Linkerd's; after the clients left it is
// sidecar-gone, exit 0.
func TestPrestopLinkerdClassicSIGTERM(t *testing.T) {
	pod := startLinkerdPod(t, linkerdsim.Config{Injection: linkerdsim.InjectionClassic})
	pod.traffic(t)
	res := runBinary(t, nil, append(linkerdFlags(sigtermOnSeenTraffic(t, pod)), "--grace-period", "30s", "--app-drain", "5s")...)
	final := res.final(t)
	if res.code != 5 || final["reason"] != "sidecar-gone-busy" {
		t.Fatalf("exit %d\n%s", res.code, res.stderr)
	}
	fix, _ := final["fix"].(string)
	for _, want := range []string{`proxy-wait-before-exit-seconds: "29"`, "native sidecar"} {
		if !strings.Contains(fix, want) {
			t.Errorf("fix %q lacks %q", fix, want)
		}
	}
	if strings.Contains(res.stderr, "terminationDrainDuration") || strings.Contains(res.stderr, "EXIT_ON_ZERO") {
		t.Error("an Istio fix for a Linkerd proxy")
	}
	if n, _ := final["arrivals_recent"].(float64); n == 0 {
		t.Errorf("no recent arrivals reported: %v", final)
	}

	// The clients have left before the hook starts: what the proxy's end is judged by is
	// then the arrivals the hook saw (none), not how soon a busy machine let a timer stop
	// the traffic (the quiet window adapts to the gaps it sees, and a starved sender's gaps
	// stretch it past the proxy's end).
	pod = startLinkerdPod(t, linkerdsim.Config{Injection: linkerdsim.InjectionClassic})
	pod.traffic(t)
	pod.stopAndWait()
	time.AfterFunc(800*time.Millisecond, pod.proxy.Terminate)
	res = runBinary(t, nil, append(linkerdFlags(pod.proxy.AdminURL()), "--min-wait", "1200ms")...)
	if res.code != 0 || res.final(t)["reason"] != "sidecar-gone" {
		t.Errorf("after the clients left: exit %d\n%s", res.code, res.stderr)
	}
}

// sigtermOnSeenTraffic is the admin address of pod's classic proxy as the hook reaches it,
// and gives the proxy its SIGTERM once the hook has seen live traffic: from its 4th read on,
// once a request has been answered, the next read (which counts that request) is the last
// one answered; then the admin port refuses and the proxy stops. A timer from the test's
// start can end the proxy before a hook that a busy machine started late has read twice,
// and the case would test a proxy gone under traffic the hook never saw.
func sigtermOnSeenTraffic(t *testing.T, pod *linkerdPod) string {
	target, err := url.Parse(pod.proxy.AdminURL())
	if err != nil {
		t.Fatal(err)
	}
	var arm sync.Once
	var answered atomic.Bool
	admin := httputil.NewSingleHostReverseProxy(target)
	admin.ErrorLog = log.New(io.Discard, "", 0) // reads cut by the port's close are the point
	gate := &atPoll{next: admin, due: func(poll int32) bool {
		if poll >= 4 {
			arm.Do(func() { pod.onNextAnswer(func() { answered.Store(true) }) })
		}
		return answered.Load()
	}}
	srv := httptest.NewServer(gate)
	t.Cleanup(srv.Close)
	// The admin port goes first: the proxy's own, closed by its SIGTERM, would answer the
	// hook's next read through this gate as a 502, not as a port that refuses.
	gate.f = func() { srv.Close(); pod.proxy.Terminate() }
	return srv.URL
}

// A proxy no request has reached yet (or for 10 minutes) has no series for the app's port:
// without --port there is nothing to watch. The hint names no Istio annotation, but the
// 10-minute rule and --port; with --port the silent port reads as quiet, with a warning.
func TestPrestopLinkerdNoSignal(t *testing.T) {
	pod := startLinkerdPod(t, linkerdsim.Config{})
	res := runBinary(t, nil, append(linkerdFlags(pod.proxy.AdminURL()), "--fallback-wait", "200ms")...)
	if res.code != 4 || res.final(t)["reason"] != "no-signal" {
		t.Fatalf("exit %d\n%s", res.code, res.stderr)
	}
	for _, istio := range []string{"sidecar.istio.io", "statsInclusionPrefixes", "fix_plain_envoy"} {
		if strings.Contains(res.stderr, istio) {
			t.Errorf("no-signal for Linkerd names %q", istio)
		}
	}
	if !strings.Contains(res.stderr, "no request in the last 10 minutes has no series") || !strings.Contains(res.stderr, "needs no annotation") {
		t.Errorf("the hint does not explain Linkerd's series:\n%s", res.stderr)
	}

	res = runBinary(t, nil, append(linkerdFlags(pod.proxy.AdminURL()), "--port", "8080")...)
	if res.code != 0 || res.final(t)["reason"] != "quiet" || !strings.Contains(res.stderr, "has no series for") {
		t.Errorf("--port with no series: exit %d\n%s", res.code, res.stderr)
	}
}

// --mesh auto asks the admin port: Linkerd is read without a drain call, Envoy is drained as
// always, and no admin port at all is no-sidecar after --connect-timeout.
func TestPrestopMeshAuto(t *testing.T) {
	pod := startLinkerdPod(t, linkerdsim.Config{})
	pod.traffic(t)
	// The clients stop once 20 requests have been answered since the hook began watching: a
	// timer from the start would stop them before a slow start saw enough of them to know
	// their rate, and the rule would then rightly wait to the deadline.
	var once sync.Once
	res := runBinaryWatching([]string{"prestop", "--mesh", "auto", "--admin", pod.proxy.AdminURL(), "--poll", poll.String(), "--quiet", quiet.String(), "--min-wait", "0"}, nil, func(line string) {
		if strings.Contains(line, `"phase":"watch"`) {
			once.Do(func() { pod.afterAnswers(20, pod.stop) })
		}
	})
	if res.startErr != nil {
		t.Fatal(res.startErr)
	}
	if res.code != 0 || !strings.Contains(res.stderr, `"msg":"sidecar detected","component":"prestop","mesh":"linkerd"`) ||
		res.final(t)["naming"] != "linkerd" || res.final(t)["drain_called"] != false {
		t.Errorf("auto, Linkerd: exit %d\n%s", res.code, res.stderr)
	}

	envoy := emulated(t, envoysim.Config{}).sim
	res = runBinary(t, nil, "prestop", "--mesh", "auto", "--admin", envoy.AdminURL(), "--poll", poll.String(), "--quiet", quiet.String(), "--min-wait", "0")
	if res.code != 0 || !strings.Contains(res.stderr, `"mesh":"envoy"`) || res.final(t)["drain_called"] != true || res.final(t)["no_drain_call"] != nil {
		t.Errorf("auto, Envoy: exit %d\n%s", res.code, res.stderr)
	}

	start := time.Now()
	res = runBinary(t, nil, "prestop", "--mesh", "auto", "--admin", localhttptest.RefusingURL(t), "--connect-timeout", "300ms", "--min-wait", "0")
	// Well before the deadline (24 s) or the fallback wait (5 s), allowing the time a busy
	// machine kept the hook off the CPU.
	if res.code != 0 || res.final(t)["reason"] != "no-sidecar" || res.exited.Sub(start) > 2*time.Second+res.allowance() {
		t.Errorf("auto, nothing: exit %d after %v (%v of it waiting for a CPU)\n%s", res.code, res.exited.Sub(start), res.runDelay, res.stderr)
	}

	res = runBinary(t, []string{"MESHDRAIN_FALLBACK_WAIT=300ms"}, "prestop", "--mesh", "auto", "--admin", staticAdmin(t, "hello"))
	if res.code != 2 || res.final(t)["reason"] != "config-error" || !strings.Contains(res.stderr, "cannot tell which sidecar") {
		t.Errorf("auto, not a sidecar: exit %d\n%s", res.code, res.stderr)
	}
}
