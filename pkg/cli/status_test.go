package cli

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/meshdrain/meshdrain/pkg/localhttp/localhttptest"
	"github.com/meshdrain/meshdrain/pkg/mesh/envoy"
	"github.com/meshdrain/meshdrain/pkg/sim/envoysim"
)

// startSim starts an emulated sidecar with inbound port 8080 in front of a trivial app and
// sends it n requests.
func startSim(t *testing.T, cfg envoysim.Config, n int) *envoysim.Sidecar {
	t.Helper()
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }))
	t.Cleanup(app.Close)
	cfg.Inbound = []envoysim.InboundPort{{Port: 8080, AppAddr: strings.TrimPrefix(app.URL, "http://")}}
	cfg.DrainTime, cfg.TerminationDrainDuration = time.Hour, time.Hour
	sim, err := envoysim.Start(cfg)
	if err != nil {
		t.Fatalf("envoysim.Start: %v", err)
	}
	t.Cleanup(func() { _ = sim.Close() })
	client := &http.Client{Timeout: 5 * time.Second}
	for i := 0; i < n; i++ {
		resp, err := client.Get("http://" + sim.InboundAddr(8080) + "/")
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	return sim
}

// closedAdminURL is an admin URL where nothing listens.
func closedAdminURL(t *testing.T) string {
	t.Helper()
	return localhttptest.RefusingURL(t)
}

func TestStatusCommandProfiles(t *testing.T) {
	cases := []struct {
		profile envoysim.Profile
		args    []string
	}{
		{envoysim.ProfileIstio, nil},
		{envoysim.ProfileIstioLegacy, []string{"--port", "8080"}},
		{envoysim.ProfileEnvoy, []string{"--cluster", "service_a", "--http-prefix", "ingress_http"}},
	}
	for _, c := range cases {
		t.Run(string(c.profile), func(t *testing.T) {
			sim := startSim(t, envoysim.Config{Profile: c.profile}, 4)
			code, out, errOut := runMain(t, append([]string{"status", "--admin", sim.AdminURL(), "-o", "json"}, c.args...)...)
			if code != ExitOK {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			var doc struct {
				ServerState string `json:"server_state"`
				Signal      string `json:"signal"`
				Naming      string `json:"naming"`
				Inbound     []struct {
					Port              *int     `json:"port"`
					Name              string   `json:"name"`
					RequestsTotal     *float64 `json:"requests_total"`
					RequestsActive    *float64 `json:"requests_active"`
					ConnectionsActive *float64 `json:"connections_active"`
				} `json:"inbound"`
				Hints []string `json:"hints"`
			}
			if err := json.Unmarshal([]byte(out), &doc); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			if doc.ServerState != "LIVE" || doc.Signal != "http-requests" || doc.Naming != string(c.profile) || len(doc.Hints) != 0 {
				t.Errorf("got %+v", doc)
			}
			if len(doc.Inbound) != 1 || doc.Inbound[0].RequestsTotal == nil || *doc.Inbound[0].RequestsTotal != 4 {
				t.Errorf("inbound %+v, want one endpoint with 4 requests", doc.Inbound)
			}

			code, text, _ := runMain(t, append([]string{"status", "--admin", sim.AdminURL()}, c.args...)...)
			if code != ExitOK || !strings.Contains(text, "signal:  http-requests") || !strings.Contains(text, "REQUESTS") ||
				!strings.Contains(text, "regime:  b so far: no connection told to close") {
				t.Errorf("text output (exit %d):\n%s", code, text)
			}
		})
	}
}

func TestStatusCommandIstioDefaultInclusionHint(t *testing.T) {
	sim := startSim(t, envoysim.Config{Inclusion: envoysim.InclusionIstioDefault}, 0)
	code, out, errOut := runMain(t, "status", "--admin", sim.AdminURL())
	if code != ExitOK {
		t.Fatalf("status shows what is there even without a signal; exit %d: %s", code, errOut)
	}
	if !strings.Contains(out, "signal:  none") || !strings.Contains(out, "hint: ") || !strings.Contains(out, envoy.MissingStatsHint) {
		t.Errorf("output:\n%s", out)
	}
}

func TestStatusCommandUnreachable(t *testing.T) {
	url := closedAdminURL(t)
	code, out, errOut := runMain(t, "status", "--mesh", "envoy", "--admin", url)
	if code != ExitFailure || out != "" {
		t.Errorf("exit %d, stdout %q; want 1 and nothing on stdout", code, out)
	}
	if !strings.Contains(errOut, "admin API at "+url+" not reachable: is this a pod with an Envoy sidecar?") {
		t.Errorf("stderr: %s", errOut)
	}
	code, _, errOut = runMain(t, "status", "--admin", url)
	if code != ExitFailure || !strings.Contains(errOut, "no sidecar admin port reachable at "+url+": is this a pod with a Linkerd proxy or an Envoy sidecar") {
		t.Errorf("--mesh auto: exit %d, stderr: %s", code, errOut)
	}
}

func TestStatusCommandFromEnvironment(t *testing.T) {
	sim := startSim(t, envoysim.Config{}, 1)
	t.Setenv("MESHDRAIN_ADMIN", sim.AdminURL())
	t.Setenv("MESHDRAIN_PORT", "8080")
	if code, out, errOut := runMain(t, "status"); code != ExitOK || !strings.Contains(out, "inbound|8080||") {
		t.Errorf("exit %d: %s%s", code, out, errOut)
	}
}

func TestStatusCommandUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"status", "-o", "xml"},
		{"status", "--interval", "0s"},
		{"status", "--port", "0"},
		{"status", "--port", "8080", "--cluster", "local_app"},
		{"status", "--admin", "https://127.0.0.1:15000"},
		{"status", "extra"},
		{"status", "--drain-at", "later"},
	} {
		if code, _, errOut := runMain(t, args...); code != ExitUsage || errOut == "" {
			t.Errorf("%v: exit %d (stderr %q), want %d with a message", args, code, errOut, ExitUsage)
		}
	}
}

func TestStatusAndCheckHelpHaveExamples(t *testing.T) {
	for _, command := range []string{"status", "check"} {
		code, out, _ := runMain(t, command, "--help")
		if code != ExitOK || !strings.Contains(out, "Examples:") || !strings.Contains(out, "meshdrain "+command) {
			t.Errorf("%s --help (exit %d) lacks an example:\n%s", command, code, out)
		}
	}
}

// status --lag-dist and --risk are checked as prestop checks them, and the figure is shown
// for a live sidecar: one sample, so the figure of a preStop that started now.
func TestStatusCommandRisk(t *testing.T) {
	for _, args := range [][]string{
		{"status", "--lag-dist", "0.5:1s"},
		{"status", "--lag-dist", planLagArgs[0][len("--lag-dist="):], "--risk", "0.6"},
	} {
		if code, _, errOut := runMain(t, args...); code != ExitUsage || !strings.Contains(errOut, args[len(args)-2]) {
			t.Errorf("%v: exit %d (stderr %q), want %d naming %s", args, code, errOut, ExitUsage, args[len(args)-2])
		}
	}
	sim := startSim(t, envoysim.Config{}, 1)
	code, out, errOut := runMain(t, append([]string{"status", "--admin", sim.AdminURL(), "--clients=false"}, planLagArgs...)...)
	if code != ExitOK || !strings.Contains(out, "risk:    1 (above --risk 0.001: a hook would not stop yet)") {
		t.Errorf("exit %d:\n%s%s", code, out, errOut)
	}
}
