package cli

import (
	"encoding/json"
	"strings"
	"testing"
)

// linkerdDeployment is a Linkerd workload as teams write them: injection asked for on the pod,
// a proxy setting of their own, and the guessed sleep meshdrain replaces.
const linkerdDeployment = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: orders
  namespace: shop
spec:
  selector:
    matchLabels: {app: orders}
  template:
    metadata:
      labels: {app: orders}
      annotations:
        linkerd.io/inject: enabled
        config.linkerd.io/proxy-cpu-request: 100m
    spec:
      terminationGracePeriodSeconds: 30
      containers:
      - name: orders
        image: orders:1
        ports:
        - containerPort: 8080
        lifecycle:
          preStop:
            exec:
              command: ["sleep", "15"]
`

func TestPlanLinkerd(t *testing.T) {
	code, out, errOut := runMain(t, "plan", "--mesh", "linkerd", "--p99", "450ms", "--eds-lag", "8s", "--app-drain", "2s")
	if code != ExitOK {
		t.Fatalf("exit %d, stderr %s", code, errOut)
	}
	for _, want := range []string{
		"sidecar: native linkerd-proxy",
		"terminationGracePeriodSeconds: 15",
		"prestop --mesh=linkerd --admin=http://127.0.0.1:4191 --grace-period=15s --app-drain=2s",
		"pod annotations:               none needed",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "istio") {
		t.Errorf("a Linkerd plan mentions Istio:\n%s", out)
	}

	code, out, errOut = runMain(t, "plan", "--mesh", "linkerd", "--sidecar", "classic", "--p99", "450ms", "--eds-lag", "8s", "--app-drain", "2s", "-o", "yaml", "--container", "orders")
	if code != ExitOK {
		t.Fatalf("classic -o yaml: exit %d, stderr %s", code, errOut)
	}
	for _, want := range []string{`config.alpha.linkerd.io/proxy-wait-before-exit-seconds: "14"`, `config.linkerd.io/proxy-enable-native-sidecar: "false"`,
		"# meshdrain plan: sidecar classic linkerd-proxy", "- --mesh=linkerd", "- --admin=http://127.0.0.1:4191"} {
		if !strings.Contains(out, want) {
			t.Errorf("patch lacks %q:\n%s", want, out)
		}
	}
}

// TestPlanLinkerdFromFile: the mesh comes from the workload's annotations, the plan merges
// Linkerd's annotations into the ones there and adds no Istio one.
func TestPlanLinkerdFromFile(t *testing.T) {
	// The manifest's grace period (30s) is longer than the 15s that suffices: lowered here, kept
	// by default (TestReplanKeepsLongerLinkerdWait).
	base := []string{"plan", "--p99", "450ms", "--eds-lag", "8s", "--app-drain", "2s", "-f", "-", "--replace-prestop", "--lower-grace-period"}
	code, out, errOut := runMainStdin(t, linkerdDeployment, append(base, "-o", "json")...)
	if code != ExitOK {
		t.Fatalf("exit %d, stderr %s", code, errOut)
	}
	var doc struct {
		Mesh        string            `json:"mesh"`
		Sidecar     string            `json:"sidecar"`
		Annotations map[string]string `json:"annotations"`
		Prestop     []string          `json:"prestop_command"`
		Workload    struct {
			Changes []string `json:"changes"`
		} `json:"workload"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if doc.Mesh != "linkerd" || doc.Sidecar != "native" || len(doc.Annotations) != 0 || doc.Prestop[2] != "--mesh=linkerd" {
		t.Errorf("from linkerd.io/inject: mesh %q sidecar %q annotations %v prestop %v; want linkerd, native, none, --mesh=linkerd",
			doc.Mesh, doc.Sidecar, doc.Annotations, doc.Prestop)
	}

	code, out, errOut = runMainStdin(t, linkerdDeployment, append(base, "--sidecar", "classic", "-o", "yaml")...)
	if code != ExitOK {
		t.Fatalf("classic: exit %d, stderr %s", code, errOut)
	}
	for _, want := range []string{"linkerd.io/inject: enabled", "config.linkerd.io/proxy-cpu-request: 100m",
		`config.alpha.linkerd.io/proxy-wait-before-exit-seconds: "14"`, `config.linkerd.io/proxy-enable-native-sidecar: "false"`} {
		if !strings.Contains(out, want) {
			t.Errorf("changed manifest lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "istio") || strings.Contains(out, "sleep") {
		t.Errorf("changed manifest has an Istio annotation or the old sleep:\n%s", out)
	}

	// An existing sleep with a native sidecar: the injector refuses it; plan says so.
	native := strings.Replace(linkerdDeployment, "linkerd.io/inject: enabled",
		"linkerd.io/inject: enabled\n        config.linkerd.io/proxy-enable-native-sidecar: \"true\"\n        config.alpha.linkerd.io/proxy-wait-before-exit-seconds: \"20\"", 1)
	code, out, errOut = runMainStdin(t, native, base...)
	if code != ExitOK || !strings.Contains(out, "injector refuses that combination") || !strings.Contains(out, "sidecar: native linkerd-proxy") {
		t.Errorf("native with a sleep: exit %d, stderr %s:\n%s", code, errOut, out)
	}
	if !strings.Contains(out, "kubectl exec -n shop deployment/orders -c orders -- /meshdrain/meshdrain check --mesh=linkerd --port=8080") {
		t.Errorf("the check command does not name the mesh:\n%s", out)
	}
}

func TestPlanLinkerdUsageErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"plan", "--mesh", "linkerd", "--p99", "450ms", "--eds-lag", "8s", "--sidecar", "exit-on-zero"}, "Istio's pilot-agent mode"},
		{[]string{"plan", "--mesh", "linkerd", "--p99", "450ms", "--eds-lag", "8s", "--drain-duration", "60s"}, "a Linkerd proxy has no drain time"},
		{[]string{"plan", "--mesh", "consul", "--p99", "450ms", "--eds-lag", "8s"}, "not one of istio, linkerd"},
	} {
		code, _, errOut := runMain(t, c.args...)
		if code != ExitUsage || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d (stderr %q), want %d with %q", c.args, code, errOut, ExitUsage, c.want)
		}
	}
}
