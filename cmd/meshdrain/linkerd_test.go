package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshdrain/meshdrain/pkg/envoysim"
	"github.com/meshdrain/meshdrain/pkg/linkerdsim"
)

// These run the binary as the kubelet would against pkg/linkerdsim, the Linkerd proxy
// emulator, on 127.0.0.1: the app's preStop of a Linkerd pod.

// linkerdPod is an emulated proxy with inbound port 8080 in front of an app, and a client
// sending a request every 5 ms through it while traffic runs.
type linkerdPod struct {
	proxy    *linkerdsim.Sidecar
	mu       sync.Mutex
	stopped  chan struct{}
	once     sync.Once
	lastSent time.Time
}

func startLinkerdPod(t *testing.T, cfg linkerdsim.Config) *linkerdPod {
	t.Helper()
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") }))
	t.Cleanup(app.Close)
	cfg.Inbound = []linkerdsim.InboundPort{{Port: 8080, AppAddr: strings.TrimPrefix(app.URL, "http://")}}
	proxy, err := linkerdsim.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	p := &linkerdPod{proxy: proxy, stopped: make(chan struct{})}
	t.Cleanup(p.stop)
	return p
}

// traffic sends requests until stop; the first is answered before it returns, so the port
// has its series when prestop starts.
func (p *linkerdPod) traffic(t *testing.T) {
	client := &http.Client{Timeout: time.Second, Transport: &http.Transport{Proxy: nil}}
	send := func() {
		if resp, err := client.Get("http://" + p.proxy.InboundAddr(8080) + "/"); err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			p.mu.Lock()
			p.lastSent = time.Now()
			p.mu.Unlock()
		}
	}
	send()
	go func() {
		for {
			select {
			case <-p.stopped:
				return
			case <-time.After(5 * time.Millisecond):
			}
			send()
		}
	}()
}

func (p *linkerdPod) stop() { p.once.Do(func() { close(p.stopped) }) }

func (p *linkerdPod) last() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lastSent
}

func linkerdFlags(admin string) []string {
	return []string{"prestop", "--mesh", "linkerd", "--admin", admin, "--poll", poll.String(), "--quiet", quiet.String(), "--connect-timeout", "500ms"}
}

// A native proxy keeps serving through the app's preStop: prestop sees the clients stop and
// returns after the quiet window, with no drain call and the final line saying why.
func TestPrestopLinkerdNativeQuiet(t *testing.T) {
	pod := startLinkerdPod(t, linkerdsim.Config{})
	pod.traffic(t)
	pod.proxy.Terminate() // t0: a native sidecar is left alone
	time.AfterFunc(600*time.Millisecond, pod.stop)

	res := runBinary(t, nil, append(linkerdFlags(pod.proxy.AdminURL()), "--port", "8080")...)
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
	late := res.exited.Sub(pod.last())
	if late < quiet || late > quiet+4*poll {
		t.Errorf("exited %v after the last request, want within [quiet, quiet+4 polls] = [%v, %v]", late, quiet, quiet+4*poll)
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
	time.AfterFunc(400*time.Millisecond, pod.proxy.Terminate)
	res := runBinary(t, nil, append(linkerdFlags(pod.proxy.AdminURL()), "--grace-period", "30s", "--app-drain", "5s")...)
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

	pod = startLinkerdPod(t, linkerdsim.Config{Injection: linkerdsim.InjectionClassic})
	pod.traffic(t)
	time.AfterFunc(50*time.Millisecond, pod.stop)
	time.AfterFunc(800*time.Millisecond, pod.proxy.Terminate)
	res = runBinary(t, nil, append(linkerdFlags(pod.proxy.AdminURL()), "--min-wait", "1200ms")...)
	if res.code != 0 || res.final(t)["reason"] != "sidecar-gone" {
		t.Errorf("after the clients left: exit %d\n%s", res.code, res.stderr)
	}
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
	time.AfterFunc(200*time.Millisecond, pod.stop)
	res := runBinary(t, nil, "prestop", "--mesh", "auto", "--admin", pod.proxy.AdminURL(), "--poll", poll.String(), "--quiet", quiet.String())
	if res.code != 0 || !strings.Contains(res.stderr, `"msg":"sidecar detected","component":"prestop","mesh":"linkerd"`) ||
		res.final(t)["naming"] != "linkerd" || res.final(t)["drain_called"] != false {
		t.Errorf("auto, Linkerd: exit %d\n%s", res.code, res.stderr)
	}

	envoy := emulated(t, envoysim.Config{}).sim
	res = runBinary(t, nil, "prestop", "--mesh", "auto", "--admin", envoy.AdminURL(), "--poll", poll.String(), "--quiet", quiet.String())
	if res.code != 0 || !strings.Contains(res.stderr, `"mesh":"envoy"`) || res.final(t)["drain_called"] != true || res.final(t)["no_drain_call"] != nil {
		t.Errorf("auto, Envoy: exit %d\n%s", res.code, res.stderr)
	}

	start := time.Now()
	res = runBinary(t, nil, "prestop", "--mesh", "auto", "--admin", refusingAdmin(t), "--connect-timeout", "300ms")
	if res.code != 0 || res.final(t)["reason"] != "no-sidecar" || res.exited.Sub(start) > 2*time.Second {
		t.Errorf("auto, nothing: exit %d after %v\n%s", res.code, res.exited.Sub(start), res.stderr)
	}

	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "hello") }))
	t.Cleanup(other.Close)
	res = runBinary(t, []string{"MESHDRAIN_FALLBACK_WAIT=300ms"}, "prestop", "--mesh", "auto", "--admin", other.URL)
	if res.code != 2 || res.final(t)["reason"] != "config-error" || !strings.Contains(res.stderr, "cannot tell which sidecar") {
		t.Errorf("auto, not a sidecar: exit %d\n%s", res.code, res.stderr)
	}
}
