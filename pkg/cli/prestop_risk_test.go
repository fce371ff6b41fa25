package cli

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/meshdrain/meshdrain/pkg/hook/drain"
)

// planLagArgs are the --lag-dist and --risk plan --lag-from writes into a hook.
var planLagArgs = []string{"--lag-dist=0:400ms,0.5:1.2s,0.99:3.5s,1:6s", "--risk=0.001"}

// A --lag-dist that does not parse and a --risk outside 0 < P <= 0.5 are start errors naming
// their flag: the hook holds the app for the fail-safe wait, as for any other.
func TestLagDistAndRiskAreCheckedAtStart(t *testing.T) {
	for _, tc := range []struct {
		args []string
		env  []string
		want string
	}{
		{[]string{"--lag-dist", "0.5:1s,0.9:2s"}, nil, `--lag-dist "0.5:1s,0.9:2s": the last point is 0.9:2s`},
		{[]string{"--lag-dist", "soon"}, nil, `--lag-dist "soon": "soon": want SHARE:LAG`},
		{[]string{"--lag-dist", "1:2s,0.5:3s"}, nil, "shares must increase"},
		{nil, environ("MESHDRAIN_LAG_DIST=1:fast"), `--lag-dist "1:fast": "1:fast": lag "fast" is not a duration`},
		{append([]string{"--risk", "0"}, planLagArgs[0]), nil, "--risk 0: want 0 < P <= 0.5"},
		{append([]string{"--risk", "0.6"}, planLagArgs[0]), nil, "--risk 0.6: want 0 < P <= 0.5"},
		{append([]string{"--risk", "NaN"}, planLagArgs[0]), nil, "--risk NaN: want 0 < P <= 0.5"},
		{[]string{planLagArgs[0]}, environ("MESHDRAIN_RISK=-1"), "--risk -1: want 0 < P <= 0.5"},
	} {
		setup := loadPrestop(context.Background(), tc.args, tc.env)
		if len(setup.problems) != 1 || !strings.Contains(setup.problems[0].Error(), tc.want) {
			t.Errorf("%v %v: problems %v, want one naming %s", tc.args, tc.env, setup.problems, tc.want)
		}
		if setup.hold != drain.DefaultFallbackWait {
			t.Errorf("%v %v: hold %v, want the fallback wait %v", tc.args, tc.env, setup.hold, drain.DefaultFallbackWait)
		}
	}
}

// The hook itself: a bad --lag-dist ends in the fail-safe path (config-error after the
// fallback wait), and the error names the flag. The context is cancelled from the start so
// that the hold ends at once.
func TestBadLagDistHoldsTheFallbackWait(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var stdout, stderr bytes.Buffer
	cmd := newPrestopCommand(streams{in: strings.NewReader(""), out: &stdout, err: &stderr})
	cmd.SetArgs([]string{"--lag-dist=0.5:1s", "--hold-channel="})
	cmd.SilenceErrors, cmd.SilenceUsage = true, true
	err := cmd.ExecuteContext(ctx)
	out := stdout.String() + stderr.String()
	if exit, ok := err.(*ExitError); !ok || exit.Code != ExitUsage {
		t.Errorf("error %v, want exit %d", err, ExitUsage)
	}
	if !strings.Contains(out, `"hold_ms":5000`) || !strings.Contains(out, `"reason":"config-error"`) || !strings.Contains(out, `--lag-dist \"0.5:1s\": the last point is 0.5:1s`) {
		t.Errorf("want the fallback wait held and --lag-dist named:\n%s", out)
	}
}

// What plan --lag-from writes into a hook passes prestop --validate, and the check says the
// risk it will stop at.
func TestPlanWrittenLagDistValidates(t *testing.T) {
	args := append([]string{"prestop", "--validate", "--grace-period", "52s", "--app-drain", "5s"}, planLagArgs...)
	code, out, errOut := runMain(t, args...)
	if code != ExitOK {
		t.Fatalf("exit %d:\n%s%s", code, out, errOut)
	}
	if !strings.Contains(out, "risk      stop once the risk figure is at most 0.001, from --lag-dist 0:400ms,0.5:1.2s,0.99:3.5s,1:6s") {
		t.Errorf("--validate does not state the risk:\n%s", out)
	}
}

// With --lag-dist the default --min-wait is 0 (the figure guards instead), and the settings
// say so; a --min-wait that was asked for still holds; without --lag-dist nothing changes.
func TestLagDistTakesTheDefaultMinWaitAway(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		env     []string
		want    time.Duration
		value   string
		source  string
		lagUsed bool
	}{
		{nil, nil, drain.DefaultMinWait, "5s", "default", false},
		{planLagArgs, nil, 0, "0s (the default with --lag-dist: the risk figure guards instead)", "default", true},
		{append([]string{"--min-wait", "2s"}, planLagArgs...), nil, 2 * time.Second, "2s", "flag", true},
		{planLagArgs, environ("MESHDRAIN_MIN_WAIT=3s"), 3 * time.Second, "3s", "env MESHDRAIN_MIN_WAIT", true},
	} {
		setup := loadPrestop(context.Background(), tc.args, tc.env)
		if len(setup.problems) > 0 {
			t.Fatalf("%v: %v", tc.args, setup.problems)
		}
		cfg := setup.cfg
		if cfg.MinWait != tc.want || cfg.Lag.IsZero() == tc.lagUsed {
			t.Errorf("%v %v: min wait %v lag %q, want %v and a lag %v", tc.args, tc.env, cfg.MinWait, cfg.Lag, tc.want, tc.lagUsed)
		}
		if tc.lagUsed && cfg.Risk != 0.001 {
			t.Errorf("%v: risk %v", tc.args, cfg.Risk)
		}
		minWait := setting(cfg.Settings, "min-wait")
		if minWait.Value != tc.value || minWait.Source != tc.source {
			t.Errorf("%v %v: min-wait setting %+v, want %q from %q", tc.args, tc.env, minWait, tc.value, tc.source)
		}
	}
}

// --risk alone does nothing: it is said, not refused.
func TestRiskWithoutLagDistIsAWarning(t *testing.T) {
	setup := loadPrestop(context.Background(), []string{"--risk", "0.01"}, nil)
	if len(setup.problems) > 0 || !strings.Contains(fmt.Sprint(setup.warnings), "--risk is used only with --lag-dist") {
		t.Errorf("problems %v warnings %v: want one warning", setup.problems, setup.warnings)
	}
	if got := setting(setup.cfg.Settings, "risk").Value; got != "0.01 (not used: no --lag-dist)" {
		t.Errorf("risk setting %q", got)
	}
	if quiet := loadPrestop(context.Background(), nil, nil); len(quiet.warnings) > 0 {
		t.Errorf("the default --risk warned: %v", quiet.warnings)
	}
}

// prestop --help teaches both flags and the final event's fields.
func TestPrestopHelpTeachesTheRisk(t *testing.T) {
	code, out, _ := runMain(t, "prestop", "--help")
	if code != ExitOK {
		t.Fatalf("exit %d", code)
	}
	for _, want := range []string{"--lag-dist string", "--risk float", "at most --risk (default 0.001)", "risk_from", "--min-wait then defaults\nto 0"} {
		if !strings.Contains(out, want) {
			t.Errorf("help lacks %q", want)
		}
	}
}

func setting(settings []drain.Setting, name string) drain.Setting {
	for _, s := range settings {
		if s.Name == name {
			return s
		}
	}
	return drain.Setting{}
}
