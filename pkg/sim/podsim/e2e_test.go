package podsim_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshdrain/meshdrain/pkg/sim/podsim"
)

// TestSimulateEndToEnd builds meshdrain, runs `meshdrain-sim simulate` with it (so the preStop
// under test is the real binary, exec'd by the simulator's kubelet) at a small time scale,
// and checks the claims the README makes from the default table. What is lost is judged on
// every replay; how soon meshdrain let the app stop, and what the other rows' timers did, on
// the replay at the smallest time scale that kept pod time, or with what the row measured
// allowed for (untilTimely).
func TestSimulateEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: builds the binary and runs the simulator")
	}
	bin := buildMeshdrain(t)

	const (
		quiet = time.Second
		poll  = 200 * time.Millisecond
		// slack covers what happens after meshdrain has decided: its process exiting and the
		// kubelet sending SIGTERM (a few milliseconds of real time, divided by the scale).
		slack = 0.1
	)
	results := untilTimely(t, 0.2, func(scale float64, late []podsim.Result) []podsim.Result {
		// The user's scenario at half the rate (and half the clients, so each client's rate
		// and thus the gaps the quiet window must bridge are unchanged), to stay light on a
		// shared CI machine.
		args := append(rowFlags(late), "--qps", "400", "--clients", "25", "--quiet", quiet.String(), "--poll", poll.String())
		report := simulateReport(t, bin, scale, args...)
		for _, r := range report.Results {
			// Nothing lost, and no stop before the last client, on every replay.
			if r.Strategy == "meshdrain" && r.Sidecar == "recommended" {
				if r.Sidecar5xx != 0 || r.ClientFailures != 0 {
					t.Errorf("time scale %g: meshdrain with the recommended sidecar: %d sidecar 5xx, %d client failures; want 0 and 0", scale, r.Sidecar5xx, r.ClientFailures)
				}
				if r.AppStopS < r.LastClientLagS {
					t.Errorf("time scale %g: meshdrain told the app to stop at %.2fs, before the last client stopped at %.2fs", scale, r.AppStopS, r.LastClientLagS)
				}
			}
		}
		return report.Results
	})
	for _, name := range []string{"none/istio-default", "sleep:5s/istio-default", "sleep:15s/istio-default", "meshdrain/istio-default",
		"none/recommended", "sleep:5s/recommended", "sleep:15s/recommended", "meshdrain/recommended"} {
		r, ok := results[name]
		if !ok {
			t.Fatalf("no %s result: want 4 strategies × 2 sidecars", name)
		}
		t.Logf("%-24s requests %d, sidecar 5xx %d, client failures %d %v, app stop %.2fs, pod gone %.2fs, time scale %g",
			name, r.Requests, r.Sidecar5xx, r.ClientFailures, r.FailuresByKind, r.AppStopS, r.PodGoneS, r.Scale)
	}
	// What holds on any replay: the same requests, and without a preStop the app stops while
	// clients still send.
	md := results["meshdrain/recommended"]
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

	// When and how each row ended, against bounds that allow what the row measured.
	if md.Meshdrain == nil || md.Meshdrain.Reason != "quiet" {
		t.Fatalf("meshdrain's final event = %+v, want reason quiet", md.Meshdrain)
	}
	// The window is at least --quiet; the last client's own pauses may stretch it (rule.go).
	window, _ := md.Meshdrain.Raw["window_ms"].(float64)
	windowS := window / 1000 / md.Scale
	if windowS < quiet.Seconds() {
		t.Errorf("meshdrain's window %.2fs is shorter than --quiet", windowS)
	}
	margin := windowS + 2*poll.Seconds()
	if allow, bound := stopAllowance(md, margin), md.LastClientLagS+margin+slack; md.AppStopS > bound+allow {
		t.Errorf("meshdrain told the app to stop at %.2fs, later than last EDS lag %.2fs + its window %.2fs + 2 polls (%.2fs), + %.2fs for the delays it measured (time scale %g)",
			md.AppStopS, md.LastClientLagS, windowS, bound, allow, md.Scale)
	}
	if s15 := results["sleep:15s/recommended"]; s15.AppStopS <= md.AppStopS {
		t.Errorf("sleep:15s stopped the app at %.2fs, not later than meshdrain's %.2fs", s15.AppStopS, md.AppStopS)
	}
	// Envoy is killed at 5 s with late clients still sending: every strategy loses requests
	// in flight, and meshdrain says so (exit 5). That is the scenario where pilot-agent killed
	// Envoy within a second of 5 s (it counts terminationDrainDuration from when its drain
	// call returns, which a loaded machine delays): the late clients thin out after 5 s, the
	// last stops at 7.58 s, and a kill a second late still meets several of them sending.
	const killedInTime = 6.0
	for _, name := range []string{"sleep:5s/istio-default", "sleep:15s/istio-default", "meshdrain/istio-default"} {
		r := results[name]
		switch {
		case r.SidecarExit > killedInTime:
			t.Errorf("%s: pilot-agent killed Envoy at %.2fs instead of 5s even at time scale %g: the scenario did not happen on this machine", name, r.SidecarExit, r.Scale)
		case r.ClientFailures == 0:
			t.Errorf("%s: no client failures, but Envoy was killed at %.2fs with late clients' requests in flight", name, r.SidecarExit)
		}
	}
	if r := results["meshdrain/istio-default"]; r.SidecarExit <= killedInTime && (r.Meshdrain == nil || r.Meshdrain.Reason != "sidecar-gone-busy" || r.Meshdrain.ExitCode != 5) {
		t.Errorf("meshdrain/istio-default final event = %+v, want reason sidecar-gone-busy, exit 5", r.Meshdrain)
	}
}

// timeScales are the time scales an end-to-end test replays its scenario at, in turn, until a
// replay keeps pod time: base (twice that under the race detector, which slows whatever runs
// in the test's process and loads the machine with the race-built tests beside it), doubled
// at each step up to real time, where the simulator asks least of the machine.
func timeScales(base float64) []float64 {
	if raceEnabled {
		base *= 2
	}
	var scales []float64
	for s := base; s < 1; s *= 2 {
		scales = append(scales, s)
	}
	return append(scales, 1)
}

// untilTimely replays a scenario at each of timeScales(base) in turn until every row of it (a
// strategy under a sidecar) has kept pod time: no timing warning (the simulator checks every
// actor: its timers, pilot-agent's drain, the clients' sends and EDS updates, meshdrain's
// process). A busy machine stretches pod time, most at small scales, and a claim about timing
// judged on such a row would be a claim about the machine. Rows are independent replays of the
// same seed, and pod time does not depend on the scale, so only the late rows are replayed:
// replay runs the scenario at scale, every row when late is nil, else at least the late ones,
// and judges what holds on any replay (nothing lost) itself. The rows come back by
// "strategy/sidecar", each from its last replay. A row that kept pod time is judged by the
// caller's bounds; one that did not even at real time, by bounds that allow what it measured
// (its Lateness): its timing is never left unjudged.
func untilTimely(t *testing.T, base float64, replay func(scale float64, late []podsim.Result) []podsim.Result) map[string]replayed {
	t.Helper()
	rows := map[string]replayed{}
	var late []podsim.Result
	scales := timeScales(base)
	for i, scale := range scales {
		wanted := map[string]bool{}
		for _, r := range late {
			wanted[rowName(r)] = true
		}
		results := replay(scale, late)
		late = nil
		var why []string
		for _, r := range results {
			if i > 0 && !wanted[rowName(r)] {
				continue // a row the flags brought along, already timely
			}
			rows[rowName(r)] = replayed{Result: r, Scale: scale}
			if len(r.Warnings) > 0 {
				late = append(late, r)
				why = append(why, fmt.Sprintf("%s: %s", rowName(r), strings.Join(r.Warnings, "; ")))
			}
		}
		switch {
		case len(late) == 0:
			return rows
		case i == len(scales)-1:
			t.Logf("%d rows did not keep pod time even at time scale %g: their timing is judged with what they measured allowed for: %s", len(late), scale, strings.Join(why, " | "))
		default:
			t.Logf("time scale %g did not keep pod time for %d rows; replaying them at %g: %s", scale, len(late), scales[i+1], strings.Join(why, " | "))
		}
	}
	return rows
}

// stopAllowance is what a bound on when meshdrain let the app stop allows for beyond margin,
// the time after the last arrival that meshdrain's rule takes (its quiet window and polls): the
// delays the row measured outside meshdrain (its clients' sends later than planned, its
// process's exec and exit) and, in a row that did not keep pod time, meshdrain's own decision
// later than margin after the last arrival it saw (its polls came late; the rule's precision
// is what its unit tests check, on an injected clock).
func stopAllowance(r replayed, margin float64) float64 {
	allow := r.Lateness.ClientSendS + r.Lateness.MeshdrainProcessS
	if len(r.Warnings) > 0 && r.Meshdrain != nil {
		podS := func(field string) float64 { v, _ := r.Meshdrain.Raw[field].(float64); return v / 1000 / r.Scale }
		allow += max(podS("elapsed_ms")-podS("last_arrival_ms")-margin, 0)
	}
	return allow
}

// replayed is a row as replayed at its time scale.
type replayed struct {
	podsim.Result
	Scale float64
}

// rowName is a row's "strategy/sidecar".
func rowName(r podsim.Result) string { return r.Strategy + "/" + r.Sidecar }

// rowFlags are simulate's --strategy and --sidecar for the rows given: every strategy and
// sidecar of one of them (none: the command's defaults).
func rowFlags(rows []podsim.Result) []string {
	if len(rows) == 0 {
		return nil
	}
	var strategies, sidecars []string
	for _, r := range rows {
		if !slices.Contains(strategies, r.Strategy) {
			strategies = append(strategies, r.Strategy)
		}
		if !slices.Contains(sidecars, r.Sidecar) {
			sidecars = append(sidecars, r.Sidecar)
		}
	}
	return []string{"--strategy", strings.Join(strategies, ","), "--sidecar", strings.Join(sidecars, ",")}
}

// built is the pod binary and meshdrain-sim, built once for every test of the package.
var built struct {
	once     sync.Once
	dir, bin string
	err      error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if built.dir != "" {
		_ = os.RemoveAll(built.dir)
	}
	os.Exit(code)
}

// buildMeshdrain builds the pod binary and meshdrain-sim side by side, as make build puts
// them, once for the package, and returns the pod binary's path.
func buildMeshdrain(t *testing.T) string {
	t.Helper()
	built.once.Do(func() {
		if built.dir, built.err = os.MkdirTemp("", "podsim-e2e-"); built.err != nil {
			return
		}
		build := exec.Command("go", "build", "-o", built.dir+"/", "github.com/meshdrain/meshdrain/cmd/meshdrain", "github.com/meshdrain/meshdrain/cmd/meshdrain-sim")
		if out, err := build.CombinedOutput(); err != nil {
			built.err = fmt.Errorf("go build: %w\n%s", err, out)
		}
		built.bin = filepath.Join(built.dir, "meshdrain")
	})
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.bin
}

// simulateReport runs `meshdrain-sim simulate -o json` at scale with args, using bin (the pod
// binary beside it) as the preStop, and decodes its report; the progress lines go to the test
// log. Its time limit follows the scale: 300 s of pod time, and half a minute for the rest.
func simulateReport(t *testing.T, bin string, scale float64, args ...string) podsim.Report {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(300*scale*float64(time.Second))+30*time.Second)
	defer cancel()
	args = append([]string{"simulate", "-o", "json", "--meshdrain-bin", bin, "--time-scale", strconv.FormatFloat(scale, 'g', -1, 64)}, args...)
	cmd := exec.CommandContext(ctx, bin+"-sim", args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	started := time.Now()
	if err := cmd.Run(); err != nil {
		t.Fatalf("simulate: %v\n%s", err, stderr.String())
	}
	t.Logf("simulate at time scale %g took %v:\n%s", scale, time.Since(started).Round(time.Millisecond), stderr.String())
	var report podsim.Report
	if err := json.Unmarshal(stdout.Bytes(), &report); err != nil {
		t.Fatalf("decode %q: %v", stdout.String(), err)
	}
	return report
}
