package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func runMain(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	return runMainStdin(t, "", args...)
}

func runMainStdin(t *testing.T, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = Main(args, strings.NewReader(stdin), &out, &errOut)
	return code, out.String(), errOut.String()
}

// TestPlanUserScenario: the grace period in force (30s) is longer than the 15s that suffices;
// plan keeps it, says on stderr what would suffice, and lowers it only when asked.
func TestPlanUserScenario(t *testing.T) {
	args := []string{"plan", "--p99", "450ms", "--eds-lag", "8s", "--app-drain", "2s", "--sidecar", "classic", "--grace-period", "30s"}
	code, out, errOut := runMain(t, args...)
	if code != ExitOK {
		t.Fatalf("exit %d, stderr %s", code, errOut)
	}
	// Regime (b), the default: hold keeps the proxy, terminationDrainDuration only bounds the
	// fallback (the app's drain + 1s).
	for _, want := range []string{"terminationGracePeriodSeconds: 30", `"terminationDrainDuration": "3s"`, "prestop --drain-at=end --grace-period=30s --app-drain=2s",
		"istio-proxy preStop:           /meshdrain/meshdrain hold --grace-period=30s --app-drain=2s --log-file=/proc/1/fd/1"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if !strings.Contains(errOut, "terminationGracePeriodSeconds 30s kept") || !strings.Contains(errOut, "15s that suffices") || !strings.Contains(errOut, "--lower-grace-period") {
		t.Errorf("stderr does not say the grace period is kept and what suffices: %q", errOut)
	}
	code, out, errOut = runMain(t, append(args, "--lower-grace-period")...)
	if code != ExitOK {
		t.Fatalf("--lower-grace-period: exit %d, stderr %s", code, errOut)
	}
	for _, want := range []string{"terminationGracePeriodSeconds: 15", `"terminationDrainDuration": "3s"`, "prestop --drain-at=end --grace-period=15s --app-drain=2s"} {
		if !strings.Contains(out, want) {
			t.Errorf("--lower-grace-period: output lacks %q:\n%s", want, out)
		}
	}
	if errOut != "" {
		t.Errorf("--lower-grace-period: stderr %q, want nothing (nothing kept)", errOut)
	}

	// The opt-out keeps regime (a): Envoy must outlive the app by itself, and plan says in one
	// line what is lost.
	code, out, errOut = runMain(t, append(args, "--defer-sidecar-drain=false")...)
	if code != ExitOK {
		t.Fatalf("--defer-sidecar-drain=false: exit %d, stderr %s", code, errOut)
	}
	for _, want := range []string{`"terminationDrainDuration": "30s"`, "prestop --grace-period=30s --app-drain=2s", "regime (a), --defer-sidecar-drain=false:"} {
		if !strings.Contains(out, want) {
			t.Errorf("--defer-sidecar-drain=false: output lacks %q:\n%s", want, out)
		}
	}
	for _, unwanted := range []string{"meshdrain hold", "--drain-at", "istio-proxy preStop"} {
		if strings.Contains(out, unwanted) {
			t.Errorf("--defer-sidecar-drain=false: output has %q:\n%s", unwanted, out)
		}
	}
}

// TestPlanClientsDistribution: one client's lag distribution and the number of clients give
// the last client's lag, later than one client's p99.
func TestPlanClientsDistribution(t *testing.T) {
	code, out, errOut := runMain(t, "plan", "--p99", "450ms", "--eds-lag", "p50=1.5s,p99=12s", "--clients", "50", "-o", "json")
	if code != ExitOK {
		t.Fatalf("exit %d, stderr %s", code, errOut)
	}
	var doc struct {
		Inputs        map[string]any `json:"inputs"`
		LastClientLag string         `json:"last_client_lag"`
		Grace         int            `json:"termination_grace_period_seconds"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("-o json: %v\n%s", err, out)
	}
	if doc.Inputs["eds_lag"] != "p50=1.5s,p99=12s" || doc.Inputs["clients"] != 50.0 || doc.LastClientLag != "35.5s" {
		t.Errorf("inputs %v, last client lag %s: want the distribution, 50 clients, 35.5s", doc.Inputs, doc.LastClientLag)
	}
}

func TestPlanYAML(t *testing.T) {
	code, out, errOut := runMain(t, "plan", "--mesh", "istio", "--p99", "450ms", "--eds-lag", "8s", "-o", "yaml", "--container", "web", "--image", "registry.example/meshdrain:v1")
	if code != ExitOK {
		t.Fatalf("exit %d, stderr %s", code, errOut)
	}
	for _, want := range []string{`- name: web`, `image: registry.example/meshdrain:v1`, "terminationGracePeriodSeconds: 15"} {
		if !strings.Contains(out, want) {
			t.Errorf("yaml lacks %q:\n%s", want, out)
		}
	}
}

const webDeployment = `# the team's Deployment
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: shop
spec:
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
      annotations:
        proxy.istio.io/config: '{"holdApplicationUntilProxyStarts": true}'
    spec:
      terminationGracePeriodSeconds: 30
      containers:
      - name: web
        image: web:1
        ports:
        - containerPort: 8080
        lifecycle:
          preStop:
            httpGet:
              path: /shutdown
              port: 8080
---
apiVersion: v1
kind: Service
metadata:
  name: web
spec:
  ports:
  - port: 80
    targetPort: 8080
`

func TestPlanFromFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "deploy.yaml")
	if err := os.WriteFile(file, []byte(webDeployment), 0o644); err != nil {
		t.Fatal(err)
	}
	base := []string{"plan", "--p99", "450ms", "--eds-lag", "8s", "-f", file}

	// An httpGet preStop is not replaced silently.
	code, _, errOut := runMain(t, base...)
	if code != ExitUsage || !strings.Contains(errOut, "--replace-prestop") || !strings.Contains(errOut, "httpGet :8080/shutdown") {
		t.Errorf("existing preStop: exit %d, stderr %q: want 2 naming the hook and --replace-prestop", code, errOut)
	}

	base = append(base, "--lower-grace-period") // 30s is longer than the 15s that suffices
	code, out, errOut := runMain(t, append(base, "--replace-prestop")...)
	if code != ExitOK {
		t.Fatalf("exit %d, stderr %s", code, errOut)
	}
	for _, want := range []string{
		"Changes to Deployment/web (container web)",
		"terminationGracePeriodSeconds: 30s → 15",
		"holdApplicationUntilProxyStarts)",
		"replaces the preStop of container web, httpGet :8080/shutdown (--replace-prestop)",
		"kubectl exec -n shop deployment/web -c web -- /meshdrain/meshdrain check --port=8080 --grace-period=15s",
		"--drain-at=end\n",                   // regime (b): check verifies that the sidecar's own drain is deferred
		"current grace period 30s is enough", // read from the manifest
	} {
		if !strings.Contains(out, want) {
			t.Errorf("text lacks %q:\n%s", want, out)
		}
	}

	code, out, errOut = runMainStdin(t, webDeployment, "plan", "--p99", "450ms", "--eds-lag", "8s", "-f", "-", "--replace-prestop", "--lower-grace-period", "-o", "yaml")
	if code != ExitOK {
		t.Fatalf("stdin: exit %d, stderr %s", code, errOut)
	}
	for _, want := range []string{"# the team's Deployment", "kind: Service", `'{"holdApplicationUntilProxyStarts": true, "terminationDrainDuration": "3s"}'`} {
		if !strings.Contains(out, want) {
			t.Errorf("changed manifests lack %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "httpGet") {
		t.Errorf("the replaced httpGet is still there:\n%s", out)
	}

	code, out, errOut = runMain(t, append(base, "--replace-prestop", "-o", "yaml", "--patch")...)
	if code != ExitOK || !strings.Contains(out, "httpGet: null") || !strings.Contains(out, "kubectl patch deployment web -n shop") {
		t.Errorf("patch: exit %d, stderr %s:\n%s", code, errOut, out)
	}
}

func TestPlanUsageErrors(t *testing.T) {
	file := filepath.Join(t.TempDir(), "deploy.yaml")
	if err := os.WriteFile(file, []byte(webDeployment), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"plan", "--eds-lag", "8s"}, "--p99"},
		{[]string{"plan", "--p99", "450ms"}, "--eds-lag"},
		{[]string{"plan", "--p99", "450ms", "--eds-lag", "8s", "--sidecar", "ambient"}, "not one of"},
		{[]string{"plan", "--p99", "450ms", "--eds-lag", "8s", "--app-drain", "100ms"}, "shorter than p99"},
		{[]string{"plan", "--p99", "450ms", "--eds-lag", "8s", "-o", "xml"}, "want text, json, yaml"},
		{[]string{"plan", "--p99", "soon"}, "invalid argument"},
		{[]string{"plan", "--p99", "450ms", "--eds-lag", "8s", "-o", "yaml"}, "needs --container"},
		{[]string{"plan", "--p99", "450ms", "--eds-lag", "8s", "--patch"}, "--patch goes with -f"},
		{[]string{"plan", "--p99", "450ms", "--eds-lag", "8s", "--workload", "web"}, "needs -f"},
		{[]string{"plan", "--p99", "450ms", "--eds-lag", "8s", "--clients", "50"}, "distribution"},
		{[]string{"plan", "--p99", "450ms", "--eds-lag", "p50=2s,p99=12s"}, "number of client proxies"},
		{[]string{"plan", "--p99", "450ms", "--eds-lag", "8s", "-f", file, "--container", "app"}, `no container "app"; its containers are: web`},
		{[]string{"plan", "--p99", "450ms", "--eds-lag", "8s", "-f", file, "--workload", "api"}, "there are: Deployment/web"},
		{[]string{"plan", "--p99", "450ms", "--eds-lag", "8s", "-f", filepath.Join(t.TempDir(), "missing.yaml")}, "no such file"},
		{[]string{"plan", "--mesh", "linkerd", "--p99", "450ms", "--eds-lag", "8s", "--defer-sidecar-drain=false"}, "a Linkerd proxy has no drain call to defer"},
	} {
		code, _, errOut := runMain(t, c.args...)
		if code != ExitUsage || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d (stderr %q), want %d with %q", c.args, code, errOut, ExitUsage, c.want)
		}
	}
}
