package podsim_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/meshdrain/meshdrain/pkg/operator/plan"
	"github.com/meshdrain/meshdrain/pkg/sim/podsim"
)

// planFlags are the `meshdrain plan` flags that give in, as an operator would type them. The
// regime is left to plan's own default.
func planFlags(in plan.Input) []string {
	flags := []string{"--p99", in.P99.String(), "--quiet", in.Quiet.String(), "--poll", in.Poll.String(),
		"--app-drain", in.AppDrain.String(), "--min-wait", in.MinWait.String(), "--sidecar", string(in.Sidecar),
		"--grace-period", in.CurrentGracePeriod.String(), "--drain-duration", in.DrainDuration.String()}
	if in.Clients > 0 {
		flags = append(flags, "--eds-lag", fmt.Sprintf("p50=%s,p99=%s", in.EDSLagMedian, in.EDSLag), "--clients", strconv.Itoa(in.Clients))
	} else {
		flags = append(flags, "--eds-lag", in.EDSLag.String())
	}
	if in.ClientPeriod > 0 {
		flags = append(flags, "--client-period", in.ClientPeriod.String())
	}
	if in.RPSPerClient > 0 {
		flags = append(flags, "--rps-per-client", strconv.FormatFloat(in.RPSPerClient, 'g', -1, 64))
	}
	return flags
}

// TestRecommendedIsWhatPlanWrites: the simulator's recommended sidecars (classic and native)
// are what the `meshdrain plan` command writes for the simulated world with its default
// regime: the app's preStop, istio-proxy's preStop (meshdrain hold), terminationDrainDuration
// and the grace period. A change to plan's defaults or arithmetic shows here, not as a
// simulator that replays something no user deploys.
func TestRecommendedIsWhatPlanWrites(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: builds the binary")
	}
	bin := buildMeshdrain(t)
	for _, name := range []string{"steady", "sparse", "bursts", "late-client", "clients-500"} {
		tr, err := podsim.TrafficByName(name)
		if err != nil {
			t.Fatal(err)
		}
		sc := tr.Apply(podsim.UserScenario())
		for _, route := range []struct {
			sidecar plan.Sidecar
			spec    func(podsim.Scenario) (podsim.SidecarSpec, error)
		}{{plan.Classic, podsim.RecommendedSidecar}, {plan.Native, podsim.RecommendedNativeSidecar}} {
			spec, err := route.spec(sc)
			if err != nil {
				t.Fatal(err)
			}
			in := podsim.PlanInput(sc)
			in.Sidecar = route.sidecar
			cmd := exec.Command(bin, append([]string{"plan", "-o", "json"}, planFlags(in)...)...)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Run(); err != nil {
				t.Fatalf("%s %s: meshdrain plan: %v\n%s", name, route.sidecar, err, stderr.String())
			}
			var written struct {
				Grace        int      `json:"termination_grace_period_seconds"`
				TerminationD string   `json:"termination_drain_duration"`
				Defers       *bool    `json:"defer_sidecar_drain"`
				Prestop      []string `json:"prestop_command"`
				Proxy        []string `json:"proxy_prestop_command"`
			}
			if err := json.Unmarshal(stdout.Bytes(), &written); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			what := fmt.Sprintf("%s, %s sidecar", name, route.sidecar)
			if written.Defers == nil || !*written.Defers || len(written.Proxy) == 0 {
				t.Fatalf("%s: plan wrote defer_sidecar_drain %v, proxy preStop %q: its default is no longer regime (b); the simulator's recommended must follow", what, written.Defers, written.Proxy)
			}
			if !slices.Equal(written.Prestop[1:], spec.PlanPrestopArgs) {
				t.Errorf("%s: plan writes the app's preStop %q, the simulator runs %q", what, written.Prestop[1:], spec.PlanPrestopArgs)
			}
			if !slices.Equal(written.Proxy[1:], spec.PlanHoldArgs) {
				t.Errorf("%s: plan writes istio-proxy's preStop %q, the simulator runs %q", what, written.Proxy[1:], spec.PlanHoldArgs)
			}
			grace := spec.GracePeriod
			if grace == 0 {
				grace = sc.GracePeriod
			}
			if time.Duration(written.Grace)*time.Second != grace {
				t.Errorf("%s: plan writes a grace period of %ds, the simulator uses %s", what, written.Grace, grace)
			}
			if route.sidecar == plan.Classic {
				if d, err := time.ParseDuration(written.TerminationD); err != nil || d != spec.TerminationDrainDuration {
					t.Errorf("%s: plan writes terminationDrainDuration %q, the simulator uses %s", what, written.TerminationD, spec.TerminationDrainDuration)
				}
			}
		}
	}
}

// TestRegimeBPodGone replays plan's default route, classic and native, beside its opt-out
// (regime a): meshdrain hold holds the proxy until the app's hook has decided and the app has
// let go, calls pilot-agent's /drain, and the proxy then exits at its SIGTERM, so the pod is
// gone at the app's exit, not at the grace period as in regime (a). Nothing is lost in any.
func TestRegimeBPodGone(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: builds the binary and runs the simulator")
	}
	bin := buildMeshdrain(t)
	rows := untilTimely(t, 0.25, func(scale float64, late []podsim.Result) []podsim.Result {
		// A light load, as TestDeferredDrainThatIsNotDeferred: the simulator runs in the
		// test's own process.
		sc := podsim.UserScenario()
		sc.QPS, sc.Clients, sc.TimeScale, sc.Retries, sc.Seed, sc.MeshdrainBinary = 200, 20, scale, 0, 1, bin
		var specs []podsim.SidecarSpec
		for _, route := range []func(podsim.Scenario) (podsim.SidecarSpec, error){podsim.RecommendedSidecar, podsim.RecommendedNativeSidecar, podsim.RegimeASidecar} {
			spec, err := route(sc)
			if err != nil {
				t.Fatal(err)
			}
			if late == nil || slices.ContainsFunc(late, func(r podsim.Result) bool { return r.Sidecar == spec.Name }) {
				specs = append(specs, spec)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(300*scale*float64(time.Second))+30*time.Second)
		defer cancel()
		results, err := podsim.Run(ctx, podsim.Options{Scenario: sc, Strategies: []podsim.Strategy{{Kind: podsim.StrategyMeshdrain}}, Sidecars: specs})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range results {
			if r.ClientFailures != 0 || r.Sidecar5xx != 0 {
				t.Errorf("time scale %g, %s: %d client failures, %d sidecar 5xx; want none", scale, r.Sidecar, r.ClientFailures, r.Sidecar5xx)
			}
			if r.Sidecar == "regime-a" {
				if r.Hold != nil {
					t.Errorf("regime-a ran a hold: %+v", r.Hold)
				}
				continue
			}
			if h := r.Hold; h == nil || h.Reason != "released" || h.Prestop != "done" || !h.DrainCalled || h.ExitCode != 0 || r.HoldError != "" {
				t.Errorf("time scale %g, %s: hold %+v (%s): want released once prestop was done, /drain called, exit 0", scale, r.Sidecar, r.Hold, r.HoldError)
			}
			if r.Killed || r.PodGoneS < r.AppExitS || r.SidecarExit < r.AppExitS {
				t.Errorf("time scale %g, %s: killed %v %q, app exit %.2fs, sidecar exit %.2fs, pod gone %.2fs: the proxy must outlive the app and exit at its SIGTERM",
					scale, r.Sidecar, r.Killed, r.KilledDetail, r.AppExitS, r.SidecarExit, r.PodGoneS)
			}
		}
		return results
	})
	a := rows["meshdrain/regime-a"]
	for _, name := range []string{"meshdrain/recommended", "meshdrain/recommended-native"} {
		b, ok := rows[name]
		if !ok {
			t.Fatalf("no %s row", name)
		}
		t.Logf("%s: app stop %.2fs, app exit %.2fs, hold returned after %.2fs, pod gone %.2fs (regime-a: %.2fs), time scale %g",
			name, b.AppStopS, b.AppExitS, b.Hold.ElapsedPodS, b.PodGoneS, a.PodGoneS, b.Scale)
		// hold lets go two reads after the app has: far sooner than the grace period that
		// regime (a)'s classic proxy lives, whatever this machine's delays.
		if b.PodGoneS >= a.PodGoneS {
			t.Errorf("%s: pod gone at %.2fs, not before regime (a)'s %.2fs", name, b.PodGoneS, a.PodGoneS)
		}
		// And the proxy ends at its SIGTERM, not terminationDrainDuration later: the pod is gone
		// within hold's two reads in a row after the app's exit (three polls, as the first may
		// come just before it), plus what hold's process measured beyond its own clock.
		const holdPoll = 0.2
		if bound, allow := b.AppExitS+3*holdPoll+0.25, b.Lateness.HoldProcessS; b.PodGoneS > bound+allow {
			t.Errorf("%s: pod gone at %.2fs, later than the app's exit %.2fs + 3 hold polls + 0.25s (%.2fs), + %.2fs hold's process measured beyond its clock (time scale %g)",
				name, b.PodGoneS, b.AppExitS, bound, allow, b.Scale)
		}
	}
}
