package podsim_test

import (
	"strings"
	"testing"

	"github.com/meshdrain/meshdrain/pkg/mesh"
	"github.com/meshdrain/meshdrain/pkg/sim/podsim"
)

// TestSimulateLinkerdEndToEnd is issue 11's claim: in a Linkerd mesh, for the reference
// workload (the user's rollout, every number as in the default demo), meshdrain loses no
// request and lets the app stop within 1.2 s of the last client's endpoint update, where no
// preStop loses late clients' requests and sleep 5s too short a sleep loses them too. The
// proxy is the linkerdsim emulator and the preStop the real binary with --mesh linkerd.
func TestSimulateLinkerdEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: builds the binary and runs the simulator")
	}
	bin := buildMeshdrain(t)
	// floorMargin is the bound: the app stops no later than this after the last
	// client stopped sending (the quiet window, 1 s, plus at most one poll, 200 ms); slack
	// covers what happens after meshdrain has decided, its process exiting and the kubelet
	// sending SIGTERM (a few milliseconds of real time, divided by the scale), as in
	// TestSimulateEndToEnd.
	const floorMargin, slack = 1.2, 0.1

	rows := untilTimely(t, podsim.UserScenario().TimeScale, func(scale float64, late []podsim.Result) []podsim.Result {
		flags := rowFlags(late)
		if flags == nil {
			flags = []string{"--strategy", "none,sleep:5s,meshdrain", "--sidecar", "recommended"}
		}
		report := simulateReport(t, bin, scale, append([]string{"--mesh", "linkerd"}, flags...)...)
		if report.Scenario.Mesh != mesh.Linkerd {
			t.Errorf("report's mesh = %q, want linkerd", report.Scenario.Mesh)
		}
		for _, r := range report.Results {
			if r.Strategy != "meshdrain" {
				continue
			}
			// Nothing lost, and no stop before the last client, on every replay.
			if r.Meshdrain == nil {
				t.Fatalf("time scale %g: no final event of meshdrain's", scale)
			}
			if r.Sidecar5xx != 0 || r.ClientFailures != 0 {
				t.Errorf("time scale %g: meshdrain: %d proxy errors, %d client failures %v; want 0 and 0", scale, r.Sidecar5xx, r.ClientFailures, r.FailuresByKind)
			}
			if r.AppStopS < r.LastClientLagS {
				t.Errorf("time scale %g: meshdrain stopped the app at %.2fs, before the last client stopped at %.2fs", scale, r.AppStopS, r.LastClientLagS)
			}
			if !containsArgs(r.Meshdrain.Args, "--mesh", "linkerd") {
				t.Errorf("meshdrain ran with %v, want --mesh linkerd", r.Meshdrain.Args)
			}
			if r.Killed {
				t.Errorf("time scale %g: meshdrain: something was SIGKILLed: %v", scale, r.KilledDetail)
			}
		}
		return report.Results
	})
	results := map[string]replayed{}
	for _, r := range rows {
		results[r.Strategy] = r
	}
	for _, name := range []string{"none", "sleep:5s", "meshdrain"} {
		r, ok := results[name]
		if !ok {
			t.Fatalf("no %s result", name)
		}
		if r.Requests != results["meshdrain"].Requests {
			t.Errorf("%s sent %d requests, meshdrain %d: the same seed must replay the same requests", name, r.Requests, results["meshdrain"].Requests)
		}
		t.Logf("%-10s requests %d, proxy errors %d, client failures %d %v, app stop %.2fs (last client %.2fs), pod gone %.2fs, time scale %g",
			name, r.Requests, r.Sidecar5xx, r.ClientFailures, r.FailuresByKind, r.AppStopS, r.LastClientLagS, r.PodGoneS, r.Scale)
	}
	// The comparison the README shows: without a preStop the app refuses while the clients
	// still send, and the Linkerd clients do not retry the proxy's 502s; a 5 s sleep ends
	// before the late clients have stopped. That is the scenario where the app got its SIGTERM
	// within a second of its time: the late clients thin out after 5 s, the last stops at
	// 7.58 s, and a SIGTERM a second late still meets several of them sending.
	for name, due := range map[string]float64{"none": 0, "sleep:5s": 5} {
		r := results[name]
		switch {
		case r.AppStopS > due+1:
			t.Errorf("%s: the app got SIGTERM at %.2fs instead of %.0fs even at time scale %g: the scenario did not happen on this machine", name, r.AppStopS, due, r.Scale)
		case r.ClientFailures == 0 || r.FailuresByKind["502 l5d-proxy-error (Linkerd: not retried)"] == 0:
			t.Errorf("%s: %d client failures %v; want the proxy's 502s to reach the clients", name, r.ClientFailures, r.FailuresByKind)
		}
	}
	// How and how soon it ended, against a bound that allows what the row measured.
	md := results["meshdrain"]
	if md.Meshdrain.Reason != "quiet" || md.Meshdrain.ExitCode != 0 {
		t.Errorf("meshdrain's final event: reason %q exit %d, want quiet, 0", md.Meshdrain.Reason, md.Meshdrain.ExitCode)
	}
	if allow := stopAllowance(md, floorMargin); md.AppStopS > md.LastClientLagS+floorMargin+slack+allow {
		t.Errorf("meshdrain stopped the app at %.2fs; the last client stopped at %.2fs: want within %.1fs after it (+%.1fs slack, +%.2fs for the delays it measured at time scale %g)",
			md.AppStopS, md.LastClientLagS, floorMargin, slack, allow, md.Scale)
	}
}

// containsArgs says whether args holds flag followed by value.
func containsArgs(args []string, flag, value string) bool {
	return strings.Contains(" "+strings.Join(args, " ")+" ", " "+flag+" "+value+" ")
}
