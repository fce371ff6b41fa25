package podsim

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/meshdrain/meshdrain/pkg/hook/hold"
)

// flagValues reads "--name value" pairs after the subcommand, with every duration unscaled
// back to pod time.
func flagValues(t *testing.T, sc Scenario, args []string) map[string]string {
	t.Helper()
	values := map[string]string{}
	for i := 1; i < len(args); i += 2 {
		if !strings.HasPrefix(args[i], "--") || i+1 >= len(args) {
			t.Fatalf("args %q: %q is not a --flag followed by its value", args, args[i])
		}
		value := args[i+1]
		if d, err := time.ParseDuration(value); err == nil {
			value = time.Duration(float64(d) / sc.TimeScale).Round(time.Millisecond).String()
		}
		if r, err := strconv.ParseFloat(value, 64); err == nil && args[i] == "--rps-per-client" {
			value = strconv.FormatFloat(r*sc.TimeScale, 'g', 6, 64)
		}
		values[strings.TrimPrefix(args[i], "--")] = value
	}
	return values
}

// TestRecommendedRunsPlansFlags: the preStops the simulator runs for plan's routes carry every
// flag plan writes, with its value (in pod time), so that what simulate measures is what plan
// tells the user to deploy; the simulator only adds its plumbing. The pods' channels are their
// own, never hold's default.
func TestRecommendedRunsPlansFlags(t *testing.T) {
	sc := UserScenario()
	sc.TimeScale = 0.1
	for _, route := range []func(Scenario) (SidecarSpec, error){RecommendedSidecar, RecommendedNativeSidecar} {
		spec, err := route(sc)
		if err != nil {
			t.Fatal(err)
		}
		if !spec.holds() || !strings.Contains(strings.Join(spec.PlanPrestopArgs, " "), "--drain-at=end") {
			t.Fatalf("%s: plan args %q, hold %q: want regime (b)", spec.Name, spec.PlanPrestopArgs, spec.PlanHoldArgs)
		}
		run := newPodRun(sc, nil, Strategy{Kind: StrategyMeshdrain}, spec)
		channel := run.spec.holdChannel
		if !strings.HasPrefix(channel, "@meshdrain-sim-") || channel == newPodRun(sc, nil, Strategy{Kind: StrategyMeshdrain}, spec).spec.holdChannel {
			t.Errorf("%s: channel %q: want one of the pod's own", spec.Name, channel)
		}
		for _, hook := range []struct {
			planned, ran []string
		}{
			{spec.PlanPrestopArgs, meshdrainArgs(sc, run.spec, "http://127.0.0.1:1", 2)},
			{spec.PlanHoldArgs, holdArgs(sc, run.spec, channel, "http://127.0.0.1:3/drain", 4)},
		} {
			if hook.ran[0] != hook.planned[0] {
				t.Errorf("%s: ran %q, plan writes %q", spec.Name, hook.ran[0], hook.planned[0])
			}
			ran := flagValues(t, sc, hook.ran)
			for _, tok := range hook.planned[1:] {
				name, value, _ := strings.Cut(strings.TrimPrefix(tok, "--"), "=")
				switch {
				case name == "log-file":
					if _, ok := ran[name]; ok {
						t.Errorf("%s %s: --log-file passed: the simulator reads the hook's stderr", spec.Name, hook.ran[0])
					}
				case hook.ran[0] == "hold" && name == "grace-period":
					// Raised by what the time scale takes off hold's unscaled kill margin.
					if want := holdGracePeriod(sc, sc.grace(spec)).String(); hook.ran[indexOf(hook.ran, "--grace-period")+1] != want {
						t.Errorf("%s hold --grace-period %s, want %s", spec.Name, hook.ran[indexOf(hook.ran, "--grace-period")+1], want)
					}
				default:
					if d, err := time.ParseDuration(value); err == nil {
						value = d.String()
					}
					if ran[name] != value {
						t.Errorf("%s %s: --%s %q, plan writes %q", spec.Name, hook.ran[0], name, ran[name], value)
					}
				}
			}
		}
		prestop := flagValues(t, sc, meshdrainArgs(sc, run.spec, "http://x", 2))
		held := flagValues(t, sc, holdArgs(sc, run.spec, channel, "http://127.0.0.1:3/drain", 4))
		if prestop["hold-channel"] != channel || held["channel"] != channel || held["port"] != "4" || held["drain-url"] != "http://127.0.0.1:3/drain" {
			t.Errorf("%s: prestop --hold-channel %q, hold --channel %q --port %q --drain-url %q", spec.Name, prestop["hold-channel"], held["channel"], held["port"], held["drain-url"])
		}
		if prestop["deadline"] != held["deadline"] {
			t.Errorf("%s: prestop's deadline %s, hold's %s: hold must end by the hook's deadline", spec.Name, prestop["deadline"], held["deadline"])
		}
	}
	// Where the proxy runs no hold, prestop reports to nobody.
	spec, err := RegimeASidecar(sc)
	if err != nil {
		t.Fatal(err)
	}
	if spec.holds() || flagValues(t, sc, meshdrainArgs(sc, spec, "http://x", 2))["hold-channel"] != "" {
		t.Errorf("regime-a: a hold, or a --hold-channel")
	}
}

func indexOf(args []string, s string) int {
	for i, a := range args {
		if a == s {
			return i
		}
	}
	return -1
}

// TestHoldBoundInPodTime: hold's bound at the time scale is plan's in pod time (the kill
// margin is a second no flag scales).
func TestHoldBoundInPodTime(t *testing.T) {
	for _, scale := range []float64{0.1, 0.25, 1} {
		sc := UserScenario()
		sc.TimeScale = scale
		spec, err := RecommendedSidecar(sc)
		if err != nil {
			t.Fatal(err)
		}
		grace := sc.grace(spec)
		got := hold.Bound(holdGracePeriod(sc, grace), sc.scale(spec.MeshdrainAppDrain), sc.scale(spec.MeshdrainDeadline))
		if want := sc.scale(hold.Bound(grace, spec.MeshdrainAppDrain, 0)); (got - want).Abs() > time.Millisecond {
			t.Errorf("scale %g: hold's bound %v, want %v (plan's %v scaled)", scale, got, want, hold.Bound(grace, spec.MeshdrainAppDrain, 0))
		}
	}
}

func TestParseHoldEvent(t *testing.T) {
	stderr := `{"level":"info","msg":"hold started"}
{"level":"info","msg":"hold finished","reason":"released","prestop":"done","elapsed_ms":812,"drain_called":true,"exit_code":0}
`
	ev, err := parseHoldEvent([]byte(stderr))
	if err != nil {
		t.Fatal(err)
	}
	if ev.Reason != "released" || ev.Prestop != "done" || !ev.DrainCalled || ev.ElapsedPodS != 0.812 {
		t.Errorf("event = %+v", ev)
	}
	if _, err := parseHoldEvent([]byte("{\"msg\":\"drain finished\"}\n")); err == nil {
		t.Error("no final event accepted")
	}
}
