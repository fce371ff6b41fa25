package cli

import (
	"context"
	"strings"
	"testing"
	"time"
)

// --grace-period takes whole seconds too, as kubectl's flag and terminationGracePeriodSeconds
// say it, in plan, prestop (flag and variable) and check.
func TestGracePeriodInSeconds(t *testing.T) {
	code, out, errOut := runMain(t, "plan", "--p99", "450ms", "--eds-lag", "8s", "--grace-period", "52", "-o", "json")
	if code != ExitOK || !strings.Contains(out, `"current_grace_period": "52s"`) {
		t.Errorf("plan --grace-period 52: exit %d %s\n%s", code, errOut, out)
	}
	for _, tc := range []struct {
		args []string
		env  []string
	}{
		{[]string{"--grace-period", "52"}, nil},
		{[]string{"--grace-period=52"}, nil},
		{nil, environ("MESHDRAIN_GRACE_PERIOD=52")},
	} {
		setup := loadPrestop(context.Background(), tc.args, tc.env)
		if len(setup.problems) > 0 || setup.cfg.GracePeriod != 52*time.Second || setup.cfg.Deadline != 46*time.Second {
			t.Errorf("%v %v: grace %v deadline %v problems %v", tc.args, tc.env, setup.cfg.GracePeriod, setup.cfg.Deadline, setup.problems)
		}
	}
	if got := salvageHold([]string{"--grace-period", "4", "--app-drain", "1s", "--fallback-wait", "10s"}, func(string) (string, bool) { return "", false }); got != 2*time.Second {
		t.Errorf("salvageHold with --grace-period 4: %v, want 2s", got)
	}
	if code, _, errOut := runMain(t, "check", "--grace-period", "fifty"); code != ExitUsage || !strings.Contains(errOut, "grace-period") {
		t.Errorf("check --grace-period fifty: exit %d %q", code, errOut)
	}
}

// Every plan input error names its flag; implausible inputs are warned about, not refused.
func TestPlanInputsNameTheirFlag(t *testing.T) {
	for flag, args := range map[string][]string{
		"--app-drain": {"--app-drain", "-1s"},
		"--quiet":     {"--quiet", "-1s"},
		"--poll":      {"--poll", "-5ms"},
		"--min-wait":  {"--min-wait", "-1s"},
		"--clients":   {"--eds-lag", "p50=1s,p99=3s", "--clients", "-2"},
	} {
		full := append([]string{"plan", "--p99", "450ms", "--eds-lag", "8s"}, args...)
		code, _, errOut := runMain(t, full...)
		if code != ExitUsage || !strings.Contains(errOut, flag) {
			t.Errorf("%v: exit %d, stderr %q does not name %s", args, code, errOut, flag)
		}
	}
	code, out, errOut := runMain(t, "plan", "--p99", "450ms", "--eds-lag", "2h")
	if code != ExitOK || !strings.Contains(out+errOut, "--eds-lag 7200s") || !strings.Contains(out+errOut, "typo for 2s") {
		t.Errorf("plan --eds-lag 2h: exit %d, no warning:\n%s%s", code, out, errOut)
	}
	code, out, errOut = runMain(t, "plan", "--p99", "450ms", "--eds-lag", "8s", "--grace-period", "2h")
	if code != ExitOK || !strings.Contains(out+errOut, "--grace-period 7200s") {
		t.Errorf("plan --grace-period 2h: exit %d, no warning:\n%s%s", code, out, errOut)
	}
}

// plan -f -o yaml replaces a preStop that only sleeps without a flag and says so on stderr,
// and names a comment it drops with the value it described.
func TestPlanSaysWhatItReplacedAndDropped(t *testing.T) {
	manifest := `apiVersion: apps/v1
kind: Deployment
metadata:
  name: orders
spec:
  selector:
    matchLabels: {app: orders}
  template:
    metadata:
      labels: {app: orders}
    spec:
      terminationGracePeriodSeconds: 45  # tuned after incident INC-1234
      containers:
        - name: orders
          image: registry.example.com/orders:1.4
          lifecycle:
            preStop:
              exec:
                command: ["sh", "-c", "sleep 15"]
`
	code, out, errOut := runMainStdin(t, manifest, "plan", "--p99", "450ms", "--eds-lag", "8s", "-f", "-", "-o", "yaml")
	if code != ExitOK || !strings.Contains(errOut, "sleep") || !strings.Contains(errOut, "INC-1234") || strings.Contains(out, "sleep 15") {
		t.Errorf("exit %d\nstderr: %s\nstdout: %s", code, errOut, out)
	}
}
