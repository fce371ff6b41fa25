package cli

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/meshdrain/meshdrain/pkg/mesh"
	"github.com/meshdrain/meshdrain/pkg/sim/envoysim"
	"github.com/meshdrain/meshdrain/pkg/sim/linkerdsim"
)

// startLinkerdSim starts an emulated Linkerd proxy with inbound port 8080 in front of a
// trivial app on 127.0.0.1 and sends it n requests.
func startLinkerdSim(t *testing.T, n int) *linkerdsim.Sidecar {
	t.Helper()
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }))
	t.Cleanup(app.Close)
	sim, err := linkerdsim.Start(linkerdsim.Config{Inbound: []linkerdsim.InboundPort{{Port: 8080, AppAddr: strings.TrimPrefix(app.URL, "http://")}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sim.Close() })
	sendRequests(t, "http://"+sim.InboundAddr(8080)+"/", n)
	return sim
}

func sendRequests(t *testing.T, url string, n int) {
	t.Helper()
	client := &http.Client{Transport: &http.Transport{Proxy: nil}, Timeout: 5 * time.Second}
	for i := 0; i < n; i++ {
		resp, err := client.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}

type statusDoc struct {
	Admin       string `json:"admin"`
	Mesh        string `json:"mesh"`
	ServerState string `json:"server_state"`
	Signal      string `json:"signal"`
	Inbound     []struct {
		Port          *int     `json:"port"`
		RequestsTotal *float64 `json:"requests_total"`
	} `json:"inbound"`
}

func statusJSON(t *testing.T, args ...string) statusDoc {
	t.Helper()
	code, out, errOut := runMain(t, append([]string{"status", "-o", "json"}, args...)...)
	if code != ExitOK {
		t.Fatalf("status %v: exit %d: %s", args, code, errOut)
	}
	var doc statusDoc
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	return doc
}

// TestStatusLinkerd: --mesh linkerd reads the proxy; --mesh auto (the default) finds it, and
// still finds an Istio sidecar as it always read it.
func TestStatusLinkerd(t *testing.T) {
	sim := startLinkerdSim(t, 3)
	for _, args := range [][]string{{"--mesh", "linkerd", "--admin", sim.AdminURL()}, {"--admin", sim.AdminURL(), "--port", "8080"}} {
		doc := statusJSON(t, args...)
		if doc.Mesh != "linkerd" || doc.ServerState != "ready" || doc.Signal != "http-requests" || len(doc.Inbound) != 1 ||
			*doc.Inbound[0].Port != 8080 || *doc.Inbound[0].RequestsTotal != 3 || doc.Admin != sim.AdminURL() {
			t.Errorf("status %v: %+v", args, doc)
		}
	}
	envoy := startSim(t, envoysim.Config{Profile: envoysim.ProfileIstio}, 2)
	if doc := statusJSON(t, "--admin", envoy.AdminURL()); doc.Mesh != "istio" || doc.Signal != "http-requests" {
		t.Errorf("auto against an Istio sidecar: %+v", doc)
	}

	code, out, errOut := runMain(t, "status", "--mesh", "linkerd", "--admin", sim.AdminURL())
	if code != ExitOK || !strings.Contains(out, "IN FLIGHT*") || !strings.Contains(out, "(linkerd-proxy v2.340.0-linkerdsim)") {
		t.Errorf("text: exit %d %s\n%s", code, errOut, out)
	}
}

func TestCheckLinkerd(t *testing.T) {
	sim := startLinkerdSim(t, 2)
	cases := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"port with requests", []string{"--port", "8080"}, ExitOK, "OK    port 8080: request-level signal http-requests"},
		{"auto, any port", []string{}, ExitOK, "check passed"},
		{"port with no series", []string{"--mesh", "linkerd", "--port", "9090"}, ExitFailure, "FAIL  port 9090: the proxy has no series for this port"},
		{"classic sleep", []string{"--mesh", "linkerd", "--grace-period", "15s", "--app-drain", "2s", "--proxy-wait-before-exit", "14s"}, ExitOK,
			"OK    proxy-wait-before-exit 14s outlives"},
		{"classic sleep too short", []string{"--grace-period", "15s", "--app-drain", "2s", "--proxy-wait-before-exit", "5s"}, ExitFailure,
			`proxy-wait-before-exit-seconds: "14"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, out, errOut := runMain(t, append([]string{"check", "--admin", sim.AdminURL()}, c.args...)...)
			if code != c.code || !strings.Contains(out, c.want) {
				t.Errorf("exit %d (want %d), output lacks %q:\n%s%s", code, c.code, c.want, out, errOut)
			}
			if strings.Contains(out, "statsInclusionPrefixes") {
				t.Errorf("an Istio fix for a Linkerd proxy:\n%s", out)
			}
		})
	}
}

func TestSidecarFlagsLinkerdUsage(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"status", "--mesh", "consul"}, "want auto, istio, envoy, linkerd"},
		{[]string{"status", "--mesh", "linkerd", "--cluster", "local_app"}, "a Linkerd proxy counts per target port"},
		{[]string{"check", "--mesh", "linkerd", "--grace-period", "30s", "--termination-drain-duration", "30s"}, "Istio's pilot-agent setting"},
		{[]string{"check", "--mesh", "istio", "--grace-period", "30s", "--proxy-wait-before-exit", "29s"}, "a Linkerd proxy's setting"},
		{[]string{"check", "--proxy-wait-before-exit", "29s"}, "give --grace-period too"},
		{[]string{"status", "--mesh", "linkerd", "--admin", "https://127.0.0.1:4191"}, "want http://HOST"},
	} {
		code, _, errOut := runMain(t, c.args...)
		if code != ExitUsage || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d (stderr %q), want %d with %q", c.args, code, errOut, ExitUsage, c.want)
		}
	}
}

// TestAdminDefaultPerMesh: without --admin each mesh reads its own sidecar's admin port, and
// auto asks Linkerd's, then Envoy's (nothing is dialled here).
func TestAdminDefaultPerMesh(t *testing.T) {
	for sidecarMesh, want := range map[mesh.Mesh]string{mesh.Linkerd: "http://127.0.0.1:4191", mesh.Istio: "http://127.0.0.1:15000", mesh.Envoy: "http://127.0.0.1:15000", mesh.Auto: ""} {
		flags := defaultSidecarFlags()
		flags.mesh = sidecarMesh
		_, admin, _, err := flags.sidecar()
		if err != nil || admin != want {
			t.Errorf("--mesh %s: admin %q, %v; want %q", sidecarMesh, admin, err, want)
		}
	}
}
