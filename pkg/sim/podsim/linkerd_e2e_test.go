package podsim_test

import (
	"context"
	"strings"
	"testing"
	"time"

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

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	report := simulateReport(t, ctx, bin, "--mesh", "linkerd", "--strategy", "none,sleep:5s,meshdrain", "--sidecar", "recommended")
	if report.Scenario.Mesh != mesh.Linkerd {
		t.Errorf("report's mesh = %q, want linkerd", report.Scenario.Mesh)
	}
	results := map[string]podsim.Result{}
	for _, r := range report.Results {
		results[r.Strategy] = r
		if len(r.Warnings) > 0 {
			t.Logf("%s timing warnings: %v", r.Strategy, r.Warnings)
		}
	}
	md, ok := results["meshdrain"]
	if !ok || md.Meshdrain == nil {
		t.Fatalf("no meshdrain result with its final event: %+v", results)
	}
	if md.Sidecar5xx != 0 || md.ClientFailures != 0 {
		t.Errorf("meshdrain: %d proxy errors, %d client failures %v; want 0 and 0", md.Sidecar5xx, md.ClientFailures, md.FailuresByKind)
	}
	// Nothing lost is judged always; how and how soon it ended, only when the machine kept
	// pod time (the simulator warns when it did not).
	timely := len(md.Warnings) == 0
	if timely && (md.Meshdrain.Reason != "quiet" || md.Meshdrain.ExitCode != 0) {
		t.Errorf("meshdrain's final event: reason %q exit %d, want quiet, 0", md.Meshdrain.Reason, md.Meshdrain.ExitCode)
	}
	if !containsArgs(md.Meshdrain.Args, "--mesh", "linkerd") {
		t.Errorf("meshdrain ran with %v, want --mesh linkerd", md.Meshdrain.Args)
	}
	if md.AppStopS < md.LastClientLagS || timely && md.AppStopS > md.LastClientLagS+floorMargin+slack {
		t.Errorf("meshdrain stopped the app at %.2fs; the last client stopped at %.2fs: want within %.1fs after it (+%.1fs slack)",
			md.AppStopS, md.LastClientLagS, floorMargin, slack)
	}
	if md.Killed {
		t.Errorf("meshdrain: something was SIGKILLed: %v", md.KilledDetail)
	}
	// The comparison the README shows: without a preStop the app refuses while the clients
	// still send, and the Linkerd clients do not retry the proxy's 502s; a 5 s sleep ends
	// before the late clients have stopped.
	for _, name := range []string{"none", "sleep:5s"} {
		r := results[name]
		if r.ClientFailures == 0 || r.FailuresByKind["502 l5d-proxy-error (Linkerd: not retried)"] == 0 {
			t.Errorf("%s: %d client failures %v; want the proxy's 502s to reach the clients", name, r.ClientFailures, r.FailuresByKind)
		}
		if r.Requests != md.Requests {
			t.Errorf("%s sent %d requests, meshdrain %d: the same seed must replay the same requests", name, r.Requests, md.Requests)
		}
	}
	for _, name := range []string{"none", "sleep:5s", "meshdrain"} {
		r := results[name]
		t.Logf("%-10s requests %d, proxy errors %d, client failures %d %v, app stop %.2fs (last client %.2fs), pod gone %.2fs",
			name, r.Requests, r.Sidecar5xx, r.ClientFailures, r.FailuresByKind, r.AppStopS, r.LastClientLagS, r.PodGoneS)
	}
}

// containsArgs says whether args holds flag followed by value.
func containsArgs(args []string, flag, value string) bool {
	return strings.Contains(" "+strings.Join(args, " ")+" ", " "+flag+" "+value+" ")
}
