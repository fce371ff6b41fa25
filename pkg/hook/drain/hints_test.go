package drain

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/meshdrain/meshdrain/pkg/clock"
	"github.com/meshdrain/meshdrain/pkg/mesh"
)

// hintedSidecar is a scripted sidecar of another mesh: it names its own fixes.
type hintedSidecar struct {
	*scriptedSidecar
	hints mesh.Hints
}

func (h hintedSidecar) Hints() mesh.Hints { return h.hints }

var otherMesh = mesh.Hints{
	MissingStats: "other mesh: no annotation is needed",
	SidecarGone:  "other mesh: outlive the app",
	Unreachable:  "other mesh: a classic proxy closes its admin port at SIGTERM",
	NoDrainCall:  "other mesh: no drain endpoint",
	AdminCounter: "other_admin_requests",
}

func runHinted(t *testing.T, cfg Config, script func(time.Duration) (mesh.Snapshot, error)) (Result, *observer.ObservedLogs) {
	t.Helper()
	fake := clock.NewAutoFake(t0)
	core, logs := observer.New(zap.DebugLevel)
	cfg.Clock, cfg.Logger = fake, zap.New(core)
	res := Run(context.Background(), cfg, hintedSidecar{&scriptedSidecar{clock: fake, script: script}, otherMesh})
	return res, logs
}

func field(logs *observer.ObservedLogs, msg, key string) string {
	for _, e := range logs.All() {
		if strings.Contains(e.Message, msg) {
			if v, ok := e.ContextMap()[key]; ok {
				return fmt.Sprint(v)
			}
		}
	}
	return ""
}

// Every fix a drain logs is the sidecar's own: never an Istio annotation or Istio's proxy
// config for a mesh that has neither.
func TestHintsAreTheSidecars(t *testing.T) {
	cfg := baseConfig()
	cfg.DrainMode = mesh.DrainNone

	_, logs := runHinted(t, cfg, func(time.Duration) (mesh.Snapshot, error) { return mesh.Snapshot{}, nil })
	if got := field(logs, "no inbound request stats", "fix"); got != otherMesh.MissingStats {
		t.Errorf("no-signal fix %q", got)
	}
	if got := field(logs, "no inbound request stats", "fix_plain_envoy"); got != "" {
		t.Errorf("fix_plain_envoy %q for a sidecar that gives none", got)
	}
	if got := field(logs, "drain finished", "no_drain_call"); got != otherMesh.NoDrainCall {
		t.Errorf("final no_drain_call %q", got)
	}
	if got := field(logs, "drain started", "no_drain_call"); got != otherMesh.NoDrainCall {
		t.Errorf("started no_drain_call %q", got)
	}

	traffic := steadyTraffic(time.Hour, 0)
	res, logs := runHinted(t, cfg, func(at time.Duration) (mesh.Snapshot, error) {
		if at >= 3*time.Second {
			return mesh.Snapshot{}, refused
		}
		return traffic(at)
	})
	if res.Reason != ReasonSidecarGoneBusy || res.DrainCalled {
		t.Fatalf("reason %s drain called %v", res.Reason, res.DrainCalled)
	}
	if got := field(logs, "went away", "fix"); got != otherMesh.SidecarGone {
		t.Errorf("sidecar-gone-busy fix %q", got)
	}
	if got := field(logs, "drain finished", "fix"); got != otherMesh.SidecarGone {
		t.Errorf("final fix %q", got)
	}

	_, logs = runHinted(t, cfg, func(time.Duration) (mesh.Snapshot, error) { return mesh.Snapshot{}, refused })
	if got := field(logs, "admin API not reachable", "hint"); got != otherMesh.Unreachable {
		t.Errorf("unreachable hint %q", got)
	}

	_, logs = runHinted(t, cfg, withAdminCounter(steadyTraffic(time.Hour, 0), 2*time.Second))
	if got := field(logs, "admin request failed", "error"); !strings.Contains(got, "other_admin_requests stayed at") {
		t.Errorf("frozen error %q", got)
	}

	// The scripted sidecar stands for Envoy: the Istio annotation, the plain-Envoy fix, no no_drain_call.
	_, _, _, logs = run(t, baseConfig(), func(time.Duration) (mesh.Snapshot, error) { return mesh.Snapshot{}, nil })
	if got := field(logs, "no inbound request stats", "fix"); !strings.Contains(got, "sidecar.istio.io/statsInclusionPrefixes") ||
		field(logs, "no inbound request stats", "fix_plain_envoy") == "" || field(logs, "drain finished", "no_drain_call") != "" {
		t.Errorf("Envoy hints: fix %q", got)
	}
}
