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

// plan -f -o yaml replaces a preStop that only sleeps without a flag and says so on stderr.
// The grace period the team raised is kept with its comment; lowered (--lower-grace-period),
// the comment stays on the changed line, and stderr names it.
func TestPlanSaysWhatItReplacedAndKept(t *testing.T) {
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
	args := []string{"plan", "--mesh", "istio", "--p99", "450ms", "--eds-lag", "8s", "-f", "-", "-o", "yaml"}
	code, out, errOut := runMainStdin(t, manifest, args...)
	if code != ExitOK || !strings.Contains(errOut, "only slept 15s") || strings.Contains(out, "sleep 15") ||
		!strings.Contains(out, "terminationGracePeriodSeconds: 45  # tuned after incident INC-1234") || !strings.Contains(errOut, "terminationGracePeriodSeconds 45s kept") {
		t.Errorf("exit %d\nstderr: %s\nstdout: %s", code, errOut, out)
	}
	// The app keeps its time after SIGTERM, 45s − 15s; a mistake in the hook's configuration
	// holds the pod as the sleep did, within the deadline 45s − 30s − 1s.
	if !strings.Contains(out, "--app-drain=30s") || !strings.Contains(out, "--fallback-wait=14s") {
		t.Errorf("want --app-drain=30s and --fallback-wait=14s:\n%s", out)
	}
	// An --app-drain shorter than the app had is said, with the flag that keeps it.
	if code, _, errOut := runMainStdin(t, manifest, append(args, "--app-drain", "5s")...); code != ExitOK ||
		!strings.Contains(errOut, "the app had 30s after SIGTERM before (grace 45s − sleep 15s) and gets 6s with this plan") {
		t.Errorf("--app-drain 5s: exit %d, stderr %s", code, errOut)
	}
	code, out, errOut = runMainStdin(t, manifest, append(args, "--lower-grace-period")...)
	// The app keeps its 30s after SIGTERM (grace 45s − sleep 15s), so what suffices is 43s.
	if code != ExitOK || !strings.Contains(out, "terminationGracePeriodSeconds: 43  # tuned after incident INC-1234") ||
		!strings.Contains(errOut, `kept the comment "# tuned after incident INC-1234" (line 12)`) || !strings.Contains(errOut, "terminationGracePeriodSeconds: 45s → 43") {
		t.Errorf("--lower-grace-period: exit %d\nstderr: %s\nstdout: %s", code, errOut, out)
	}
}

// One message per error: a negative --p99 is one error, said once, and several problems are
// one line each, every line saying whose it is.
func TestPlanPrintsOneMessagePerError(t *testing.T) {
	code, out, errOut := runMain(t, "plan", "--p99", "-1s", "--eds-lag", "8s")
	if code != ExitUsage || out != "" || errOut != "meshdrain: plan: --p99 must not be negative, got -1s\n" {
		t.Errorf("--p99 -1s: exit %d, stdout %q, stderr %q: want one line", code, out, errOut)
	}
	if code, _, errOut := runMain(t, "plan", "--p99", "450ms", "--eds-lag", "-2s"); code != ExitUsage || errOut != "meshdrain: --eds-lag: \"-2s\": a lag must not be negative\n" {
		t.Errorf("--eds-lag -2s: exit %d, stderr %q", code, errOut)
	}
	code, _, errOut = runMain(t, "plan", "--p99", "-1s", "--eds-lag", "8s", "--quiet", "-1s", "--min-wait", "-2s")
	lines := strings.Split(strings.TrimSuffix(errOut, "\n"), "\n")
	if code != ExitUsage || len(lines) != 3 {
		t.Fatalf("three bad inputs: exit %d, stderr %q: want three lines", code, errOut)
	}
	for _, l := range lines {
		if !strings.HasPrefix(l, "meshdrain: plan: --") {
			t.Errorf("line %q does not say it is plan's and name its flag", l)
		}
	}
	// prestop's refusal of the plan's preStop: one line per problem too.
	code, _, errOut = runMain(t, "plan", "--p99", "450ms", "--eds-lag", "8s", "--quiet", "15ms", "--poll", "10ms")
	if n := strings.Count(errOut, "\n"); n != 2 {
		t.Errorf("--quiet 15ms --poll 10ms: %d lines, want 2: %q", n, errOut)
	}
	for _, l := range strings.Split(strings.TrimSuffix(errOut, "\n"), "\n") {
		if code != ExitUsage || !strings.HasPrefix(l, "meshdrain: plan: prestop would refuse this plan's preStop: --") {
			t.Errorf("exit %d, line %q", code, l)
		}
	}
}

// No silent coercion: a duration flag whose 0 would become its default is refused, naming
// the flag and the default.
func TestPlanRefusesAZeroThatWouldBecomeADefault(t *testing.T) {
	for flag, want := range map[string]string{
		"--app-drain":      "leave the flag out for 4 × p99 rounded up to a second (2s)",
		"--quiet":          "prestop's default 1s",
		"--poll":           "prestop's default 200ms",
		"--min-wait":       "prestop's default 5s",
		"--drain-duration": "Istio's default 45s",
	} {
		code, out, errOut := runMain(t, "plan", "--p99", "450ms", "--eds-lag", "8s", flag, "0s")
		if code != ExitUsage || out != "" || !strings.HasPrefix(errOut, "meshdrain: "+flag+" 0s: ") || !strings.Contains(errOut, want) {
			t.Errorf("%s 0s: exit %d, stderr %q: want 2 naming the flag and %q", flag, code, errOut, want)
		}
	}
}

// A grace period over ten minutes is warned about on stderr whatever the output format, naming
// the input that drives it.
func TestPlanWarnsOfALongGracePeriod(t *testing.T) {
	for _, format := range [][]string{{"-o", "text"}, {"-o", "json"}, {"-o", "yaml", "--container", "web"}} {
		code, _, errOut := runMain(t, append([]string{"plan", "--mesh", "istio", "--p99", "10m", "--eds-lag", "8s"}, format...)...)
		if code != ExitOK || !strings.Contains(errOut, "meshdrain: plan: terminationGracePeriodSeconds 3162 is over 10 minutes, mostly from --p99 600s") {
			t.Errorf("%v: exit %d, stderr %q", format, code, errOut)
		}
	}
	if code, _, errOut := runMain(t, "plan", "--p99", "450ms", "--eds-lag", "8s"); code != ExitOK || errOut != "" {
		t.Errorf("an ordinary plan: exit %d, stderr %q: want nothing", code, errOut)
	}
}
