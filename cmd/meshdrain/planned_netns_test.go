//go:build linux

package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/meshdrain/meshdrain/pkg/mesh/kernel/kerneltest"
)

// The addresses of the pod and of what calls it, on a veth pair between the pod's network
// namespace and the node's: the kubelet at the node's IP (HOST_IP), Service clients and a
// monitor at other pods' addresses routed through the node, as a CNI bridge would.
const (
	podIP     = "10.244.1.10"
	hostIP    = "10.244.1.1"
	clientAIP = "10.244.1.20"
	clientBIP = "10.244.1.21"
	monitorIP = "10.244.1.30"
)

// TestPlannedPrestopInPodNetns runs the preStop that plan writes for a Spring Boot service
// without a mesh (testdata/orders-management.yaml: the app on 8080, Actuator on 8081 for
// the kubelet and Prometheus, an exec probe on localhost) in a pod network namespace joined
// by a veth to a node namespace, beside everything that keeps calling such a pod while it
// terminates: the kubelet's HTTP probes on 8081 and a TCP probe on 8080 from HOST_IP, a
// monitor polling 8081 five times a second from another pod, the exec probe on localhost
// twice a second, and two Service clients that stop 1 and 1.5 s into the hook (they learn
// of the endpoint's removal). Issue 37: with all ports watched and no loopback ignored, the
// monitor and the probe held such a hook to its deadline (exit 3). The planned hook must end
// quiet, within the lag bound + 2 s, with no request lost; the same scenario with the old
// plan's flags is held to its deadline, so this test can tell them apart.
func TestPlannedPrestopInPodNetns(t *testing.T) {
	if !kerneltest.Inside(t, true) {
		return
	}
	hook, env := plannedPrestop(t, "testdata/orders-management.yaml")
	const lagBound = 2 * time.Second
	if got := flagValues(hook, "--eds-lag-bound"); !slices.Equal(got, []string{lagBound.String()}) {
		t.Fatalf("--eds-lag-bound %v, want %v (plan --eds-lag 2s)", got, lagBound)
	}
	if got := flagValues(hook, "--port"); !slices.Equal(got, []string{"8080"}) {
		t.Errorf("plan watches ports %v, want only 8080 (the Service's; 8081 serves probes and metrics)", got)
	}
	if got := flagValues(hook, "--ignore-source"); !slices.Contains(got, "127.0.0.0/8") || !slices.Contains(got, "$(HOST_IP)") {
		t.Errorf("plan ignores sources %v, want 127.0.0.0/8 (the exec probe on localhost) and $(HOST_IP) (the kubelet)", got)
	}
	if env["HOST_IP"] != "status.hostIP" {
		t.Errorf("HOST_IP from %q, want the downward API's status.hostIP", env["HOST_IP"])
	}

	node := newPodAndNode(t)
	startApp(t)
	// The kubelet's downward API gives the container the node's IP. The log goes to a file of
	// the test's (plan writes the container's stdout, /proc/1/fd/1); the final line still
	// goes to stderr.
	hookEnv := []string{"HOST_IP=" + hostIP}
	logFile := filepath.Join(t.TempDir(), "prestop.log")
	hook = withFlag(hook, "--log-file", logFile)

	planned := beside(t, node, hook, hookEnv)
	final := planned.final(t)
	took := planned.exited.Sub(planned.start)
	t.Logf("planned preStop: exit %d, %v after its start (lag bound %v: %+v past it), run-queue wait %v; final event %v",
		planned.code, took.Round(time.Millisecond), lagBound, (took - lagBound).Round(time.Millisecond), planned.runDelay.Round(time.Millisecond), final)
	if planned.code != 0 || final["reason"] == "deadline" {
		log, _ := os.ReadFile(logFile)
		t.Errorf("planned preStop: exit %d, reason %v: want 0 before the deadline; its log:\n%s", planned.code, final["reason"], log)
	}
	if limit := lagBound + 2*time.Second + planned.allowance(); took > limit {
		t.Errorf("planned preStop returned %v after its start, want within the lag bound + 2 s (%v with the machine's run-queue wait)", took, limit)
	}
	if lost := planned.lost(); len(lost) > 0 {
		t.Errorf("requests lost while the planned preStop ran: %v", lost)
	}
	for key := range final {
		for _, caller := range []string{monitorIP, hostIP, "127.0.0.1"} {
			if strings.HasPrefix(key, "clients_") && slices.Contains(named(final, key), caller) {
				t.Errorf("the final event names %s in %s (%v): a monitor or a probe counted as a client", caller, key, final[key])
			}
		}
	}

	// Plan's old flags: every containerPort, loopback not ignored. A shorter grace period keeps
	// the run short; its deadline (grace - app-drain - 1 s) is 5 s, past the lag bound + 2 s.
	old := withFlag(withoutFlag(append(slices.Clone(hook), "--port=8081"), "--ignore-source=127.0.0.0/8", "--ignore-source=::1/128"), "--grace-period", "7s")
	old = withFlag(old, "--log-file", logFile+".old")
	unplanned := beside(t, node, old, hookEnv)
	oldFinal := unplanned.final(t)
	oldTook := unplanned.exited.Sub(unplanned.start)
	t.Logf("old plan's preStop: exit %d, %v after its start; final event %v", unplanned.code, oldTook.Round(time.Millisecond), oldFinal)
	if unplanned.code != 3 || oldFinal["reason"] != "deadline" || oldTook < lagBound+2*time.Second {
		log, _ := os.ReadFile(logFile + ".old")
		t.Errorf("with the old plan's flags (%v) the preStop ended %v (exit %d) after %v; want held to its deadline past the lag bound + 2 s: the scenario does not tell the planned flags apart; its log:\n%s",
			old, oldFinal["reason"], unplanned.code, oldTook, log)
	}
	if names := named(oldFinal, "clients_opening_past_bound"); !slices.Contains(names, monitorIP) {
		t.Errorf("with the old plan's flags the final event names %v as opening past the bound, want the monitor %s", names, monitorIP)
	}
}

// named are the addresses a final event's list field names.
func named(final map[string]any, key string) []string {
	list, _ := final[key].([]any)
	var names []string
	for _, v := range list {
		if s, ok := v.(string); ok {
			names = append(names, s)
		}
	}
	return names
}

// plannedPrestop runs `meshdrain plan --mesh none` on manifest and returns the app
// container's preStop command without its binary, and where each of its env variables comes
// from (the value, or the downward API's field path). --min-wait is the lag bound: prestop's
// default, 5 s, would be the hook's floor and leave nothing to measure against a bound of 2 s
// (plan's timeline says as much: "--min-wait 5s + one poll, later than 2s + 1s").
func plannedPrestop(t *testing.T, manifest string) ([]string, map[string]string) {
	t.Helper()
	cmd := exec.Command(binary, "plan", "--mesh", "none", "--p99", "100ms", "--eds-lag", "2s", "--min-wait", "2s", "--app-drain", "1s", "-f", manifest, "-o", "yaml")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	t.Logf("plan says:\n%s", stderr.String())
	if err != nil {
		t.Fatalf("plan: %v", err)
	}
	var deploy *appsv1.Deployment
	for _, doc := range strings.Split(string(out), "\n---\n") {
		if !strings.Contains(doc, "kind: Deployment") {
			continue
		}
		deploy = new(appsv1.Deployment)
		if err := yaml.UnmarshalStrict([]byte(doc), deploy); err != nil {
			t.Fatalf("plan's Deployment does not decode strictly: %v\n%s", err, doc)
		}
	}
	if deploy == nil {
		t.Fatalf("no Deployment in plan's output:\n%s", out)
	}
	var app *corev1.Container
	for i, c := range deploy.Spec.Template.Spec.Containers {
		if c.Name == "orders" {
			app = &deploy.Spec.Template.Spec.Containers[i]
		}
	}
	if app == nil || app.Lifecycle == nil || app.Lifecycle.PreStop == nil || app.Lifecycle.PreStop.Exec == nil {
		t.Fatalf("plan wrote no exec preStop for the app container:\n%s", out)
	}
	hook := slices.Clone(app.Lifecycle.PreStop.Exec.Command)
	if len(hook) < 2 || hook[1] != "prestop" {
		t.Fatalf("preStop %q does not run meshdrain prestop", hook)
	}
	env := map[string]string{}
	for _, e := range app.Env {
		env[e.Name] = e.Value
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			env[e.Name] = e.ValueFrom.FieldRef.FieldPath
		}
	}
	return hook[1:], env
}

// flagValues are the values of every --name=value in args.
func flagValues(args []string, name string) []string {
	var values []string
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			values = append(values, v)
		}
	}
	return values
}

// withFlag is args with --name set to value, in place where it was.
func withFlag(args []string, name, value string) []string {
	out := slices.Clone(args)
	for i, a := range out {
		if strings.HasPrefix(a, name+"=") {
			out[i] = name + "=" + value
			return out
		}
	}
	return append(out, name+"="+value)
}

// withoutFlag is args without the given ones.
func withoutFlag(args []string, drop ...string) []string {
	return slices.DeleteFunc(slices.Clone(args), func(a string) bool { return slices.Contains(drop, a) })
}

// node is the node's network namespace, held open by a descriptor, on the other side of
// the pod's veth.
type node struct {
	netns *os.File
}

// newPodAndNode makes the test's own namespace the pod's and a second one the node's, held
// by a sleeping process that ends with the test (and with the pod's namespace if the test
// dies first: both are the test's).
func newPodAndNode(t *testing.T) *node {
	t.Helper()
	nsenter, err := exec.LookPath("nsenter")
	if err != nil {
		t.Skip("nsenter(1) is not installed: the node's namespace cannot be configured")
	}
	holder := exec.Command("unshare", "-n", "sleep", "60")
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		holder.Process.Kill()
		holder.Wait()
	})
	own, _ := os.Readlink("/proc/self/ns/net")
	nodeNetns := fmt.Sprintf("/proc/%d/ns/net", holder.Process.Pid)
	for deadline := time.Now().Add(5 * time.Second); ; {
		// unshare(1) enters the new namespace before it runs sleep: until then the holder's is ours.
		if ns, err := os.Readlink(nodeNetns); err == nil && ns != own {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the node's namespace holder did not unshare its network namespace")
		}
		time.Sleep(10 * time.Millisecond)
	}
	pid := fmt.Sprint(holder.Process.Pid)
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	inNode := func(args ...string) { run(append([]string{nsenter, "-t", pid, "-n", "ip"}, args...)...) }
	run("ip", "link", "add", "eth0", "type", "veth", "peer", "name", "veth-orders", "netns", pid)
	run("ip", "addr", "add", podIP+"/24", "dev", "eth0")
	run("ip", "link", "set", "eth0", "up")
	inNode("link", "set", "lo", "up")
	for _, addr := range []string{hostIP + "/24", clientAIP + "/32", clientBIP + "/32", monitorIP + "/32"} {
		inNode("addr", "add", addr, "dev", "veth-orders")
	}
	inNode("link", "set", "veth-orders", "up")
	f, err := os.Open(nodeNetns)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return &node{netns: f}
}

// goFrom runs loop in a goroutine on an OS thread of its own moved into the node's
// namespace, so that the sockets it opens are the node's. The thread is never handed back
// (no UnlockOSThread): the runtime ends it with the goroutine. loop must open its sockets
// itself, not in goroutines of its own (they would run on other threads).
func (n *node) goFrom(t *testing.T, loop func()) {
	t.Helper()
	setns, ok := sysSetns[runtime.GOARCH]
	if !ok {
		t.Skipf("setns(2)'s number on %s is not known here", runtime.GOARCH)
	}
	entered := make(chan error)
	go func() {
		runtime.LockOSThread()
		if _, _, errno := syscall.RawSyscall(setns, n.netns.Fd(), syscall.CLONE_NEWNET, 0); errno != 0 {
			entered <- fmt.Errorf("setns into the node's namespace: %w", errno)
			return
		}
		entered <- nil
		loop()
	}()
	if err := <-entered; err != nil {
		t.Fatal(err)
	}
}

// sysSetns is setns(2)'s number by architecture: package syscall lacks SYS_SETNS on amd64,
// and golang.org/x/sys is not worth a dependency for one test.
var sysSetns = map[string]uintptr{"amd64": 308, "arm64": 268, "riscv64": 268, "386": 346, "arm": 375, "ppc64le": 350, "s390x": 339}

// startApp serves the app on 8080 and Actuator on 8081 on every address of the pod.
func startApp(t *testing.T) {
	t.Helper()
	for _, port := range []string{"8080", "8081"} {
		ln, err := net.Listen("tcp", ":"+port)
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			fmt.Fprint(w, "ok\n")
		})}
		go srv.Serve(ln)
		t.Cleanup(func() { srv.Close() })
	}
}

// besideResult is a preStop's run beside the pod's callers, and what its callers lost.
type besideResult struct {
	runResult
	start time.Time

	mu   sync.Mutex
	errs []string
}

func (r *besideResult) failed(who string, err error) {
	r.mu.Lock()
	r.errs = append(r.errs, fmt.Sprintf("%s at %v: %v", who, time.Since(r.start).Round(time.Millisecond), err))
	r.mu.Unlock()
}

func (r *besideResult) lost() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.errs)
}

// beside starts the pod's callers, runs the preStop hook (args after the binary) a second
// after them, as the kubelet would once the pod is deleted, and stops the callers when it
// returns. Service clients stop 1 and 1.5 s into the hook; the probes and the monitor never
// do.
func beside(t *testing.T, n *node, hook, env []string) *besideResult {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var callers sync.WaitGroup
	res := &besideResult{start: time.Now().Add(time.Second)}
	report := func(who string) func(error) {
		return func(err error) {
			if ctx.Err() == nil {
				res.failed(who, err)
			}
		}
	}
	every := func(period time.Duration, until time.Time, call func() error, failed func(error)) func() {
		return func() {
			defer callers.Done()
			for ctx.Err() == nil && (until.IsZero() || time.Now().Before(until)) {
				if err := call(); err != nil {
					failed(err)
				}
				sleepCtx(ctx, period)
			}
		}
	}
	callers.Add(6)
	// The kubelet: HTTP probes on Actuator (Connection: close, as its prober sends), and a TCP
	// probe on the app's port, which closes from the kubelet's side.
	n.goFrom(t, every(time.Second, time.Time{}, func() error {
		return httpOnce(hostIP, podIP+":8081", "/actuator/health/readiness", true)
	}, report("kubelet HTTP probe")))
	n.goFrom(t, every(time.Second, time.Time{}, func() error {
		conn, err := dialFrom(hostIP, podIP+":8080")
		if err != nil {
			return err
		}
		conn.(*net.TCPConn).SetLinger(1)
		return conn.Close()
	}, report("kubelet TCP probe")))
	// A monitor polling the management port directly, five times a second.
	n.goFrom(t, every(200*time.Millisecond, time.Time{}, func() error {
		return httpOnce(monitorIP, podIP+":8081", "/actuator/prometheus", false)
	}, report("monitor")))
	// The exec probe: curl in the pod, from 127.0.0.1 to localhost:8080.
	go every(500*time.Millisecond, time.Time{}, func() error {
		return httpOnce("127.0.0.1", "127.0.0.1:8080", "/healthz", false)
	}, report("exec probe"))()
	// Service clients: one connection per request, and a keep-alive pool that goes idle.
	n.goFrom(t, every(50*time.Millisecond, res.start.Add(time.Second), func() error {
		return httpOnce(clientAIP, podIP+":8080", "/orders", false)
	}, report("client "+clientAIP)))
	n.goFrom(t, func() {
		defer callers.Done()
		conn, err := dialFrom(clientBIP, podIP+":8080")
		if err != nil {
			report("client " + clientBIP)(err)
			return
		}
		defer conn.Close()
		br := bufio.NewReader(conn)
		until := res.start.Add(1500 * time.Millisecond)
		for ctx.Err() == nil && time.Now().Before(until) {
			if err := request(conn, br, "/orders", false); err != nil {
				report("client " + clientBIP)(err)
				return
			}
			sleepCtx(ctx, 50*time.Millisecond)
		}
		<-ctx.Done()
	})

	sleepCtx(ctx, time.Until(res.start))
	res.start = time.Now()
	res.runResult = runBinaryWatching(hook, env, nil)
	cancel()
	callers.Wait()
	if res.startErr != nil {
		t.Fatal(res.startErr)
	}
	return res
}

// dialFrom connects from the local address from to addr.
func dialFrom(from, addr string) (net.Conn, error) {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 2 * time.Second}
	return d.Dial("tcp", addr)
}

// httpOnce sends one GET on a connection of its own: closeFirst asks the app to close it
// (Connection: close, as the kubelet's prober), else the caller closes it after the answer
// (curl, a scraper without keep-alive).
func httpOnce(from, addr, path string, closeFirst bool) error {
	conn, err := dialFrom(from, addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	br := bufio.NewReader(conn)
	if err := request(conn, br, path, closeFirst); err != nil {
		return err
	}
	if closeFirst {
		conn.SetReadDeadline(time.Now().Add(time.Second))
		br.ReadByte() // the app's close
	}
	return nil
}

// request sends one GET on conn and reads its answer, which must be 200.
func request(conn net.Conn, br *bufio.Reader, path string, closeFirst bool) error {
	header := ""
	if closeFirst {
		header = "Connection: close\r\n"
	}
	if _, err := fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: orders\r\n%s\r\n", path, header); err != nil {
		return err
	}
	conn.SetReadDeadline(time.Now().Add(2 * time.Second))
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", path, resp.Status)
	}
	return nil
}

func sleepCtx(ctx context.Context, d time.Duration) {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-ctx.Done():
	}
}
