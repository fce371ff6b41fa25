package cli

import (
	"strings"
	"testing"
)

// noMeshDeployment names no mesh: a plain Deployment behind kube-proxy.
const noMeshDeployment = `apiVersion: apps/v1
kind: Deployment
metadata: {name: api, namespace: shop}
spec:
  selector: {matchLabels: {app: api}}
  template:
    metadata: {labels: {app: api}}
    spec:
      containers:
      - name: api
        image: api:1
        ports: [{containerPort: 8080}]
`

// TestPlanNeverGuessesTheMesh: a manifest that names no mesh gets nothing written, in any
// output, and one message that lists the meshes and how to see the namespace's; where an
// injector skips the pod, plan writes no sidecar plan for it.
func TestPlanNeverGuessesTheMesh(t *testing.T) {
	base := []string{"plan", "--p99", "450ms", "--eds-lag", "5s", "-f", "-"}
	for _, format := range [][]string{{"-o", "yaml"}, {"-o", "yaml", "--patch"}, {"-o", "text"}, {"-o", "json"}} {
		code, out, errOut := runMainStdin(t, noMeshDeployment, append(base, format...)...)
		if code != ExitUsage || out != "" || strings.Count(errOut, "\n") != 1 ||
			!strings.Contains(errOut, "--mesh istio|linkerd|none|ambient") || !strings.Contains(errOut, "kubectl get namespace shop --show-labels") {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit 2, nothing written, one message", format, code, out, errOut)
		}
	}
	code, out, errOut := runMainStdin(t, noMeshDeployment, append(base, "--mesh", "none", "-o", "yaml")...)
	if code != ExitOK || strings.Contains(out, "image: auto") || !strings.Contains(out, "--mesh=none") {
		t.Errorf("--mesh none: exit %d\nstderr: %s\nstdout: %s", code, errOut, out)
	}
	// sidecar.istio.io/inject: "false": no sidecar, so a meshless plan, and never an override.
	skipped := strings.Replace(noMeshDeployment, "labels: {app: api}}", "labels: {app: api, sidecar.istio.io/inject: \"false\"}}", 1)
	code, out, errOut = runMainStdin(t, skipped, append(base, "-o", "yaml")...)
	if code != ExitOK || strings.Contains(out, "istio-proxy") || !strings.Contains(out, "--mesh=none") ||
		!strings.Contains(errOut, `mesh none, from its label sidecar.istio.io/inject: "false"`) {
		t.Errorf("inject false: exit %d\nstderr: %s\nstdout: %s", code, errOut, out)
	}
	code, out, errOut = runMainStdin(t, skipped, append(base, "--mesh", "istio", "-o", "yaml")...)
	if code != ExitUsage || out != "" || !strings.Contains(errOut, "plan it with --mesh none") {
		t.Errorf("--mesh istio on inject false: exit %d\nstderr: %s\nstdout: %s", code, errOut, out)
	}
	// Without -f, a patch names a pod plan cannot see: it needs --mesh.
	code, out, errOut = runMain(t, "plan", "--p99", "450ms", "--eds-lag", "5s", "-o", "yaml", "--container", "api")
	if code != ExitUsage || out != "" || !strings.Contains(errOut, "pass --mesh") {
		t.Errorf("patch without -f or --mesh: exit %d\nstderr: %s\nstdout: %s", code, errOut, out)
	}
}

// TestReplanChangesOnlyTheNewNumber: a re-plan with a new --eds-lag changes the lines whose
// values change, and moves none of the user's flags.
func TestReplanChangesOnlyTheNewNumber(t *testing.T) {
	base := []string{"plan", "--mesh", "none", "--p99", "450ms", "--app-drain", "5s", "-f", "-", "-o", "yaml"}
	code, first, errOut := runMainStdin(t, noMeshDeployment, append(base, "--eds-lag", "5s")...)
	if code != ExitOK {
		t.Fatalf("first plan: exit %d, %s", code, errOut)
	}
	// The user adds a scraper's source after plan's flags.
	edited := strings.Replace(first, "- --log-file=/proc/1/fd/1\n", "- --log-file=/proc/1/fd/1\n                - --ignore-source=10.9.0.0/16\n", 1)
	if edited == first {
		t.Fatalf("no --log-file line to add after:\n%s", first)
	}
	code, again, errOut := runMainStdin(t, edited, append(base, "--eds-lag", "6s")...)
	if code != ExitOK {
		t.Fatalf("re-plan: exit %d, %s", code, errOut)
	}
	before, after := strings.Split(edited, "\n"), strings.Split(again, "\n")
	var changed []string
	for i := range max(len(before), len(after)) {
		if i >= len(before) || i >= len(after) || before[i] != after[i] {
			changed = append(changed, strings.TrimSpace(after[min(i, len(after)-1)]))
		}
	}
	for _, c := range changed {
		if !strings.Contains(c, "--eds-lag-bound=") && !strings.Contains(c, "terminationGracePeriodSeconds") && !strings.Contains(c, "--grace-period=") {
			t.Errorf("re-plan changed %q: want only the lines whose numbers change (%q)\n%s", c, changed, again)
		}
	}
}
