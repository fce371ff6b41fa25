package cli

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
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
