package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshdrain/meshdrain/pkg/mesh/envoy"
	"github.com/meshdrain/meshdrain/pkg/sim/envoysim"
)

func TestCheckCommandExitCodes(t *testing.T) {
	cases := []struct {
		name string
		cfg  envoysim.Config
		args []string
		code int
		want string
	}{
		{"istio", envoysim.Config{Profile: envoysim.ProfileIstio}, []string{"--port", "8080"}, ExitOK, "check passed"},
		{"istio-legacy", envoysim.Config{Profile: envoysim.ProfileIstioLegacy}, nil, ExitOK, "check passed"},
		{"envoy named", envoysim.Config{Profile: envoysim.ProfileEnvoy}, []string{"--cluster", "service_a"}, ExitOK, "cluster-requests"},
		{"envoy unnamed", envoysim.Config{Profile: envoysim.ProfileEnvoy}, nil, ExitFailure, "--cluster NAME"},
		{"istio-default", envoysim.Config{Inclusion: envoysim.InclusionIstioDefault}, []string{"--port", "8080"}, ExitFailure, "fix: " + envoy.MissingStatsHint},
		{"istio-default relaxed", envoysim.Config{Inclusion: envoysim.InclusionIstioDefault}, []string{"--min-signal", "completions"}, ExitOK, "WARN"},
		{"short terminationDrainDuration", envoysim.Config{}, []string{"--grace-period", "30s", "--app-drain", "5s", "--termination-drain-duration", "5s"},
			ExitFailure, `proxy.istio.io/config: '{"terminationDrainDuration": "30s"}'`},
		{"grace period unverifiable", envoysim.Config{}, []string{"--grace-period", "30s"}, ExitOK, "cannot be read from the sidecar"},
		// Regime (b): the sidecar does not drain, and terminationDrainDuration bounds only a fallback.
		{"regime b", envoysim.Config{}, []string{"--port", "8080", "--drain-at", "end", "--grace-period", "52s", "--app-drain", "5s", "--termination-drain-duration", "6s"},
			ExitOK, "OK    regime b (--drain-at end): the sidecar tells no connection to close"},
		{"draining", envoysim.Config{}, nil, ExitFailure, "server state DRAINING"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			sim := startSim(t, c.cfg, 2)
			if c.name == "draining" {
				if code, _ := adminPost(t, sim.AdminURL()+"/healthcheck/fail"); code != 200 {
					t.Fatalf("healthcheck/fail: %d", code)
				}
			}
			code, out, errOut := runMain(t, append([]string{"check", "--admin", sim.AdminURL()}, c.args...)...)
			if code != c.code || !strings.Contains(out, c.want) {
				t.Errorf("exit %d (want %d), output lacks %q:\n%s%s", code, c.code, c.want, out, errOut)
			}
		})
	}
}

func TestCheckCommandJSON(t *testing.T) {
	sim := startSim(t, envoysim.Config{Inclusion: envoysim.InclusionIstioDefault}, 0)
	code, out, _ := runMain(t, "check", "--admin", sim.AdminURL(), "-o", "json")
	if code != ExitFailure {
		t.Errorf("exit %d, want 1", code)
	}
	var doc struct {
		OK     bool `json:"ok"`
		Checks []struct {
			Name, Status, Message, Fix string
		} `json:"checks"`
		Status struct {
			Signal string `json:"signal"`
		} `json:"status"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if doc.OK || doc.Status.Signal != "none" {
		t.Errorf("got %+v", doc)
	}
	found := false
	for _, c := range doc.Checks {
		if c.Status == "fail" && strings.Contains(c.Fix, "sidecar.istio.io/statsInclusionPrefixes") {
			found = true
		}
	}
	if !found {
		t.Errorf("no failed check with the annotation fix: %s", out)
	}
}

func TestCheckCommandUnreachable(t *testing.T) {
	url := closedAdminURL(t)
	code, out, _ := runMain(t, "check", "--mesh", "istio", "--admin", url)
	if code != ExitFailure || !strings.Contains(out, "admin API at "+url+" not reachable: is this a pod with an Envoy sidecar? is the admin port 15000?") {
		t.Errorf("--mesh istio: exit %d:\n%s", code, out)
	}
	// With --mesh auto (the default) nothing says which sidecar was meant.
	code, out, _ = runMain(t, "check", "--admin", url)
	if code != ExitFailure || !strings.Contains(out, "no sidecar admin port reachable at "+url+": is this a pod with a Linkerd proxy or an Envoy sidecar?") {
		t.Errorf("--mesh auto: exit %d:\n%s", code, out)
	}
	code, out, _ = runMain(t, "check", "--mesh", "linkerd", "--admin", url)
	if code != ExitFailure || !strings.Contains(out, "admin port at "+url+" not reachable: is this a pod with a Linkerd proxy? is its admin port 4191?") {
		t.Errorf("--mesh linkerd: exit %d:\n%s", code, out)
	}
}

func TestCheckCommandUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"check", "--min-signal", "bytes"},
		{"check", "-o", "xml"},
		{"check", "--termination-drain-duration", "5s"},
		{"check", "--grace-period", "-1s"},
		{"check", "--connect-timeout", "0s"},
		{"check", "--drain-at", "later"},
		{"check", "--mesh", "linkerd", "--drain-at", "end"},
	} {
		if code, _, errOut := runMain(t, args...); code != ExitUsage || errOut == "" {
			t.Errorf("%v: exit %d (stderr %q), want %d with a message", args, code, errOut, ExitUsage)
		}
	}
}

func adminPost(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Post(url, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// Issue 26: a pod configured for regime (b) whose sidecar drains on its own (the istio-proxy
// override missing, here a drain already running before the check) fails with the fix, read
// from the pod's environment as prestop's own settings would be.
func TestCheckCommandSidecarDrainsOnItsOwn(t *testing.T) {
	sim := startSim(t, envoysim.Config{}, 2)
	if code, _ := adminPost(t, sim.AdminURL()+"/drain_listeners?inboundonly&graceful"); code != 200 {
		t.Fatalf("drain_listeners: %d", code)
	}
	// Requests keep reaching the pod while check samples it, each answer telling its
	// connection to close.
	send := func() {
		resp, err := http.Get("http://" + sim.InboundAddr(8080) + "/")
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}
	send()
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
				send()
			}
		}
	}()
	t.Setenv("MESHDRAIN_DRAIN_AT", "end")
	code, out, errOut := runMain(t, "check", "--admin", sim.AdminURL(), "--port", "8080")
	close(stop)
	<-done
	want := "FAIL  regime a: the sidecar's own drain was not deferred (http.<prefix>.downstream_cx_drain_close rose by "
	if code != ExitFailure || !strings.Contains(out, want) || !strings.Contains(out, "fix: check the istio-proxy override (") {
		t.Errorf("exit %d, want 1 with %q and the override's fix:\n%s%s", code, want, out, errOut)
	}
	// Checked for regime (a), the same pod has no such problem: its drain is expected there.
	code, out, _ = runMain(t, "check", "--admin", sim.AdminURL(), "--port", "8080", "--drain-at", "start")
	if code != ExitOK || strings.Contains(out, "regime") {
		t.Errorf("--drain-at start: exit %d, want 0 without a regime item:\n%s", code, out)
	}
}

// check --mesh none applies prestop's timing checks (drain.DeadlineProblems): a grace period
// that leaves no time after --app-drain fails check as it fails prestop --validate, with the
// same words; one that leaves time passes that item.
func TestCheckMeshNoneTiming(t *testing.T) {
	for _, tc := range []struct {
		grace string
		ok    bool
	}{{"5s", false}, {"52s", true}} {
		code, out, errOut := runMain(t, "check", "--mesh", "none", "--port", "8080", "--grace-period", tc.grace, "--app-drain", "5s", "-o", "json")
		var doc struct {
			Checks []struct {
				Name, Detail string
				OK           bool
			} `json:"checks"`
		}
		if err := json.Unmarshal([]byte(out), &doc); err != nil {
			t.Fatalf("grace %s: exit %d, %v\n%s%s", tc.grace, code, err, out, errOut)
		}
		found := false
		for _, c := range doc.Checks {
			if c.Name != "deadline" {
				continue
			}
			found = true
			if c.OK != tc.ok || (!tc.ok && !strings.Contains(c.Detail, "--grace-period 5s leaves no time to wait after --app-drain 5s")) {
				t.Errorf("grace %s: deadline %+v, want ok %v, in prestop's words when not", tc.grace, c, tc.ok)
			}
		}
		if !found {
			t.Errorf("grace %s: no deadline item:\n%s", tc.grace, out)
		}
		if !tc.ok && code != ExitFailure {
			t.Errorf("grace %s: exit %d, want 1", tc.grace, code)
		}
	}
	_, problems := CheckPrestopConfig(context.Background(), []string{"--mesh=none", "--port=8080", "--grace-period=5s", "--app-drain=5s"}, nil)
	if !strings.Contains(fmt.Sprint(problems), "--grace-period 5s leaves no time to wait after --app-drain 5s") {
		t.Errorf("prestop --validate no longer says it so: %v", problems)
	}
}

// check --pod-spec judges the live pod kubectl prints, from a file or stdin, without asking
// any sidecar: 0 when the injector merged the override, 1 with the fix when not, 2 for input
// that is not a pod.
func TestCheckPodSpec(t *testing.T) {
	fixture := func(name string) string {
		data, err := os.ReadFile(filepath.Join("..", "operator", "status", "testdata", "override", name))
		if err != nil {
			t.Fatal(err)
		}
		return string(data)
	}
	merged, unmerged := fixture("native-merged.yaml"), fixture("classic-unmerged.yaml")
	for _, tc := range []struct {
		name, stdin string
		args        []string
		code        int
		want        string
	}{
		{"merged, on stdin", merged, []string{"--pod-spec", "-"}, ExitOK, "OK    the injector merged the override"},
		{"merged, a file", "", []string{"--pod-spec", filepath.Join("..", "operator", "status", "testdata", "override", "classic-merged.json")}, ExitOK, "check passed"},
		{"not merged", unmerged, []string{"--pod-spec", "-"}, ExitFailure, "fix: Istio older than 1.9"},
		{"not merged, as JSON", unmerged, []string{"--pod-spec", "-", "-o", "json"}, ExitFailure, `"name":"istio-proxy-override"`},
		{"not a pod", "kind: Deployment\n", []string{"--pod-spec", "-"}, ExitUsage, "want a Pod"},
		{"no file", "", []string{"--pod-spec", filepath.Join(t.TempDir(), "pod.yaml")}, ExitUsage, "no such file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := runMainStdin(t, tc.stdin, append([]string{"check"}, tc.args...)...)
			if code != tc.code || !strings.Contains(out+errOut, tc.want) {
				t.Errorf("exit %d (want %d), output lacks %q:\n%s%s", code, tc.code, tc.want, out, errOut)
			}
		})
	}
}
