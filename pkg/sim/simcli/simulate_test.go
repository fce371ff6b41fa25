package simcli

import (
	"encoding/xml"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/meshdrain/meshdrain/pkg/mesh"
	"github.com/meshdrain/meshdrain/pkg/sim/podsim"
)

// TestSimulateMeshFlags: --mesh picks the proxy and its sidecar names; settings of the other
// mesh are refused rather than ignored.
func TestSimulateMeshFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--mesh", "consul"}, `--mesh "consul"`},
		{[]string{"--mesh", "linkerd", "--traffic", "tcp"}, "protocol tcp needs mesh istio"},
		{[]string{"--wait-before-exit", "5s"}, "needs --mesh linkerd"},
		{[]string{"--mesh", "linkerd", "--sidecar", "classic", "--wait-before-exit", "1500ms"}, "whole number of seconds"},
		{[]string{"--mesh", "linkerd", "--termination-drain-duration", "30s"}, "an Istio setting"},
		{[]string{"--mesh", "linkerd", "--retries", "0"}, "--retries is an Istio setting"},
		{[]string{"--mesh", "linkerd", "--sidecar", "istio-default"}, `--sidecar "istio-default" with --mesh linkerd`},
		{[]string{"--mesh", "none", "--sidecar", "recommended"}, `--sidecar "recommended" with --mesh none`},
		{[]string{"--mesh", "none", "--termination-drain-duration", "30s"}, "a pod without a sidecar has none"},
		{[]string{"--mesh", "none", "--client-conns", "pool"}, "--client-conns is a sidecar's or a mesh client's setting"},
		{[]string{"--mesh", "none", "--traffic", "tcp"}, `traffic "tcp" with mesh none`},
		{[]string{"--mesh", "none", "--strategy", "oracle"}, "--strategy oracle: not with --mesh none"},
	} {
		code, _, errOut := runMain(t, append([]string{"simulate"}, tc.args...)...)
		if code != ExitUsage || !strings.Contains(errOut, tc.want) {
			t.Errorf("simulate %v: exit %d, stderr %q; want exit %d with %q", tc.args, code, errOut, ExitUsage, tc.want)
		}
	}
}

// TestSimulateLinkerdSidecars: a Linkerd run defaults to the native proxy as injected and as
// plan --mesh linkerd recommends it, and passes classic's sleep through.
func TestSimulateLinkerdSidecars(t *testing.T) {
	build := func(args ...string) []podsim.SidecarSpec {
		t.Helper()
		o := defaultSimulateOptions()
		cmd := &cobra.Command{}
		o.addFlags(cmd.Flags())
		if err := cmd.Flags().Parse(args); err != nil {
			t.Fatal(err)
		}
		if err := o.applyMesh(cmd); err != nil {
			t.Fatal(err)
		}
		o.strategies = []string{"none"}
		opts, err := o.build()
		if err != nil {
			t.Fatal(err)
		}
		if opts.Scenario.Mesh != mesh.Mesh(o.mesh) {
			t.Errorf("scenario mesh %q, want %q", opts.Scenario.Mesh, o.mesh)
		}
		return opts.Sidecars
	}
	specs := build("--mesh", "linkerd")
	if len(specs) != 2 || specs[0].Name != "linkerd-default" || specs[1].Name != "recommended" {
		t.Fatalf("default Linkerd sidecars = %+v", specs)
	}
	for _, s := range specs {
		if s.Mesh != mesh.Linkerd || s.Mode != podsim.SidecarNative {
			t.Errorf("%s: mesh %q mode %q, want a native linkerd proxy", s.Name, s.Mesh, s.Mode)
		}
	}
	// plan --mesh linkerd for the reference workload: grace 52s, deadline 46s (README).
	if rec := specs[1]; rec.GracePeriod.String() != "52s" || rec.MeshdrainDeadline.String() != "46s" {
		t.Errorf("recommended: grace %s deadline %s, want 52s and 46s as plan --mesh linkerd says", rec.GracePeriod, rec.MeshdrainDeadline)
	}
	classic := build("--mesh", "linkerd", "--sidecar", "classic", "--wait-before-exit", "20s")
	if len(classic) != 1 || classic[0].Mode != podsim.SidecarClassic || classic[0].WaitBeforeExit.String() != "20s" {
		t.Errorf("classic sidecar = %+v", classic)
	}
	if istio := build(); len(istio) != 2 || istio[0].Mesh != "" || istio[0].Name != "istio-default" {
		t.Errorf("Istio's default sidecars changed: %+v", istio)
	}
}

// TestSimulateHeadlineAndSVG runs a short rollout (two strategies under both Istio sidecar
// settings, at a small time scale) with the real meshdrain binary as the preStop, and checks
// that the output opens with a headline that agrees with the table, leaves the timelines out,
// and draws one SVG per row where it says.
func TestSimulateHeadlineAndSVG(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the simulator for about 10 s with a freshly built meshdrain")
	}
	bin := buildMeshdrain(t, t.TempDir())
	// Every client stops sending at 6 s: Envoy's kill at 5 s under Istio's defaults cuts
	// requests whatever the preStop does; with the recommended sidecar meshdrain stops the app
	// after 6 s plus its quiet window, sooner than the sleep of 8 s. A run whose timers fired
	// late (its WARNING lines) is replayed at a larger time scale; the last one is judged
	// whatever it says.
	var svgDir, out string
	for _, scale := range []string{"0.2", "0.5", "1"} {
		svgDir = filepath.Join(t.TempDir(), "pictures")
		code, stdout, errOut := runMain(t, "simulate", "--meshdrain-bin", bin, "--strategy", "sleep:8s,meshdrain",
			"--qps", "200", "--clients", "10", "--eds-lag", "6s", "--time-scale", scale, "--svg", svgDir)
		if code != ExitOK {
			t.Fatalf("simulate: exit %d\n%s\n%s", code, errOut, stdout)
		}
		out = stdout
		t.Logf("simulate at time scale %s:\n%s", scale, out)
		if !strings.Contains(out, "WARNING") {
			break
		}
	}

	table := strings.Index(out, "\n   STRATEGY")
	if !strings.HasPrefix(out, "meshdrain against the best sleep, per sidecar setting") || table < 0 {
		t.Fatalf("want the headline first, then the table:\n%s", out)
	}
	headline := map[string]string{}
	sidecar := ""
	for _, line := range strings.Split(out[:strings.Index(out, "Pod deletion replayed")], "\n")[1:] {
		if name, verdict, ok := strings.Cut(strings.TrimSpace(line), "  "); ok && strings.HasPrefix(line, "  "+name) {
			sidecar = name
			headline[sidecar] = strings.TrimSpace(verdict)
		} else if sidecar != "" && strings.TrimSpace(line) != "" {
			headline[sidecar] += " " + strings.TrimSpace(line)
		}
	}
	if len(headline) != 2 || headline["istio-default"] == "" || headline["recommended"] == "" {
		t.Fatalf("headline %q: want one entry per sidecar setting", headline)
	}

	// The headline's numbers are the table's.
	row := regexp.MustCompile(`(?m)^\s+(\S+)\s+(\S+)\s+\d+\s+(\d+)\s+(\d+)\b.*?\s(\d+\.\d\d)s\s+\d+\.\d\ds\s`)
	rows := map[string][]string{}
	for _, m := range row.FindAllStringSubmatch(out[table:], -1) {
		rows[m[1]+"/"+m[2]] = m[3:] // sidecar 5xx, client failures, app stop
	}
	if len(rows) != 4 {
		t.Fatalf("table rows %v: want 2 strategies × 2 sidecars", rows)
	}
	md := rows["meshdrain/recommended"]
	if want := "app stopped at " + md[2] + "s"; !strings.Contains(headline["recommended"], want) {
		t.Errorf("recommended headline %q does not say %q, the table's APP STOP", headline["recommended"], want)
	}
	if md[0] == "0" && md[1] == "0" && !strings.HasPrefix(headline["recommended"], "meshdrain clean, app stopped at") {
		t.Errorf("recommended headline %q: the table shows a clean meshdrain", headline["recommended"])
	}
	for _, strategy := range []string{"sleep:8s", "meshdrain"} {
		if want := strategy + " lost " + rows[strategy+"/istio-default"][1]; !strings.Contains(headline["istio-default"], want) {
			t.Errorf("istio-default headline %q lacks %q", headline["istio-default"], want)
		}
	}
	if !strings.Contains(headline["istio-default"], "fix the sidecar first: meshdrain plan.") {
		t.Errorf("istio-default headline %q: Envoy is killed at 5 s while clients send until 6 s", headline["istio-default"])
	}
	// A timeline starts with its own line, "\nSTRATEGY, sidecar SIDECAR:" (a WARNING line
	// names the run the same way, after "WARNING ").
	if strings.Contains(out, "\nmeshdrain, sidecar recommended:\n") {
		t.Error("timelines printed without --timelines")
	}

	index := filepath.Join(svgDir, "index.html")
	if want := fmt.Sprintf("Drawn: 4 SVG timelines in %s; open %s in a browser.", svgDir, index); !strings.Contains(out, want) {
		t.Errorf("output does not say where the pictures are: want %q", want)
	}
	svgs, err := filepath.Glob(filepath.Join(svgDir, "*.svg"))
	if err != nil || len(svgs) != 4 {
		t.Fatalf("SVGs in %s: %v %v, want 4", svgDir, svgs, err)
	}
	for _, path := range svgs {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var doc struct {
			XMLName xml.Name `xml:"http://www.w3.org/2000/svg svg"`
			Title   string   `xml:"title"`
		}
		if err := xml.Unmarshal(data, &doc); err != nil || doc.Title == "" {
			t.Errorf("%s: %v, title %q", path, err, doc.Title)
		}
	}
	if page, err := os.ReadFile(index); err != nil || !strings.Contains(string(page), filepath.Base(svgs[0])) {
		t.Errorf("index.html: %v, or it does not show %s", err, filepath.Base(svgs[0]))
	}
}

// The client-connection variants and regime (b) are simulate's flags; a wrong value names
// its flag.
func TestSimulateClientConnsAndDeferredFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--client-conns", "bogus"}, "client conns"},
		{[]string{"--client-idle-timeout", "-1s"}, "idle"},
		{[]string{"--mesh", "linkerd", "--sidecar", "recommended-native"}, "recommended-native"},
	} {
		code, _, errOut := runMain(t, append([]string{"simulate"}, tc.args...)...)
		if code != ExitUsage || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d, stderr %q", tc.args, code, errOut)
		}
	}
}

// TestSimulateMeshless: --mesh none takes the meshless shapes (mixed by default), no retries,
// the pod without a sidecar with meshdrain's --mesh none flags, and --clients in each kind's
// share.
func TestSimulateMeshless(t *testing.T) {
	build := func(args ...string) podsim.Options {
		t.Helper()
		o := defaultSimulateOptions()
		cmd := &cobra.Command{}
		o.addFlags(cmd.Flags())
		if err := cmd.Flags().Parse(args); err != nil {
			t.Fatal(err)
		}
		if err := o.applyTraffic(cmd); err != nil {
			t.Fatal(err)
		}
		if err := o.applyMesh(cmd); err != nil {
			t.Fatal(err)
		}
		o.strategies = []string{"none", "sleep:5s"}
		opts, err := o.build()
		if err != nil {
			t.Fatal(err)
		}
		return opts
	}
	opts := build("--mesh", "none")
	sc := opts.Scenario
	if sc.Mesh != podsim.MeshNone || sc.Traffic != "mixed" || sc.Retries != 0 || sc.Meshless.Holders == 0 || sc.Meshless.Ingress == 0 {
		t.Errorf("--mesh none: mesh %q, traffic %q, retries %d, clients %+v; want none, mixed, 0, every kind", sc.Mesh, sc.Traffic, sc.Retries, sc.Meshless)
	}
	if len(opts.Sidecars) != 1 || opts.Sidecars[0].Name != noSidecar || opts.Sidecars[0].MeshdrainLagBound <= 0 {
		t.Errorf("sidecars %+v, want one no-sidecar pod with a lag bound", opts.Sidecars)
	}
	if sc := build("--mesh", "none", "--traffic", "keep-alive", "--clients", "5").Scenario; sc.Meshless.Holders != 5 || sc.Meshless.PerRequest != 0 {
		t.Errorf("--traffic keep-alive --clients 5: %+v, want 5 keep-alive clients", sc.Meshless)
	}
}
