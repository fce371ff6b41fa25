package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/meshdrain/meshdrain/pkg/mesh"
	"github.com/meshdrain/meshdrain/pkg/operator/plan"
)

// What plan writes, prestop accepts: over a grid of plan inputs (both meshes, every sidecar
// kind, --quiet, --poll, --rps-per-client, --client-period, --min-wait, grace periods), every
// preStop plan writes passes prestop's own start checks (what --validate runs), and every
// plan refused is refused with exactly the problems prestop finds in the preStop it would
// have written.
func TestEveryPlannedPrestopIsAccepted(t *testing.T) {
	ms := time.Millisecond
	s := time.Second
	logFile := filepath.Join(t.TempDir(), "prestop.log")
	var accepted, refused int
	for _, m := range []mesh.Mesh{mesh.Istio, mesh.Linkerd} {
		for _, sidecar := range plan.Sidecars {
			if m == mesh.Linkerd && sidecar == plan.ExitOnZero {
				continue
			}
			for _, quiet := range []time.Duration{0, 100 * ms, 300 * ms, s, 5 * s, 40 * s} {
				for _, poll := range []time.Duration{0, 10 * ms, 20 * ms, 200 * ms, s} {
					for _, rate := range []float64{0, 0.5, 5} {
						for _, period := range []time.Duration{0, 2 * s} {
							for _, minWait := range []time.Duration{0, s, 60 * s} {
								for _, lag := range []time.Duration{2 * s, 12 * s} {
									for _, current := range []time.Duration{0, 10 * s, 90 * s} {
										in := plan.Input{Mesh: m, Sidecar: sidecar, P99: 450 * ms, EDSLag: lag, Quiet: quiet, Poll: poll,
											RPSPerClient: rate, ClientPeriod: period, MinWait: minWait, CurrentGracePeriod: current}
										name := fmt.Sprintf("%+v", in)
										p, err := plan.Recommend(in)
										var refusal *plan.PrestopRefusal
										switch {
										case err == nil:
											accepted++
											if problems := prestopProblems(t, p, logFile); len(problems) > 0 {
												t.Fatalf("%s: plan wrote %q, which prestop refuses: %v", name, p.PrestopArgs(), problems)
											}
										case errors.As(err, &refusal):
											refused++
											got := prestopProblems(t, refusal.Plan, logFile)
											if fmt.Sprint(got) != fmt.Sprint(refusal.Problems) {
												t.Fatalf("%s: plan refused with %v, prestop would say %v", name, refusal.Problems, got)
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
	}
	if accepted < 1000 || refused < 100 {
		t.Errorf("the grid reached %d accepted and %d refused plans: it no longer covers both sides", accepted, refused)
	}
	t.Logf("%d plans accepted by prestop, %d refused by both with the same words", accepted, refused)
}

// prestopProblems are the problems prestop finds at start in the plan's preStop, its log
// file moved to a writable place (the pod's /proc/1/fd/1 is not this test's).
func prestopProblems(t *testing.T, p plan.Plan, logFile string) []error {
	t.Helper()
	args := p.PrestopArgs()[1:] // without "prestop"
	for i, a := range args {
		if strings.HasPrefix(a, "--log-file=") {
			args[i] = "--log-file=" + logFile
		}
	}
	_, problems := CheckPrestopConfig(context.Background(), args, nil)
	// CheckPrestopConfig's problems are usage errors; compare their words.
	words := make([]error, len(problems))
	for i, p := range problems {
		words[i] = errors.New(p.Error())
	}
	return words
}

// The bug that issue 19 found: plan wrote a --quiet that prestop refused.
func TestPlanRefusesAQuietPrestopRefuses(t *testing.T) {
	code, out, errOut := runMain(t, "plan", "--p99", "450ms", "--eds-lag", "8s", "--quiet", "300ms")
	if code != ExitUsage || !strings.Contains(errOut, "--quiet 300ms is shorter than two polls") {
		t.Errorf("plan --quiet 300ms: exit %d, stderr %q, stdout %q", code, errOut, out)
	}
}

// What plan writes, prestop accepts, with the flags a re-plan keeps from the workload: over a
// grid of kept flags (valid, invalid, and valid only with some polls) and plans (both meshes,
// several polls, the grace period kept or lowered), a re-plan succeeds exactly when prestop
// accepts the preStop it writes (plan's own flags and the kept ones, in their order), and a
// refusal names the kept flags. (--validate and --help, which prestop --validate cannot judge,
// are refused by plan alone: TestReplanRefusesAKeptFlagPrestopRefuses.)
func TestEveryKeptPrestopFlagIsCheckedAsPrestopDoes(t *testing.T) {
	keptSets := [][]string{
		{"--drain-at=end"}, {"--port", "8080"}, {"--client-evidence", "off"}, {"--strict-active"}, {"--settled-quiet=2s"},
		{"--streams-wait=10s"}, {"--inbound-listener-port=15006"}, {"--dry-run"}, {"-v"}, {"--log-format=console"},
		{"--connect-timeout=1s"}, {"--fallback-wait=3s"}, {"--drain-mode=immediate"}, {"--shutdown-url=http://127.0.0.1:8080/shutdown"},
		{"--mesh=auto"}, {"--admin=http://127.0.0.1:15001"}, {"--log-file=/dev/stdout"},
		{"--drain-at=sometimes"}, {"--port", "0"}, {"--settled-quiet=10ms"}, {"--settled-quiet=300ms"}, {"--streams-wait=-1s"},
		{"--connect-timeout=0s"}, {"--drain-mode=never"}, {"--shutdown-url=http://10.0.0.1/shutdown"}, {"--port=8080", "--cluster=local_app"},
		{"--bogus"}, {"--log-format=xml"}, {"--admin=http://10.1.2.3:15000"}, {"--signal=KILL", "--pid=1"}, {"--client-evidence"},
		{"--exec=/bin/true", "--", "now"},
	}
	plans := [][]string{
		{}, {"--poll", "100ms"}, {"--lower-grace-period"}, {"--sidecar", "native"},
		{"--mesh", "linkerd", "--sidecar", "classic"}, {"--mesh", "linkerd", "--poll", "100ms", "--lower-grace-period"},
	}
	var accepted, refused int
	for _, extra := range plans {
		args := append([]string{"plan", "--p99", "450ms", "--eds-lag", "12s", "-f", "-", "-o", "json"}, extra...)
		// plan's own preStop for this plan, without kept flags: from the manifest without them.
		bare := strings.Replace(tunedDeployment, "                  - --drain-at=end        # our sidecar's own drain is turned off\n                  - --port\n                  - \"8080\"\n                  - --client-evidence\n                  - \"off\"\n                  - --strict-active\n", "", 1)
		code, out, errOut := runMainStdin(t, bare, args...)
		if code != ExitOK {
			t.Fatalf("%v without kept flags: exit %d, stderr %s", extra, code, errOut)
		}
		own := writtenCommand(t, out)
		for _, kept := range keptSets {
			var lines strings.Builder
			for _, k := range kept {
				lines.WriteString("                  - " + strconv.Quote(k) + "\n")
			}
			manifest := bare + lines.String()
			name := fmt.Sprintf("plan %v keeping %q", extra, kept)
			code, out, errOut := runMainStdin(t, manifest, args...)
			// What plan writes: its own flags, then the kept ones; in a Linkerd plan --mesh is
			// plan's, and a preStop's own --admin stands instead of plan's default.
			want, keptWant := slices.Clone(own), kept
			if slices.Contains(extra, "linkerd") {
				keptWant = slices.DeleteFunc(slices.Clone(kept), func(k string) bool { return strings.HasPrefix(k, "--mesh=") })
				if slices.ContainsFunc(kept, func(k string) bool { return strings.HasPrefix(k, "--admin=") }) {
					want = slices.DeleteFunc(want, func(k string) bool { return strings.HasPrefix(k, "--admin=") })
				}
			}
			want = append(want, keptWant...)
			problems := prestopProblemsOf(t, want)
			switch {
			case code == ExitOK:
				accepted++
				if got := writtenCommand(t, out); !slices.Equal(got, want) {
					t.Errorf("%s: wrote %q, want plan's own flags then the kept ones: %q", name, got, want)
				}
				if len(problems) > 0 {
					t.Errorf("%s: plan wrote a preStop prestop refuses: %v", name, problems)
				}
			case code == ExitUsage && strings.Contains(errOut, "prestop would refuse the preStop with the flags plan keeps from it (") && strings.Contains(errOut, strings.Join(kept, " ")+"):"):
				refused++
				if len(problems) == 0 {
					t.Errorf("%s: plan refused a preStop prestop accepts: %s", name, errOut)
				}
			default:
				t.Errorf("%s: exit %d, stderr %s", name, code, errOut)
			}
		}
	}
	if accepted < 50 || refused < 50 {
		t.Errorf("the grid reached %d accepted and %d refused re-plans: it no longer covers both sides", accepted, refused)
	}
	t.Logf("%d re-plans accepted by prestop, %d refused by both", accepted, refused)
}

// writtenCommand is the preStop command of plan -o json, the binary first.
func writtenCommand(t *testing.T, out string) []string {
	t.Helper()
	var doc struct {
		Workload struct{} `json:"workload"`
		Prestop  []string `json:"prestop_command"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	return doc.Prestop
}
