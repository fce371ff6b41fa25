package cli

import (
	"bytes"
	"strings"
	"testing"
)

func runMain(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = Main(args, strings.NewReader(""), &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestPlanUserScenario(t *testing.T) {
	code, out, errOut := runMain(t, "plan", "--p99", "450ms", "--eds-lag", "8s", "--app-drain", "2s", "--sidecar", "classic", "--grace-period", "30s")
	if code != ExitOK {
		t.Fatalf("exit %d, stderr %s", code, errOut)
	}
	for _, want := range []string{"terminationGracePeriodSeconds: 15", `"terminationDrainDuration": "15s"`, "prestop --grace-period=15s --app-drain=2s"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestPlanYAML(t *testing.T) {
	code, out, errOut := runMain(t, "plan", "--p99", "450ms", "--eds-lag", "8s", "-o", "yaml", "--container", "web", "--image", "registry.example/meshdrain:v1")
	if code != ExitOK {
		t.Fatalf("exit %d, stderr %s", code, errOut)
	}
	for _, want := range []string{`- name: "web"`, `image: "registry.example/meshdrain:v1"`, "terminationGracePeriodSeconds: 15"} {
		if !strings.Contains(out, want) {
			t.Errorf("yaml lacks %q:\n%s", want, out)
		}
	}
}

func TestPlanUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"plan", "--eds-lag", "8s"},
		{"plan", "--p99", "450ms"},
		{"plan", "--p99", "450ms", "--eds-lag", "8s", "--sidecar", "ambient"},
		{"plan", "--p99", "450ms", "--eds-lag", "8s", "--app-drain", "100ms"},
		{"plan", "--p99", "450ms", "--eds-lag", "8s", "-o", "json"},
		{"plan", "--p99", "soon"},
	} {
		if code, _, errOut := runMain(t, args...); code != ExitUsage || errOut == "" {
			t.Errorf("%v: exit %d (stderr %q), want %d with a message", args, code, errOut, ExitUsage)
		}
	}
}
