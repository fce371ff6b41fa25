package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/meshdrain/meshdrain/pkg/hook/drain"
)

// The deadline is what ties the wait to the pod's grace period: derived by default, checked
// when given, and the actions get the app's drain time (at least 2s).
func TestPrestopDeadlineAndActionTimeout(t *testing.T) {
	tests := []struct {
		name           string
		grace, drain   time.Duration
		deadline       time.Duration
		deadlineSet    bool
		wantDeadline   time.Duration
		wantActionTime time.Duration
		wantUsage      bool
	}{
		{name: "defaults", grace: 30 * time.Second, drain: 5 * time.Second, wantDeadline: 24 * time.Second, wantActionTime: 5 * time.Second},
		{name: "short app drain", grace: 15 * time.Second, drain: time.Second, wantDeadline: 13 * time.Second, wantActionTime: 2 * time.Second},
		{name: "no room", grace: 5 * time.Second, drain: 5 * time.Second, wantUsage: true},
		{name: "explicit", grace: 30 * time.Second, drain: 5 * time.Second, deadline: 10 * time.Second, deadlineSet: true, wantDeadline: 10 * time.Second, wantActionTime: 5 * time.Second},
		{name: "explicit beyond grace", grace: 30 * time.Second, drain: 5 * time.Second, deadline: 31 * time.Second, deadlineSet: true, wantUsage: true},
		{name: "explicit zero", grace: 30 * time.Second, drain: 5 * time.Second, deadline: 0, deadlineSet: true, wantUsage: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := defaultPrestopOptions()
			o.gracePeriod, o.appDrain, o.deadline, o.deadlineSet = tc.grace, tc.drain, tc.deadline, tc.deadlineSet
			cfg, problems := o.check(context.Background())
			var exitErr *ExitError
			if tc.wantUsage {
				if len(problems) == 0 || !errors.As(problems[0], &exitErr) || exitErr.Code != ExitUsage {
					t.Fatalf("problems = %v, want a usage error", problems)
				}
				return
			}
			if len(problems) > 0 {
				t.Fatal(problems)
			}
			if cfg.Deadline != tc.wantDeadline || cfg.ActionTimeout != tc.wantActionTime {
				t.Errorf("deadline %v action timeout %v, want %v and %v", cfg.Deadline, cfg.ActionTimeout, tc.wantDeadline, tc.wantActionTime)
			}
		})
	}
}

// The exit-code contract printed by `prestop --help` is the code's: every reason with its
// code, the action-failed row, and nothing else.
func TestPrestopHelpMatchesTheExitCodes(t *testing.T) {
	var out bytes.Buffer
	if code := Main([]string{"prestop", "--help"}, strings.NewReader(""), &out, io.Discard); code != 0 {
		t.Fatalf("prestop --help exit %d", code)
	}
	want := map[string]int{drain.ExitCodes.FailedAfter().Label: drain.ExitActionFailed}
	for _, r := range drain.Reasons() {
		want[string(r.Reason)] = r.Code
	}
	if got := helpExitCodes(out.String(), `\(action failed\)`); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("help rows %v\nwant      %v", got, want)
	}
}

// The README's prestop table states the same contract.
func TestReadmeExitCodesMatchTheCode(t *testing.T) {
	raw, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("(?m)^\\| `([a-z-]+)` \\|.*\\| (\\d+) \\|$")
	got := map[string]int{}
	for _, m := range row.FindAllStringSubmatch(string(raw), -1) {
		code, _ := strconv.Atoi(m[2])
		got[m[1]] = code
	}
	for _, r := range drain.Reasons() {
		if code, ok := got[string(r.Reason)]; !ok || code != r.Code {
			t.Errorf("README row for %s: exit %d (present %v), want %d", r.Reason, code, ok, r.Code)
		}
		delete(got, string(r.Reason))
	}
	if len(got) > 0 {
		t.Errorf("README rows for reasons the code does not have: %v", got)
	}
}

func environ(kv ...string) []string { return kv }

// Every setting says where it came from; a variable is used, traced and redacted; flags win.
func TestLoadPrestopProvenance(t *testing.T) {
	setup := loadPrestop(context.Background(),
		[]string{"--quiet", "2s", "--admin", "http://user:pw@127.0.0.1:15000"},
		environ("MESHDRAIN_QUIET=3s", "MESHDRAIN_POLL=100ms", "PATH=/bin"))
	if len(setup.problems) > 0 {
		t.Fatal(setup.problems)
	}
	if setup.cfg.Quiet != 2*time.Second || setup.cfg.Poll != 100*time.Millisecond {
		t.Errorf("quiet %v poll %v: the flag wins, the variable fills in", setup.cfg.Quiet, setup.cfg.Poll)
	}
	from := map[string]drain.Setting{}
	for _, s := range setup.cfg.Settings {
		from[s.Name] = s
	}
	if from["quiet"].Source != "flag" || from["poll"].Source != "env MESHDRAIN_POLL" || from["deadline"].Source != "default" {
		t.Errorf("sources: quiet %q poll %q deadline %q", from["quiet"].Source, from["poll"].Source, from["deadline"].Source)
	}
	if strings.Contains(from["admin"].Value, "pw") {
		t.Errorf("admin setting logged with its password: %s", from["admin"].Value)
	}
	if _, ok := from["help"]; ok {
		t.Error("help listed as a setting")
	}
}

func TestUnknownVariables(t *testing.T) {
	env := environ("MESHDRAIN_GRACEPERIOD=45s", "MESHDRAIN_VALIDATE=true")
	setup := loadPrestop(context.Background(), nil, env)
	if len(setup.problems) != 0 || len(setup.warnings) != 2 || !strings.Contains(setup.warnings[0], "MESHDRAIN_GRACEPERIOD") {
		t.Errorf("prestop: problems %v warnings %v: unknown variables are warnings", setup.problems, setup.warnings)
	}
	if setup.opts.validate {
		t.Error("MESHDRAIN_VALIDATE turned the hook into a check")
	}
	_, problems := CheckPrestopConfig(context.Background(), nil, env)
	if len(problems) != 2 {
		t.Errorf("--validate: problems %v: unknown variables are errors", problems)
	}
}

// Every start error goes to the same fail-safe path, and the hold comes from whatever parsed.
func TestStartErrorsAreCollected(t *testing.T) {
	for _, tc := range []struct {
		args []string
		env  []string
		want string
		hold time.Duration
	}{
		{[]string{"--nope", "--fallback-wait", "2s"}, nil, "unknown flag", 2 * time.Second},
		{[]string{"--poll", "fast"}, environ("MESHDRAIN_MIN_WAIT=7s"), "invalid argument", 7 * time.Second},
		{nil, environ("MESHDRAIN_POLL=fast"), "MESHDRAIN_POLL", 5 * time.Second},
		{[]string{"--poll", "1ns"}, nil, "below 20ms", 5 * time.Second},
		{[]string{"--quiet", "300ms", "--poll", "200ms"}, nil, "two polls", 5 * time.Second},
		{[]string{"--quiet", "40s"}, nil, "not shorter than the deadline", 5 * time.Second},
		{[]string{"--client-period", "2s"}, nil, "shorter than --client-period", 5 * time.Second},
		{[]string{"--client-period", "-1s"}, nil, "--client-period must not be negative", 5 * time.Second},
		// The hold ends where a working drain would (drain.HookDeadline: grace 30s − app drain 5s − 1s).
		{[]string{"--min-wait", "60s"}, nil, "beyond the deadline", 24 * time.Second},
		{[]string{"--admin", "http://10.0.0.1:15000", "--grace-period", "4s", "--app-drain", "1s"}, nil, "not a loopback", 2 * time.Second},
		{[]string{"--shutdown-url", "http://metadata.google.internal/"}, nil, "not a loopback", 5 * time.Second},
		{[]string{"--signal", "STOP", "--pid", "1"}, nil, "SIGSTOP refused", 5 * time.Second},
		{[]string{"--signal", "TERM", "--pid", "0"}, nil, "exactly one", 5 * time.Second},
		{[]string{"--signal", "TERM", "--pid", "-5"}, nil, "not a process id", 5 * time.Second},
		{[]string{"--signal", "TERM", "--pid", strconv.Itoa(os.Getpid())}, nil, "meshdrain itself", 5 * time.Second},
		{[]string{"--signal", "TERM", "--pidfile", "/nonexistent/app.pid"}, nil, "no such file", 5 * time.Second},
		{[]string{"--signal", "TERM", "--pidfile", "/dev/zero"}, nil, "not a regular file", 5 * time.Second},
		{[]string{"--exec", "/nonexistent/stop"}, nil, "--exec", 5 * time.Second},
		{[]string{"--http-prefix", "a b"}, nil, "space", 5 * time.Second},
		{[]string{"extra"}, nil, "unexpected arguments", 5 * time.Second},
		{[]string{"--log-format", "xml", "--deadline", "3s"}, nil, "--log-format", 3 * time.Second},
	} {
		setup := loadPrestop(context.Background(), tc.args, tc.env)
		if len(setup.problems) == 0 || !strings.Contains(fmt.Sprint(setup.problems), tc.want) {
			t.Errorf("%v %v: problems %v, want %q", tc.args, tc.env, setup.problems, tc.want)
		}
		if setup.hold != tc.hold {
			t.Errorf("%v %v: hold %v, want %v", tc.args, tc.env, setup.hold, tc.hold)
		}
	}
}

func TestSalvageHold(t *testing.T) {
	none := func(string) (string, bool) { return "", false }
	for _, tc := range []struct {
		args []string
		want time.Duration
	}{
		{nil, 5 * time.Second},
		{[]string{"--fallback-wait=1s", "--min-wait", "3s"}, 3 * time.Second},
		{[]string{"--fallback-wait", "10s", "--grace-period", "4s", "--app-drain", "1s"}, 2 * time.Second},
		// The app needs its drain before the kubelet's SIGKILL: no time is left to hold it.
		{[]string{"--fallback-wait", "10s", "--grace-period", "4s"}, 0},
		{[]string{"--fallback-wait", "10s", "--grace-period", "10s", "--deadline", "30s"}, 9 * time.Second},
		{[]string{"--fallback-wait", "10s", "--deadline", "2s"}, 2 * time.Second},
		{[]string{"--fallback-wait", "x", "--grace-period", "nope"}, 5 * time.Second},
		{[]string{"--grace-period", "500ms"}, 0},
		{[]string{"--exec", "stop", "--", "--fallback-wait", "1h"}, 5 * time.Second},
	} {
		if got := salvageHold(tc.args, none); got != tc.want {
			t.Errorf("%v: hold %v, want %v", tc.args, got, tc.want)
		}
	}
}

// --validate answers at once, even after a flag that does not parse (the parser stops
// there); without it, a bad flag in a hook still holds the app for the fallback wait. The
// context is cancelled from the start, so that a hold ends at once: the test tells the two
// paths apart by what they print, not by waiting.
func TestValidateAnswersABadFlagAtOnce(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	run := func(args ...string) (error, string) {
		var stdout, stderr bytes.Buffer
		cmd := newPrestopCommand(streams{in: strings.NewReader(""), out: &stdout, err: &stderr})
		cmd.SetArgs(args)
		cmd.SilenceErrors, cmd.SilenceUsage = true, true
		return cmd.ExecuteContext(ctx), stdout.String() + stderr.String()
	}
	for _, tc := range []struct {
		args []string
		flag string // the flag the error names
	}{
		{[]string{"--port=http", "--validate"}, "--port"},
		{[]string{"--validate", "--port=http"}, "--port"},
		{[]string{"--nope", "--validate=true"}, "--nope"},
	} {
		err, out := run(tc.args...)
		var exitErr *ExitError
		if !errors.As(err, &exitErr) || exitErr.Code != ExitUsage {
			t.Errorf("%v: error %v, want exit 2", tc.args, err)
		}
		if !strings.Contains(out, "prestop configuration: 1 problem(s)") || !strings.Contains(out, tc.flag) || strings.Contains(out, "drain finished") {
			t.Errorf("%v: not answered by --validate naming %s:\n%s", tc.args, tc.flag, out)
		}
	}
	err, out := run("--port=http", "--validate=false")
	if !strings.Contains(out, `"hold_ms":5000`) || !strings.Contains(out, `"msg":"drain finished"`) {
		t.Errorf("a bad flag in a hook: error %v, want the fallback wait held:\n%s", err, out)
	}
}

// In regime (b), --validate says that the override's merge cannot be seen from the app's
// container, and which command sees it; in regime (a) there is no override to see.
func TestValidateNamesTheOverrideCheck(t *testing.T) {
	const line = "kubectl get pod POD -o yaml | meshdrain check --pod-spec -"
	for drainAt, want := range map[string]bool{"end": true, "start": false} {
		code, out, errOut := runMain(t, "prestop", "--validate", "--mesh", "istio", "--drain-at", drainAt, "--grace-period", "52s", "--app-drain", "5s")
		if code != ExitOK || strings.Contains(out, line) != want || strings.Count(out, "override") > 1 {
			t.Errorf("--drain-at %s: exit %d, want the line %q: %v (once):\n%s%s", drainAt, code, line, want, out, errOut)
		}
	}
}
