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

// What plan writes, prestop and hold accept: over a grid of plan inputs (both meshes, every
// sidecar kind, both drain regimes, --quiet, --poll, --rps-per-client, --client-period,
// --min-wait, grace periods), every preStop plan writes passes prestop's own start checks (what
// --validate runs), and so does istio-proxy's hold in regime (b); every plan refused is refused
// with exactly the problems prestop finds in the preStop it would have written.
func TestEveryPlannedPrestopIsAccepted(t *testing.T) {
	ms := time.Millisecond
	s := time.Second
	logFile := filepath.Join(t.TempDir(), "prestop.log")
	var accepted, refused, holds int
	for _, regime := range []struct {
		m      mesh.Mesh
		defers bool
	}{{mesh.Istio, true}, {mesh.Istio, false}, {mesh.Linkerd, false}} {
		m := regime.m
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
											RPSPerClient: rate, ClientPeriod: period, MinWait: minWait, CurrentGracePeriod: current, DeferSidecarDrain: regime.defers}
										name := fmt.Sprintf("%+v", in)
										p, err := plan.Recommend(in)
										var refusal *plan.PrestopRefusal
										switch {
										case err == nil:
											accepted++
											if problems := prestopProblems(t, p, logFile); len(problems) > 0 {
												t.Fatalf("%s: plan wrote %q, which prestop refuses: %v", name, p.PrestopArgs(), problems)
											}
											if got := slices.Contains(p.PrestopArgs(), "--drain-at=end"); got != regime.defers {
												t.Fatalf("%s: plan wrote %q: --drain-at=end %v, want %v (regime b)", name, p.PrestopArgs(), got, regime.defers)
											}
											if (p.HoldArgs() != nil) != regime.defers {
												t.Fatalf("%s: hold %q in regime b %v", name, p.HoldArgs(), regime.defers)
											}
											if p.HoldArgs() != nil {
												holds++
												if problems := holdProblems(t, p.HoldArgs()[1:], logFile); len(problems) > 0 {
													t.Fatalf("%s: plan wrote %q for istio-proxy, which hold refuses: %v", name, p.HoldArgs(), problems)
												}
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
	if accepted < 1000 || refused < 100 || holds < 500 {
		t.Errorf("the grid reached %d accepted (%d with hold) and %d refused plans: it no longer covers both sides", accepted, holds, refused)
	}
	t.Logf("%d plans accepted by prestop (%d with hold, accepted by hold), %d refused by both with the same words", accepted, holds, refused)
}

// holdProblems are the problems hold --validate finds in args (after "hold"), its log file
// moved to a writable place.
func holdProblems(t *testing.T, args []string, logFile string) []error {
	t.Helper()
	args = slices.Clone(args)
	for i, a := range args {
		if strings.HasPrefix(a, "--log-file=") {
			args[i] = "--log-file=" + logFile
		}
	}
	return loadHold(append(args, "--validate"), nil).problems
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
		{}, {"--poll", "100ms"}, {"--lower-grace-period"}, {"--sidecar", "native"}, {"--defer-sidecar-drain=false"},
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
			if !slices.Contains(extra, "linkerd") && !slices.Contains(extra, "--defer-sidecar-drain=false") {
				// Regime (b): --drain-at is plan's (it writes end), not the preStop's.
				keptWant = slices.DeleteFunc(slices.Clone(kept), func(k string) bool { return strings.HasPrefix(k, "--drain-at=") })
			}
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
				// A re-plan moves nothing: the same flags as plan's own and the kept ones, the
				// kept ones in their order (plan's values stand where the user wrote its flags).
				got := writtenCommand(t, out)
				if !slices.Equal(slices.Sorted(slices.Values(got)), slices.Sorted(slices.Values(want))) || indexOf(got, keptWant) < 0 {
					t.Errorf("%s: wrote %q, want plan's own flags and the kept ones in their order: %q", name, got, want)
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

// What plan writes, hold accepts, with the flags a re-plan keeps from istio-proxy's hold
// preStop: over a grid of kept flags (valid and invalid) and plans, a re-plan succeeds exactly
// when hold accepts the preStop it writes (plan's own flags, then the kept ones), and a refusal
// names the kept flags.
func TestEveryKeptHoldFlagIsCheckedAsHoldDoes(t *testing.T) {
	keptSets := [][]string{
		{"--channel=@team-hold"}, {"--port=8080"}, {"--port=8080", "--port=8443"}, {"--prestop-wait=5s"}, {"--outbound-port=0"},
		{"--drain-url="}, {"--proxy-uid=1337"}, {"--poll=100ms"}, {"-v"}, {"--log-format=console"}, {"--connect-timeout=1s"},
		{"--channel=team-hold"}, {"--port=0"}, {"--prestop-wait=-1s"}, {"--poll=1ms"}, {"--drain-url=http://10.0.0.1:15020/drain"},
		{"--outbound-port=70000"}, {"--bogus"}, {"--log-format=xml"}, {"--connect-timeout=0s"}, {"--validate"}, {"--help"},
	}
	plans := [][]string{{}, {"--lower-grace-period"}, {"--sidecar", "native"}, {"--app-drain", "8s"}}
	proxy := "        - name: istio-proxy\n          image: auto\n          lifecycle:\n            preStop:\n              exec:\n                command:\n" +
		"                  - /meshdrain/meshdrain\n                  - hold\n                  - --grace-period=60s\n                  - --app-drain=5s\n"
	var accepted, refused int
	for _, extra := range plans {
		args := append([]string{"plan", "--p99", "450ms", "--eds-lag", "12s", "-f", "-", "-o", "json"}, extra...)
		code, out, errOut := runMainStdin(t, tunedDeployment+proxy, args...)
		if code != ExitOK {
			t.Fatalf("%v without kept flags: exit %d, stderr %s", extra, code, errOut)
		}
		own := writtenProxyCommand(t, out)
		if len(own) < 3 || own[1] != "hold" {
			t.Fatalf("%v: istio-proxy's preStop %q", extra, own)
		}
		for _, kept := range keptSets {
			var lines strings.Builder
			for _, k := range kept {
				lines.WriteString("                  - " + strconv.Quote(k) + "\n")
			}
			name := fmt.Sprintf("plan %v keeping %q in hold", extra, kept)
			code, out, errOut := runMainStdin(t, tunedDeployment+proxy+lines.String(), args...)
			want := append(slices.Clone(own), kept...)
			problems := holdProblems(t, want[2:], filepath.Join(t.TempDir(), "hold.log"))
			if slices.Contains(kept, "--validate") || slices.Contains(kept, "--help") {
				problems = append(problems, errors.New("a hook that returns at once"))
			}
			switch {
			case code == ExitOK:
				accepted++
				if got := writtenProxyCommand(t, out); !slices.Equal(got, want) {
					t.Errorf("%s: wrote %q, want plan's own flags then the kept ones: %q", name, got, want)
				}
				if len(problems) > 0 {
					t.Errorf("%s: plan wrote a hold preStop hold refuses: %v", name, problems)
				}
			case code == ExitUsage && strings.Contains(errOut, "hold would refuse istio-proxy's preStop with the flags plan keeps from it ("+strings.Join(kept, " ")+"):"):
				refused++
				if len(problems) == 0 {
					t.Errorf("%s: plan refused a hold preStop hold accepts: %s", name, errOut)
				}
			default:
				t.Errorf("%s: exit %d, stderr %s", name, code, errOut)
			}
		}
	}
	if accepted < 30 || refused < 30 {
		t.Errorf("the grid reached %d accepted and %d refused re-plans: it no longer covers both sides", accepted, refused)
	}
	t.Logf("%d re-plans accepted by hold, %d refused by both", accepted, refused)
}

// writtenProxyCommand is istio-proxy's preStop command of plan -o json, the binary first.
func writtenProxyCommand(t *testing.T, out string) []string {
	t.Helper()
	var doc struct {
		Proxy []string `json:"proxy_prestop_command"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	return doc.Proxy
}
