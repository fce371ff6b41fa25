package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The fixtures of pkg/operator/lag: real kubectl logs of two meshdrain drains (one cut by its
// deadline), a kube-proxy /metrics page, a Prometheus API answer in the documented shape.
var (
	lagKubectl   = filepath.Join("..", "operator", "lag", "testdata", "kubectl-logs-prefix-timestamps.log")
	lagKubeProxy = filepath.Join("..", "operator", "lag", "testdata", "kube-proxy-1.29.metrics")
	lagAPI       = filepath.Join("..", "operator", "lag", "testdata", "prometheus-api-bucket-vector.json")
)

// meshlessWeb is a Deployment without a sidecar, before meshdrain.
const meshlessWeb = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
        - name: web
          image: registry.example.com/web:1
          ports:
            - containerPort: 8080
`

func wantContains(t *testing.T, what, got string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(got, w) {
			t.Errorf("%s lacks %q:\n%s", what, w, got)
		}
	}
}

// TestPlanLagFromText: the kubectl export fits 0:2ms,1:1.815s; --eds-lag becomes its p99.9
// (1.813s) rounded up, the lag bound and the grace period follow as from --eds-lag 1.9s, the
// hook gets the distribution, the risk and --min-wait=0s, and the evidence's weaknesses are
// said on stderr.
func TestPlanLagFromText(t *testing.T) {
	code, out, errOut := runMain(t, "plan", "--mesh", "none", "--port", "8080", "--p99", "450ms", "--lag-from", lagKubectl)
	if code != ExitOK {
		t.Fatalf("exit %d, stderr %s", code, errOut)
	}
	wantContains(t, "text", out,
		"Lag (--lag-from, --risk 0.001)",
		"evidence: 2 drains, 2 clients, 2 nodes, 2 observations, 1 censored, 15 records skipped",
		"eds-lag (from --lag-from)      = 1.9s",
		"Quantile(1 − 0.001) = p99.9 of 0:2ms,1:1.815s = 1.813s, rounded up to 100ms",
		"meshdrain --min-wait           = 0s",
		"--min-wait=0s --eds-lag-bound=1.9s --lag-dist=0:2ms,1:1.815s --risk=0.001 --log-file",
		"meshdrain.io/lag-from: 'from "+lagKubectl+": 2 drains",
	)
	// The rest follows from eds-lag 1.9s as plan derives it from --eds-lag, with no minimum
	// wait: 1.9s + max(quiet 1s, p99 450ms) + poll 200ms, its margin, app-drain and kill margin.
	wantContains(t, "text", out,
		"meshdrain expected finish      = 3.1s  eds-lag 1.9s + max(quiet 1s, p99 450ms) + poll 200ms",
		"terminationGracePeriodSeconds: 9\n")
	wantContains(t, "stderr", errOut,
		"meshdrain: plan: --lag-from: too few samples for p99.9: 2, want at least 10000",
		"meshdrain: plan: --lag-from: 1 of 2 drains were cut")
}

// TestPlanLagFromJSON: -o json carries the lag object (sources, summary, points, arithmetic)
// and the warnings, with the hook's flags in prestop_command.
func TestPlanLagFromJSON(t *testing.T) {
	code, out, errOut := runMain(t, "plan", "--p99", "450ms", "--lag-from", lagKubectl, "--lag-from", lagAPI, "--risk", "0.01", "-o", "json")
	if code != ExitOK {
		t.Fatalf("exit %d, stderr %s", code, errOut)
	}
	var got struct {
		Inputs         map[string]any    `json:"inputs"`
		PrestopCommand []string          `json:"prestop_command"`
		Annotations    map[string]string `json:"annotations"`
		Warnings       []string          `json:"warnings"`
		Lag            struct {
			Sources []struct{ Name, Kind string } `json:"sources"`
			Summary struct {
				Drains, Clients, Nodes, Censored, Skipped int
				Observations, Tail                        float64
				Needed                                    float64 `json:"needed_quantile"`
				TooFew                                    string  `json:"too_few"`
			} `json:"summary"`
			Points     []struct{ Lag, From string } `json:"points"`
			LagDist    string                       `json:"lag_dist"`
			Risk       float64                      `json:"risk"`
			Arithmetic []struct{ Name, Value, Why string }
		} `json:"lag"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	l := got.Lag
	if len(l.Sources) != 2 || l.Sources[0].Kind != "meshdrain events" || l.Sources[1].Kind != "kubeproxy_network_programming_duration_seconds" {
		t.Errorf("sources %+v, want the export then the histogram", l.Sources)
	}
	s := l.Summary
	if s.Drains != 2 || s.Nodes != 4 || s.Censored != 1 || s.Skipped != 15 || s.Observations != 24 || s.Tail != 3 || s.Needed != 0.99 ||
		!strings.Contains(s.TooFew, "too few samples for p99: 24") {
		t.Errorf("summary %+v", s)
	}
	if l.LagDist != "0:2ms,0.5:938ms,1:5s" || l.Risk != 0.01 || len(l.Points) != 3 {
		t.Errorf("lag_dist %q risk %v points %+v, want 0:2ms,0.5:938ms,1:5s at 0.01", l.LagDist, l.Risk, l.Points)
	}
	if len(l.Arithmetic) < 3 || l.Arithmetic[0].Value != "5s" || l.Arithmetic[1].Name != "meshdrain --eds-lag-bound" || l.Arithmetic[2].Value != "0s" {
		t.Errorf("arithmetic %+v, want eds-lag 5s, the bound, --min-wait 0s", l.Arithmetic)
	}
	for _, want := range []string{"--lag-dist=0:2ms,0.5:938ms,1:5s", "--risk=0.01", "--min-wait=0s", "--eds-lag-bound=5s"} {
		if !slices.Contains(got.PrestopCommand, want) {
			t.Errorf("prestop_command %q lacks %s", got.PrestopCommand, want)
		}
	}
	if got.Inputs["eds_lag"] != "5s" || got.Inputs["risk"] != 0.01 {
		t.Errorf("inputs %v", got.Inputs)
	}
	if !strings.Contains(got.Annotations["meshdrain.io/lag-from"], "lag-dist 0:2ms,0.5:938ms,1:5s; eds-lag 5s") {
		t.Errorf("annotations %v", got.Annotations)
	}
	if !slices.ContainsFunc(got.Warnings, func(w string) bool { return strings.Contains(w, "too few samples for p99") }) ||
		!slices.ContainsFunc(got.Warnings, func(w string) bool { return strings.Contains(w, "past the last finite bucket bound 5s") }) {
		t.Errorf("warnings %q: want too few samples and the +Inf bucket", got.Warnings)
	}
}

// TestPlanLagFromManifest: -f -o yaml writes the annotation and the hook's flags; the same
// re-plan changes nothing; a re-plan without --lag-from keeps --lag-dist, --risk, --min-wait=0s
// and the annotation as written; one from other evidence replaces them, once each; --patch
// carries the annotation.
func TestPlanLagFromManifest(t *testing.T) {
	dir := t.TempDir()
	deploy := filepath.Join(dir, "deploy.yaml")
	if err := os.WriteFile(deploy, []byte(meshlessWeb), 0o644); err != nil {
		t.Fatal(err)
	}
	lagArgs := []string{"plan", "--mesh", "none", "--p99", "450ms", "--lag-from", lagKubectl, "-f", "-", "-o", "yaml"}
	code, first, errOut := runMainStdin(t, meshlessWeb, lagArgs...)
	if code != ExitOK {
		t.Fatalf("exit %d, stderr %s", code, errOut)
	}
	wantContains(t, "manifest", first,
		"meshdrain.io/lag-from: 'from "+lagKubectl+": 2 drains, 2 clients, 2 nodes, 2 observations, 1 censored, 15 records skipped; risk 0.001; lag-dist 0:2ms,1:1.815s; eds-lag 1.9s'",
		"- --min-wait=0s\n", "- --eds-lag-bound=1.9s\n", "- --lag-dist=0:2ms,1:1.815s\n", "- --risk=0.001\n", "terminationGracePeriodSeconds: 9\n")
	wantContains(t, "stderr", errOut, "annotation meshdrain.io/lag-from added", "--lag-from: too few samples")

	code, again, errOut := runMainStdin(t, first, lagArgs...)
	if code != ExitOK || again != first || !strings.Contains(errOut, "no change: the workload already has this plan") {
		t.Errorf("re-plan with the same --lag-from: exit %d, changed %v, stderr %s", code, again != first, errOut)
	}
	code, kept, errOut := runMainStdin(t, first, "plan", "--mesh", "none", "--p99", "450ms", "--eds-lag", "1.9s", "-f", "-", "-o", "yaml")
	if code != ExitOK || kept != first || !strings.Contains(errOut, "no change") {
		t.Errorf("re-plan without --lag-from: exit %d, changed %v (want the hook's --lag-dist, --risk, --min-wait=0s and the annotation kept), stderr %s\n%s",
			code, kept != first, errOut, kept)
	}
	code, other, errOut := runMainStdin(t, first, "plan", "--mesh", "none", "--p99", "450ms", "--lag-from", lagAPI, "--risk", "0.01", "-f", "-", "-o", "yaml")
	if code != ExitOK {
		t.Fatalf("re-plan from other evidence: exit %d, stderr %s", code, errOut)
	}
	if strings.Count(other, "--lag-dist=") != 1 || strings.Count(other, "--risk=") != 1 || !strings.Contains(other, "- --lag-dist=0:250ms,0.5:938ms,1:5s\n") ||
		!strings.Contains(other, "- --risk=0.01\n") || strings.Contains(other, "1.815s") {
		t.Errorf("re-plan from other evidence: want its distribution and risk in place of the old, once each:\n%s", other)
	}
	wantContains(t, "stderr", errOut, "--lag-dist 0:2ms,1:1.815s → 0:250ms,0.5:938ms,1:5s", "--risk 0.001 → 0.01", "annotation meshdrain.io/lag-from \"from "+lagKubectl)

	code, patch, errOut := runMain(t, "plan", "--mesh", "none", "--p99", "450ms", "--lag-from", lagKubeProxy, "-f", deploy, "-o", "yaml", "--patch")
	if code != ExitOK {
		t.Fatalf("--patch: exit %d, stderr %s", code, errOut)
	}
	wantContains(t, "patch", patch,
		"# eds-lag from --lag-from "+lagKubeProxy+" at --risk 0.001: 0 drains, 0 clients, 1 nodes, 2 observations",
		"      annotations:\n        meshdrain.io/lag-from: 'from "+lagKubeProxy,
		"- --lag-dist=0:250ms,1:5s\n", "- --risk=0.001\n", "- --min-wait=0s\n")
}

// TestPlanLagFromMinWaitFloor: a --min-wait given with --lag-from stays, a floor under the
// figure.
func TestPlanLagFromMinWaitFloor(t *testing.T) {
	code, out, errOut := runMain(t, "plan", "--mesh", "none", "--port", "8080", "--p99", "450ms", "--lag-from", lagKubectl, "--min-wait", "3s")
	if code != ExitOK {
		t.Fatalf("exit %d, stderr %s", code, errOut)
	}
	wantContains(t, "text", out, "--min-wait=3s --eds-lag-bound=1.9s --lag-dist=0:2ms,1:1.815s --risk=0.001")
	if strings.Contains(out, "meshdrain --min-wait           = 0s") {
		t.Errorf("the arithmetic says --min-wait 0 with --min-wait 3s given:\n%s", out)
	}
}

// TestPlanLagFromRefusals: the inputs that do not go together, each named.
func TestPlanLagFromRefusals(t *testing.T) {
	base := []string{"plan", "--mesh", "none", "--port", "8080", "--p99", "450ms"}
	for _, tc := range []struct {
		name  string
		args  []string
		stdin string
		want  string
	}{
		{"both lags", []string{"--lag-from", lagKubectl, "--eds-lag", "5s"}, "", "--lag-from and --eds-lag both give the lag"},
		{"neither", nil, "", "plan needs --eds-lag (the lag as you know it) or --lag-from SOURCE"},
		{"risk alone", []string{"--eds-lag", "5s", "--risk", "0.01"}, "", "--risk goes with --lag-from"},
		{"risk too high", []string{"--lag-from", lagKubectl, "--risk", "0.6"}, "", "--risk 0.6: want 0 < P <= 0.5"},
		{"risk zero", []string{"--lag-from", lagKubectl, "--risk", "0"}, "", "--risk 0: want 0 < P <= 0.5"},
		{"clients", []string{"--lag-from", lagKubectl, "--clients", "50"}, "", "--clients goes with --eds-lag p50=D,p99=D, not with --lag-from"},
		{"stdin twice", []string{"--lag-from", "-", "-f", "-"}, meshlessWeb, "--lag-from - and -f - would both read stdin"},
		{"missing file", []string{"--lag-from", "no-such.log"}, "", "--lag-from: open no-such.log"},
		{"no evidence", []string{"--lag-from", "-"}, "just an app log line\n", "no lag evidence: no meshdrain final event and no histogram observation (1 records skipped)"},
	} {
		code, _, errOut := runMainStdin(t, tc.stdin, append(append([]string{}, base...), tc.args...)...)
		if code != ExitUsage || !strings.Contains(errOut, tc.want) {
			t.Errorf("%s: exit %d, stderr %q; want usage error containing %q", tc.name, code, errOut, tc.want)
		}
	}
}
