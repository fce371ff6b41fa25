package simcli

import (
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
