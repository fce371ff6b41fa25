package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/meshdrain/meshdrain/pkg/hook/drain"
	"github.com/meshdrain/meshdrain/pkg/hook/hold"
)

// The exit-code contract printed by `hold --help` is the code's.
func TestHoldHelpMatchesTheExitCodes(t *testing.T) {
	code, out, _ := runMain(t, "hold", "--help")
	if code != 0 {
		t.Fatalf("hold --help exit %d", code)
	}
	want := map[string]int{hold.ExitCodes.FailedAfter().Label: hold.ExitDrainFailed}
	for _, r := range hold.Reasons() {
		want[string(r.Reason)] = r.Code
	}
	if got := helpExitCodes(out, `\(drain failed\)`); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("help rows %v\nwant      %v", got, want)
	}
}

// docs/hold.md's table states the same contract.
func TestHoldDocExitCodesMatchTheCode(t *testing.T) {
	raw, err := os.ReadFile("../../docs/hold.md")
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("(?m)^\\| (`[a-z-]+`|\\(drain failed\\)) \\|.*\\| (\\d+) \\|$")
	got := map[string]int{}
	for _, m := range row.FindAllStringSubmatch(string(raw), -1) {
		code, _ := strconv.Atoi(m[2])
		got[strings.Trim(m[1], "`")] = code
	}
	want := map[string]int{hold.ExitCodes.FailedAfter().Label: hold.ExitDrainFailed}
	for _, r := range hold.Reasons() {
		want[string(r.Reason)] = r.Code
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("docs/hold.md rows %v\nwant                %v", got, want)
	}
}

// Every hold command line in the help's examples is a configuration hold accepts: the pod
// spec's exec command, the kubectl exec, the manual run.
func TestHoldHelpExamplesValidate(t *testing.T) {
	example := newHoldCommand(streams{}).Example
	var commands [][]string
	// The pod spec's command, a JSON list over two lines.
	if m := regexp.MustCompile(`(?s)command: (\[.*?\])`).FindStringSubmatch(example); m != nil {
		var argv []string
		if err := json.Unmarshal([]byte(m[1]), &argv); err != nil || argv[1] != "hold" {
			t.Fatalf("the pod spec's command %s: %v", m[1], err)
		}
		commands = append(commands, argv[2:])
	}
	for _, line := range strings.Split(example, "\n") {
		if _, rest, ok := strings.Cut(line, "meshdrain hold "); ok && !strings.Contains(line, "command:") {
			commands = append(commands, strings.Fields(rest))
		}
	}
	if len(commands) != 3 {
		t.Fatalf("found %d example commands, want 3:\n%s", len(commands), example)
	}
	for _, args := range commands {
		// The pod's /proc/1/fd/1 is pilot-agent's stdout; here PID 1 is not ours to write to.
		args = slices.DeleteFunc(args, func(a string) bool { return strings.HasPrefix(a, "--log-file=") })
		args = append(args, "--validate")
		code, out, errOut := runMain(t, append([]string{"hold"}, args...)...)
		if code != ExitOK || !strings.Contains(out, "hold configuration ok") {
			t.Errorf("hold %v: exit %d\n%s%s", args, code, out, errOut)
		}
	}
}

// The app's ports: --port wins; else Istio's ISTIO_META_POD_PORTS; a variable that does not
// parse leaves the app unseen, with a warning.
func TestLoadHoldPorts(t *testing.T) {
	podPorts := hold.PodPortsVariable + `=[{"name":"http","containerPort":8080,"protocol":"TCP"},{"containerPort":9090}]`
	for _, tc := range []struct {
		args, env []string
		want      string
		from      string
		warned    bool
	}{
		{nil, environ(podPorts), "[8080 9090]", "env " + hold.PodPortsVariable, false},
		{[]string{"--port", "7070"}, environ(podPorts), "[7070]", "flag", false},
		{nil, environ("MESHDRAIN_PORT=7070,7071", podPorts), "[7070 7071]", "env MESHDRAIN_PORT", false},
		{nil, nil, "[]", "none: no --port, no " + hold.PodPortsVariable, false},
		{nil, environ(hold.PodPortsVariable + "=[{"), "[]", "none: " + hold.PodPortsVariable + " does not parse", true},
	} {
		setup := loadHold(tc.args, tc.env)
		if len(setup.problems) > 0 {
			t.Fatalf("%v %v: %v", tc.args, tc.env, setup.problems)
		}
		if got := fmt.Sprint(setup.cfg.App.Ports); got != tc.want || setup.portsFrom != tc.from || (len(setup.warnings) > 0) != tc.warned {
			t.Errorf("%v %v: ports %s from %q, warnings %v; want %s from %q", tc.args, tc.env, got, setup.portsFrom, setup.warnings, tc.want, tc.from)
		}
	}
}

// Every start error is collected and names its flag; the fail-safe bound comes from whatever
// parsed (hold.Bound: the hook deadline plus the app's drain, within the grace period).
func TestHoldStartErrors(t *testing.T) {
	for _, tc := range []struct {
		args  []string
		env   []string
		want  string
		bound time.Duration
	}{
		{[]string{"--nope", "--grace-period", "10s"}, nil, "unknown flag", 9 * time.Second},
		{[]string{"--grace-period", "52", "--poll", "fast"}, nil, "invalid argument", 51 * time.Second},
		{nil, environ("MESHDRAIN_APP_DRAIN=soon"), "MESHDRAIN_APP_DRAIN", 29 * time.Second},
		{[]string{"--poll", "1ms"}, nil, "below 20ms", 29 * time.Second},
		{[]string{"--deadline", "40s"}, nil, "within --grace-period", 29 * time.Second},
		// No time for the hook: the proxy is still kept for the app's drain, within the grace period.
		{[]string{"--grace-period", "5s"}, nil, "leaves no time", 4 * time.Second},
		{[]string{"--channel", "meshdrain-hold"}, nil, "--channel", 29 * time.Second},
		{[]string{"--drain-url", "http://10.0.0.1:15020/drain"}, nil, "not a loopback", 29 * time.Second},
		{[]string{"--port", "0"}, nil, "--port 0", 29 * time.Second},
		{[]string{"--outbound-port", "70000"}, nil, "--outbound-port", 29 * time.Second},
		{[]string{"--proxy-uid", "-5"}, nil, "--proxy-uid", 29 * time.Second},
		{[]string{"--prestop-wait", "-1s"}, nil, "--prestop-wait", 29 * time.Second},
		{[]string{"--connect-timeout", "0s"}, nil, "--connect-timeout", 29 * time.Second},
		{[]string{"--log-format", "xml"}, nil, "--log-format", 29 * time.Second},
		{[]string{"extra"}, nil, "unexpected arguments", 29 * time.Second},
	} {
		setup := loadHold(tc.args, tc.env)
		if len(setup.problems) == 0 || !strings.Contains(fmt.Sprint(setup.problems), tc.want) {
			t.Errorf("%v %v: problems %v, want %q", tc.args, tc.env, setup.problems, tc.want)
		}
		if setup.bound != tc.bound {
			t.Errorf("%v %v: fail-safe bound %v, want %v", tc.args, tc.env, setup.bound, tc.bound)
		}
	}
}

// A configuration hold cannot use ends in its fail-safe: the errors, the final event, exit 2,
// and no drain call. (A grace period too short for the app's drain leaves no time to hold.)
func TestHoldFailSafeRun(t *testing.T) {
	code, _, errOut := runMain(t, "hold", "--grace-period", "1s", "--drain-url", "http://127.0.0.1:1/drain")
	events := parseLogLines(t, errOut)
	final := events[len(events)-1]
	if code != ExitUsage || final["msg"] != hold.FinalMessage || final["reason"] != string(hold.ReasonConfigError) || final["drain_called"] != false {
		t.Errorf("exit %d, final %v", code, final)
	}
}

// --validate prints what the hold would do, and refuses what it could not use.
func TestHoldValidate(t *testing.T) {
	code, out, errOut := runMain(t, "hold", "--validate", "--grace-period", "52s", "--app-drain", "5s", "--port", "8080")
	for _, want := range []string{"hold configuration ok", "@meshdrain-hold", "ports [8080] (flag), outbound port 15001", "hook deadline 46s; returns by 51s", "POST " + hold.DefaultDrainURL} {
		if code != ExitOK || !strings.Contains(out, want) {
			t.Errorf("exit %d, output lacks %q:\n%s%s", code, want, out, errOut)
		}
	}
	code, _, errOut = runMain(t, "hold", "--validate", "--drain-url", "http://169.254.169.254/", "--log-file", "/nonexistent/dir/hold.log")
	for _, want := range []string{"--drain-url", "--log-file", "without a drain call"} {
		if code != ExitUsage || !strings.Contains(errOut, want) {
			t.Errorf("exit %d, stderr lacks %q: %s", code, want, errOut)
		}
	}
}

func parseLogLines(t *testing.T, text string) []map[string]any {
	t.Helper()
	var events []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
		var e map[string]any
		if json.Unmarshal([]byte(line), &e) == nil {
			events = append(events, e)
		}
	}
	if len(events) == 0 {
		t.Fatalf("no log events in:\n%s", text)
	}
	return events
}

// prestop reports to hold: "running" with its deadline at start, "done" with its final
// event's reason and exit code at the end.
func TestPrestopReportsToHold(t *testing.T) {
	channel := fmt.Sprintf("@meshdrain-cli-test-%d", os.Getpid())
	listener, err := hold.Listen(channel)
	if err != nil {
		t.Fatal(err)
	}
	defer listener.Close()
	setup := loadPrestop(context.Background(), []string{"--hold-channel", channel, "--grace-period", "52s"}, nil)
	if len(setup.problems) > 0 {
		t.Fatal(setup.problems)
	}
	report := startHoldReport(setup, time.Now())
	if err := endPrestop(report, drain.Result{Reason: drain.ReasonDeadline}); err == nil {
		t.Error("a deadline must exit 3")
	}
	var events []hold.Event
	for limit := time.Now().Add(10 * time.Second); len(events) < 3 && time.Now().Before(limit); {
		events = append(events, listener.Take()...)
		select {
		case <-listener.Wake():
		case <-time.After(100 * time.Millisecond):
		}
	}
	if len(events) != 3 || events[0].Report.State != hold.StateRunning || *events[0].Report.DeadlineInMs > 46000 ||
		events[1].Report.State != hold.StateDone || events[1].Report.Reason != "deadline" || *events[1].Report.ExitCode != 3 || !events[2].Closed {
		t.Errorf("events %+v: want running (46 s), done deadline 3, close", events)
	}
}

// A dry run, or an empty --hold-channel, tells nobody; a channel that cannot be one is a
// start error.
func TestPrestopHoldChannel(t *testing.T) {
	for _, args := range [][]string{{"--dry-run"}, {"--hold-channel="}} {
		if startHoldReport(loadPrestop(context.Background(), args, nil), time.Now()) != nil {
			t.Errorf("%v: reports to hold", args)
		}
	}
	setup := loadPrestop(context.Background(), []string{"--hold-channel", "localhost:15019"}, nil)
	if !strings.Contains(fmt.Sprint(setup.problems), "--hold-channel") {
		t.Errorf("problems %v, want --hold-channel's", setup.problems)
	}
	var out bytes.Buffer
	code := Main([]string{"prestop", "--validate"}, strings.NewReader(""), &out, io.Discard)
	if code != ExitOK || !strings.Contains(out.String(), "reports to meshdrain hold on "+hold.DefaultChannel) {
		t.Errorf("prestop --validate: exit %d\n%s", code, out.String())
	}
}
