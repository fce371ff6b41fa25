package cli

import (
	"context"
	"strings"
	"testing"

	"github.com/meshdrain/meshdrain/pkg/hook/evidence"
	"github.com/meshdrain/meshdrain/pkg/mesh"
)

// With --mesh auto, the sidecar found decides the drain's evidence as --mesh would have: the
// socket table beside Envoy, none beside a Linkerd proxy, whose closes say nothing of its
// clients (docs/linkerd.md), and no drain call there.
func TestPrestopAutoEvidenceIsTheFoundMeshs(t *testing.T) {
	setup := loadPrestop(context.Background(), []string{"--mesh", "auto"}, nil)
	if len(setup.problems) > 0 {
		t.Fatalf("problems: %v", setup.problems)
	}
	cfg := setup.cfg
	if _, _, problems := setup.opts.sidecarFor(mesh.Istio, "http://127.0.0.1:15000", false, &cfg); len(problems) > 0 {
		t.Fatalf("istio: %v", problems)
	}
	if _, ok := cfg.Clients.(*evidence.Table); !ok || cfg.DrainMode == mesh.DrainNone {
		t.Errorf("istio found: evidence %T, drain mode %s", cfg.Clients, cfg.DrainMode)
	}
	cfg = setup.cfg
	if _, _, problems := setup.opts.sidecarFor(mesh.Linkerd, "http://127.0.0.1:4191", false, &cfg); len(problems) > 0 {
		t.Fatalf("linkerd: %v", problems)
	}
	if cfg.Clients != nil || cfg.DrainMode != mesh.DrainNone {
		t.Errorf("linkerd found: evidence %T, drain mode %s", cfg.Clients, cfg.DrainMode)
	}
}

// status and check refuse under --mesh none what prestop refuses, in its words: one list of
// the flags each mesh refuses.
func TestMeshNoneRefusesAsPrestop(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"status", "--mesh", "none", "--port", "8080", "--inbound-listener-port", "15006"}, "--inbound-listener-port names a sidecar's setting"},
		{[]string{"status", "--mesh", "none", "--port", "8080", "--admin", "http://127.0.0.1:15000"}, "--admin names a sidecar's setting"},
		{[]string{"check", "--mesh", "none", "--port", "8080", "--cluster", "local_app"}, "--cluster names a sidecar's setting"},
		{[]string{"check", "--mesh", "none", "--port", "8080", "--ignore-source", "nonsense", "--ignore-source", "$(NO_SUCH_VARIABLE_38)"}, "NO_SUCH_VARIABLE_38"},
	} {
		code, _, errOut := runMain(t, c.args...)
		if code != ExitUsage || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want %d naming %q", c.args, code, errOut, ExitUsage, c.want)
		}
	}
}
