package podsim_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/meshdrain/meshdrain/pkg/sim/podsim"
)

// TestSimulateEndToEnd builds meshdrain, runs `meshdrain-sim simulate` with it (so the preStop
// under test is the real binary, exec'd by the simulator's kubelet) at a small time scale,
// and checks the claims the README makes from the default table.
func TestSimulateEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: builds the binary and runs the simulator")
	}
	bin := buildMeshdrain(t)

	const (
		timeScale = 0.2
		quiet     = time.Second
		poll      = 200 * time.Millisecond
		// slack covers what happens after meshdrain has decided: its process exiting and the
		// kubelet sending SIGTERM (a few milliseconds of real time, divided by the scale).
		slack = 0.1
	)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// The user's scenario at half the rate (and half the clients, so each client's rate and
	// thus the gaps the quiet window must bridge are unchanged), to stay light on a shared CI
	// machine.
	report := simulateReport(t, ctx, bin, "--time-scale", "0.2", "--qps", "400", "--clients", "25",
		"--quiet", quiet.String(), "--poll", poll.String())
	results := map[string]podsim.Result{}
	for _, r := range report.Results {
		results[r.Strategy+"/"+r.Sidecar] = r
		if len(r.Warnings) > 0 {
			t.Logf("%s/%s timing warnings: %v", r.Strategy, r.Sidecar, r.Warnings)
		}
	}
	if len(results) != 8 {
		t.Fatalf("%d results, want 4 strategies × 2 sidecars", len(results))
	}

	md, ok := results["meshdrain/recommended"]
	if !ok {
		t.Fatal("no meshdrain/recommended result")
	}
	if md.Sidecar5xx != 0 || md.ClientFailures != 0 {
		t.Errorf("meshdrain with the recommended sidecar: %d sidecar 5xx, %d client failures; want 0 and 0", md.Sidecar5xx, md.ClientFailures)
	}
	if md.Meshdrain == nil || md.Meshdrain.Reason != "quiet" {
		t.Errorf("meshdrain's final event = %+v, want reason quiet", md.Meshdrain)
	}
	// The window is at least --quiet; the last client's own pauses may stretch it (rule.go).
	window, _ := md.Meshdrain.Raw["window_ms"].(float64)
	windowS := window / 1000 / timeScale
	if windowS < quiet.Seconds() {
		t.Errorf("meshdrain's window %.2fs is shorter than --quiet", windowS)
	}
	bound := md.LastClientLagS + windowS + 2*poll.Seconds() + slack
	// Nothing lost is judged always; how soon, only when the machine kept pod time.
	if md.AppStopS > bound && len(md.Warnings) == 0 {
		t.Errorf("meshdrain told the app to stop at %.2fs, later than last EDS lag %.2fs + its window %.2fs + 2 polls (%.2fs)", md.AppStopS, md.LastClientLagS, windowS, bound)
	}
	if md.AppStopS < md.LastClientLagS {
		t.Errorf("meshdrain told the app to stop at %.2fs, before the last client stopped at %.2fs", md.AppStopS, md.LastClientLagS)
	}
	if s15 := results["sleep:15s/recommended"]; s15.AppStopS <= md.AppStopS {
		t.Errorf("sleep:15s stopped the app at %.2fs, not later than meshdrain's %.2fs", s15.AppStopS, md.AppStopS)
	}
	// The claims of the other rows, which the README explains.
	if md.Requests == 0 || md.LastClientLagS < 1 {
		t.Errorf("%d requests, last client lag %.2fs: the clients must keep sending after the deletion", md.Requests, md.LastClientLagS)
	}
	for name, r := range results {
		if r.Requests != md.Requests {
			t.Errorf("%s sent %d requests, meshdrain/recommended %d: the same seed must replay the same requests", name, r.Requests, md.Requests)
		}
	}
	for _, name := range []string{"none/istio-default", "none/recommended"} {
		if r := results[name]; r.Sidecar5xx == 0 {
			t.Errorf("%s: no sidecar 5xx, but the app stopped while clients were still sending", name)
		}
	}
	for _, name := range []string{"sleep:5s/istio-default", "sleep:15s/istio-default", "meshdrain/istio-default"} {
		if r := results[name]; len(r.Warnings) > 0 {
			// The simulator says this row's timers fired late (Envoy's 5 s kill among
			// them): its outcome is not the one the claim is about.
			t.Logf("%s: not judged, the machine was too busy to keep pod time", name)
		} else if r.ClientFailures == 0 {
			t.Errorf("%s: no client failures, but Envoy was killed at 5s with late clients' requests in flight", name)
		}
	}
	// Envoy is killed at 5 s with late clients still sending: meshdrain says so (exit 5).
	if r := results["meshdrain/istio-default"]; len(r.Warnings) == 0 && (r.Meshdrain == nil || r.Meshdrain.Reason != "sidecar-gone-busy" || r.Meshdrain.ExitCode != 5) {
		t.Errorf("meshdrain/istio-default final event = %+v, want reason sidecar-gone-busy, exit 5", r.Meshdrain)
	}
	for _, name := range []string{"none/istio-default", "sleep:5s/istio-default", "sleep:15s/istio-default", "meshdrain/istio-default",
		"none/recommended", "sleep:5s/recommended", "sleep:15s/recommended", "meshdrain/recommended"} {
		r := results[name]
		t.Logf("%-24s requests %d, sidecar 5xx %d, client failures %d %v, app stop %.2fs, pod gone %.2fs",
			name, r.Requests, r.Sidecar5xx, r.ClientFailures, r.FailuresByKind, r.AppStopS, r.PodGoneS)
	}
}

// buildMeshdrain builds the pod binary and meshdrain-sim into the test's temporary directory,
// side by side as make build puts them, and returns the pod binary's path.
func buildMeshdrain(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	build := exec.Command("go", "build", "-o", dir+"/", "github.com/meshdrain/meshdrain/cmd/meshdrain", "github.com/meshdrain/meshdrain/cmd/meshdrain-sim")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return filepath.Join(dir, "meshdrain")
}

// simulateReport runs `meshdrain-sim simulate -o json` with args, using bin (the pod binary
// beside it) as the preStop, and decodes its report; the progress lines go to the test log.
func simulateReport(t *testing.T, ctx context.Context, bin string, args ...string) podsim.Report {
	t.Helper()
	cmd := exec.CommandContext(ctx, bin+"-sim", append([]string{"simulate", "-o", "json", "--meshdrain-bin", bin}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	started := time.Now()
	if err := cmd.Run(); err != nil {
		t.Fatalf("simulate: %v\n%s", err, stderr.String())
	}
	t.Logf("simulate took %v:\n%s", time.Since(started).Round(time.Millisecond), stderr.String())
	var report podsim.Report
	if err := json.Unmarshal(stdout.Bytes(), &report); err != nil {
		t.Fatalf("decode %q: %v", stdout.String(), err)
	}
	return report
}
