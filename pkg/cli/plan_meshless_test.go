package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshdrain/meshdrain/pkg/mesh"
	"github.com/meshdrain/meshdrain/pkg/operator/plan"
)

// meshlessWebDeployment is the user's second report's Deployment (a sleep 15 preStop, a readiness
// probe of its own, a grace period of 60s) with a second app without one.
const meshlessWebDeployment = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  replicas: 4
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      terminationGracePeriodSeconds: 60   # enough in total
      containers:
        - name: web
          image: registry.example.com/web:1.8.0
          ports:
            - containerPort: 8080
          lifecycle:
            preStop:
              exec:
                command: ["/bin/sh", "-c", "sleep 15"]
          readinessProbe:
            httpGet: {path: /readyz, port: 8080}
            periodSeconds: 2
            failureThreshold: 2
`

// What plan writes for a pod without a sidecar, prestop accepts: over a grid of inputs (none
// and ambient, one or two ports, --quiet, --poll, --rps-per-client, --client-period,
// --min-wait, lags and grace periods), every preStop passes prestop's start checks (what
// --validate runs), and every plan refused is refused with exactly prestop's problems.
func TestEveryPlannedMeshlessPrestopIsAccepted(t *testing.T) {
	ms := time.Millisecond
	s := time.Second
	logFile := filepath.Join(t.TempDir(), "prestop.log")
	// The pod as --validate finds it there: the app listens on its ports, and HOST_IP is the
	// node's address (from the downward API), not one of the pod's.
	environ := []string{plan.HostIPEnv + "=192.0.2.10"}
	app := []int{appListener(t), appListener(t)}
	var accepted, refused int
	for _, m := range []mesh.Mesh{mesh.None, plan.Ambient} {
		for _, ports := range [][]int{app[:1], app} {
			for _, quiet := range []time.Duration{0, 100 * ms, s, 40 * s} {
				for _, poll := range []time.Duration{0, 10 * ms, 200 * ms, s} {
					for _, rate := range []float64{0, 0.5} {
						for _, period := range []time.Duration{0, 2 * s} {
							for _, minWait := range []time.Duration{0, s, 60 * s} {
								for _, lag := range []time.Duration{2 * s, 12 * s} {
									for _, current := range []time.Duration{0, 90 * s} {
										in := plan.Input{Mesh: m, Ports: ports, P99: 450 * ms, EDSLag: lag, Quiet: quiet, Poll: poll,
											RPSPerClient: rate, ClientPeriod: period, MinWait: minWait, CurrentGracePeriod: current}
										name := fmt.Sprintf("%+v", in)
										p, err := plan.Recommend(in)
										var refusal *plan.PrestopRefusal
										switch {
										case err == nil:
											accepted++
											if problems := meshlessPrestopProblems(t, p, logFile, environ); len(problems) > 0 {
												t.Fatalf("%s: plan wrote %q, which prestop refuses: %v", name, p.PrestopArgs(), problems)
											}
										case errors.As(err, &refusal):
											refused++
											if got := meshlessPrestopProblems(t, refusal.Plan, logFile, environ); fmt.Sprint(got) != fmt.Sprint(refusal.Problems) {
												t.Fatalf("%s: plan refused with %v, prestop would say %v", name, refusal.Problems, got)
											}
										default:
											t.Fatalf("%s: %v", name, err)
										}
									}
								}
							}
						}
					}
				}
			}
		}
	}
	if accepted < 300 || refused < 30 {
		t.Errorf("the grid reached %d accepted and %d refused plans: it no longer covers both sides", accepted, refused)
	}
	t.Logf("%d meshless plans accepted by prestop, %d refused by both with the same words", accepted, refused)
}

// appListener listens on a loopback port for the test's life: the app's port, as prestop
// --validate finds it in the pod.
func appListener(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln.Addr().(*net.TCPAddr).Port
}

// meshlessPrestopProblems are the problems prestop --validate finds in the plan's preStop in
// the pod's environment, its log file moved to a writable place.
func meshlessPrestopProblems(t *testing.T, p plan.Plan, logFile string, environ []string) []error {
	t.Helper()
	args := p.PrestopArgs()[1:]
	for i, a := range args {
		if strings.HasPrefix(a, "--log-file=") {
			args[i] = "--log-file=" + logFile
		}
	}
	_, problems := CheckPrestopConfig(context.Background(), args, environ)
	words := make([]error, len(problems))
	for i, p := range problems {
		words[i] = errors.New(p.Error())
	}
	return words
}

// TestPlanMeshlessFile: plan --mesh none -f on the report's Deployment replaces its sleep,
// keeps its grace period and its own readiness probe, adds HOST_IP, and a re-plan of its output
// changes nothing; on the operator's machine, without HOST_IP in the environment.
func TestPlanMeshlessFile(t *testing.T) {
	t.Setenv(plan.HostIPEnv, "")
	args := []string{"plan", "--mesh", "none", "--p99", "450ms", "--eds-lag", "5s", "--app-drain", "5s", "-f", "-", "-o", "yaml"}
	code, out, errOut := runMainStdin(t, meshlessWebDeployment, args...)
	if code != ExitOK {
		t.Fatalf("exit %d, stderr %s", code, errOut)
	}
	for _, want := range []string{"--mesh=none", "--port=8080", "--ignore-source=$(HOST_IP)", "fieldPath: status.hostIP", "terminationGracePeriodSeconds: 60   # enough in total", "path: /readyz"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "tcpSocket") || strings.Contains(out, "sleep 15") {
		t.Errorf("plan added a second probe or kept the sleep:\n%s", out)
	}
	code, again, errOut := runMainStdin(t, out, args...)
	if code != ExitOK || again != out || !strings.Contains(errOut, "no change") {
		t.Errorf("a re-plan (exit %d) changed the output or did not say so: %s", code, errOut)
	}
	// Without --mesh the re-plan finds none in its own preStop.
	code, again, errOut = runMainStdin(t, out, "plan", "--p99", "450ms", "--eds-lag", "5s", "-f", "-", "-o", "yaml")
	if code != ExitOK || again != out {
		t.Errorf("a re-plan without --mesh (exit %d) changed the output: %s", code, errOut)
	}
}

// TestPlanMeshlessFlags: the flags that do not go with a pod without a sidecar are refused,
// each naming itself; the text plan needs only the port.
func TestPlanMeshlessFlags(t *testing.T) {
	base := []string{"plan", "--p99", "450ms", "--eds-lag", "5s"}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--mesh", "none"}, "--mesh none needs --port P"},
		{[]string{"--mesh", "none", "--port", "8080", "--sidecar", "native"}, "--sidecar is a sidecar's"},
		{[]string{"--mesh", "ambient", "--port", "8080", "--defer-sidecar-drain=false"}, "--defer-sidecar-drain is a sidecar's"},
		{[]string{"--mesh", "none", "--port", "8080", "--drain-duration", "30s"}, "--drain-duration is a sidecar's"},
		{[]string{"--port", "8080"}, "--port goes with --mesh none or ambient"},
		{[]string{"--app-metrics", "http://127.0.0.1:9090/metrics"}, "--app-metrics and --app-requests go with --mesh none or ambient"},
		{[]string{"--mesh", "none", "--port", "8080", "--app-requests", "x"}, "--app-requests names the counter --app-metrics reads"},
		{[]string{"--mesh", "none", "--port", "8080", "--app-metrics", "http://192.0.2.1/metrics"}, "--app-metrics: \"http://192.0.2.1/metrics\": host \"192.0.2.1\" is not a loopback address"},
		{[]string{"--mesh", "nope"}, `mesh "nope" is not one of istio, linkerd, none, ambient`},
	} {
		code, _, errOut := runMain(t, append(append([]string{}, base...), c.args...)...)
		if code != ExitUsage || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d, stderr %q, want %q", c.args, code, errOut, c.want)
		}
	}
	code, out, errOut := runMain(t, append(base, "--mesh", "ambient", "--port", "8080")...)
	if code != ExitOK || !strings.Contains(out, "--ignore-source=169.254.7.127") || !strings.Contains(out, "sidecar: none, Istio ambient") {
		t.Errorf("ambient: exit %d, stderr %s\n%s", code, errOut, out)
	}
}

// TestPlanMeshlessAppMetrics: plan --app-metrics writes the app's counter into the preStop,
// which prestop accepts in the pod (the app answering there), and a re-plan keeps it from
// the preStop; YAML carries the selector as one argument, quotes and all.
func TestPlanMeshlessAppMetrics(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "# TYPE http_requests_total counter\nhttp_requests_total{path=\"/\"} 12\n")
	}))
	defer srv.Close()
	const selector = `http_requests_total{path!~"/metrics|/readyz"}`
	logFile := filepath.Join(t.TempDir(), "prestop.log")
	environ := []string{plan.HostIPEnv + "=192.0.2.10"}
	for _, m := range []mesh.Mesh{mesh.None, plan.Ambient} {
		in := plan.Input{Mesh: m, Ports: []int{appListener(t)}, P99: 450 * time.Millisecond, EDSLag: 5 * time.Second,
			AppMetrics: srv.URL + "/metrics", AppRequests: selector}
		p, err := plan.Recommend(in)
		if err != nil {
			t.Fatal(err)
		}
		args := strings.Join(p.PrestopArgs(), " ")
		if !strings.Contains(args, "--app-metrics="+srv.URL+"/metrics --app-requests="+selector) {
			t.Fatalf("%s: the preStop lacks the app's counter: %s", m, args)
		}
		if problems := meshlessPrestopProblems(t, p, logFile, environ); len(problems) > 0 {
			t.Fatalf("%s: plan wrote %q, which prestop refuses: %v", m, p.PrestopArgs(), problems)
		}
	}

	t.Setenv(plan.HostIPEnv, "")
	base := []string{"plan", "--mesh", "none", "--p99", "450ms", "--eds-lag", "5s", "--app-drain", "5s", "-f", "-", "-o", "yaml"}
	code, out, errOut := runMainStdin(t, meshlessWebDeployment, append(base, "--app-metrics", "http://127.0.0.1:9090/metrics", "--app-requests", selector)...)
	if code != ExitOK {
		t.Fatalf("exit %d, stderr %s", code, errOut)
	}
	if !strings.Contains(out, `- --app-metrics=http://127.0.0.1:9090/metrics`) || !strings.Contains(out, `- '--app-requests=http_requests_total{path!~"/metrics|/readyz"}'`) {
		t.Fatalf("the YAML lacks the app's counter:\n%s", out)
	}
	code, again, errOut := runMainStdin(t, out, base...)
	if code != ExitOK || again != out || !strings.Contains(errOut, "no change") {
		t.Errorf("a re-plan without --app-metrics (exit %d) changed the output or did not say so: %s\n%s", code, errOut, again)
	}
	code, _, errOut = runMainStdin(t, out, append(base, "--app-requests", "x{")...)
	if code != ExitUsage || !strings.Contains(errOut, "--app-requests") {
		t.Errorf("a bad --app-requests: exit %d, stderr %s", code, errOut)
	}
	// Another host only with the preStop's own --allow-remote, which prestop needs too.
	remote := strings.Replace(out, "--app-metrics=http://127.0.0.1:9090/metrics", "--app-metrics=http://192.0.2.5:9090/metrics", 1)
	code, _, errOut = runMainStdin(t, remote, base...)
	if code != ExitUsage || !strings.Contains(errOut, `--app-metrics: "http://192.0.2.5:9090/metrics": host "192.0.2.5" is not a loopback address`) {
		t.Errorf("a remote --app-metrics without --allow-remote: exit %d, stderr %s", code, errOut)
	}
	line := "- --app-metrics=http://192.0.2.5:9090/metrics"
	at := strings.Index(remote, line)
	indent := remote[strings.LastIndex(remote[:at], "\n")+1 : at]
	allowed := remote[:at] + "- --allow-remote\n" + indent + remote[at:]
	code, again, errOut = runMainStdin(t, allowed, base...)
	if code != ExitOK || !strings.Contains(again, "--app-metrics=http://192.0.2.5:9090/metrics") || !strings.Contains(again, "- --allow-remote") {
		t.Errorf("a remote --app-metrics with the preStop's --allow-remote: exit %d, stderr %s\n%s", code, errOut, again)
	}
}
