package drain

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/meshdrain/meshdrain/pkg/clock"
	"github.com/meshdrain/meshdrain/pkg/mesh"
)

// kernelPorts answers as mesh/kernel does (--mesh none): one endpoint per selected port, with
// the activity counter only where something listens; every listening port when none is selected.
type kernelPorts struct{ listening []int }

func (k kernelPorts) Inbound(_ context.Context, sel mesh.Selector) (mesh.Snapshot, error) {
	snap := mesh.Snapshot{Naming: mesh.NamingKernel}
	ports := sel.Ports
	if len(ports) == 0 {
		ports = k.listening
	}
	for _, p := range ports {
		e := mesh.Endpoint{Port: &p, Name: fmt.Sprintf("kernel:%d", p)}
		if slices.Contains(k.listening, p) {
			e.ClientActivityTotal, e.ClientRequestsActive = f(0), f(0)
		}
		snap.Endpoints = append(snap.Endpoints, e)
	}
	return snap, nil
}

func (kernelPorts) DrainListeners(context.Context, mesh.DrainMode) error { return nil }
func (kernelPorts) Hints() mesh.Hints {
	return mesh.Hints{MissingStats: "--port: name the app's own listening ports", NoDrainCall: "--mesh none: no drain call"}
}

// Under --mesh none a --port nothing listens on is named as such: the pod has no sidecar,
// and a message about one sends the user looking for it.
func TestPortNotListeningWordedForTheKernel(t *testing.T) {
	fake := clock.NewAutoFake(t0)
	core, logs := observer.New(zap.DebugLevel)
	cfg := baseConfig()
	cfg.DrainMode = mesh.DrainNone
	cfg.Clock, cfg.Logger = fake, zap.New(core)
	cfg.Selector.Ports = []int{9999}
	res := Run(context.Background(), cfg, kernelPorts{listening: []int{8080}})
	if res.Reason != ReasonNoSignal {
		t.Fatalf("reason %s, want %s", res.Reason, ReasonNoSignal)
	}
	for _, e := range logs.All() {
		if strings.Contains(e.Message, "sidecar") {
			t.Errorf("%s event speaks of a sidecar: %q", e.Level, e.Message)
		}
	}
	named := logs.FilterMessage("--port names a port nothing listens on in this network namespace").All()
	if len(named) != 1 || fmt.Sprint(named[0].ContextMap()["inbound_ports_found"]) != "[8080]" {
		t.Errorf("port events %v", named)
	}
	fallback := logs.FilterMessageSnippet("falling back").All()
	if len(fallback) != 1 || !strings.HasPrefix(fallback[0].Message, "nothing to watch") ||
		fallback[0].ContextMap()["fix"] != "--port [9999]: nothing listens on it in this network namespace (listening: [8080])" {
		t.Errorf("fallback events %v", fallback)
	}
}
