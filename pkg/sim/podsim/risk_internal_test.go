package podsim

import (
	"strings"
	"testing"
)

// A final event with a risk figure (prestop --lag-dist) gives the run its stated risk, which
// the timeline, the headline and the SVG's stop label say; without one they say nothing new.
func TestStatedRiskFromTheFinalEvent(t *testing.T) {
	with, err := parseFinalEvent([]byte(`{"msg":"drain finished","reason":"quiet","elapsed_ms":812,"risk":0.00081234,"risk_from":{"unseen":1}}` + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	if with.Risk == nil || *with.Risk != 0.00081234 || with.statedRisk() != ", stated risk 0.000812" {
		t.Errorf("risk %v, stated %q", with.Risk, with.statedRisk())
	}
	without, err := parseFinalEvent([]byte(`{"msg":"drain finished","reason":"quiet","elapsed_ms":812,"risk":null}` + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	if without.Risk != nil || without.statedRisk() != "" {
		t.Errorf("a null risk: %v %q", without.Risk, without.statedRisk())
	}

	res := Result{Strategy: "meshdrain", Sidecar: "recommended", AppStopS: 3.2, Meshdrain: with}
	if got := stopCause(res); got != "meshdrain returned (quiet, stated risk 0.000812): SIGTERM to the app at 3.20s" {
		t.Errorf("stop label %q", got)
	}
	if got := (Report{}).verdict([]Result{res}); !strings.Contains(got, "meshdrain clean, app stopped at 3.20s, stated risk 0.000812") {
		t.Errorf("verdict %q", got)
	}
	res.Meshdrain = without
	if got := stopCause(res); got != "meshdrain returned (quiet): SIGTERM to the app at 3.20s" {
		t.Errorf("stop label without a figure %q", got)
	}
}

// A --lag-dist that plan writes reaches a time-scaled hook with its lags scaled, as every
// other duration is.
func TestPlanArgsScaleTheLagDist(t *testing.T) {
	sc := MeshlessScenario()
	sc.TimeScale = 0.5
	got := strings.Join(planArgs([]string{"prestop", "--quiet", "1s"},
		[]string{"prestop", "--lag-dist=0:400ms,0.5:1.2s,0.99:3.5s,1:6s", "--risk=0.001"}, sc), " ")
	if want := "prestop --quiet 1s --lag-dist 0:200ms,0.5:600ms,0.99:1.75s,1:3s --risk 0.001"; got != want {
		t.Errorf("planArgs = %q, want %q", got, want)
	}
}
