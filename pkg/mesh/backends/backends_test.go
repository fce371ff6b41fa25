package backends

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/meshdrain/meshdrain/pkg/hook/evidence"
	"github.com/meshdrain/meshdrain/pkg/hook/regime"
	"github.com/meshdrain/meshdrain/pkg/mesh"
	"github.com/meshdrain/meshdrain/pkg/mesh/kernel"
	"github.com/meshdrain/meshdrain/pkg/mesh/linkerd"
)

// Each mesh refuses the flags that name another backend's settings, with one message per
// flag whichever command gave it; auto refuses none before it knows the mesh.
func TestRefusedPerMesh(t *testing.T) {
	ports := mesh.Selector{Ports: []int{8080}}
	for _, c := range []struct {
		name string
		o    Options
		want []string // one problem naming each, in order
	}{
		{"none: --admin", Options{Mesh: mesh.None, AdminURL: "http://127.0.0.1:15000", Selector: ports}, []string{"--admin names a sidecar's setting"}},
		{"none: --cluster and --http-prefix", Options{Mesh: mesh.None, Selector: mesh.Selector{Clusters: []string{"a"}, HTTPPrefixes: []string{"b"}}},
			[]string{"--cluster names a sidecar's setting", "--http-prefix names a sidecar's setting"}},
		{"none: --inbound-listener-port", Options{Mesh: mesh.None, Selector: ports, Given: Given{InboundListenerPorts: true}}, []string{"--inbound-listener-port names"}},
		{"none: --drain-at end", Options{Mesh: mesh.None, Selector: ports, Given: Given{DrainAtEnd: true}}, []string{"--drain-at end defers a sidecar's drain call"}},
		{"linkerd: --cluster", Options{Mesh: mesh.Linkerd, Selector: mesh.Selector{Clusters: []string{"a"}}}, []string{"a Linkerd proxy counts per target port"}},
		{"linkerd: regime b", Options{Mesh: mesh.Linkerd, Given: Given{RegimeB: true}}, []string{"a Linkerd proxy gets no drain call"}},
		{"linkerd: --termination-drain-duration", Options{Mesh: mesh.Linkerd, Given: Given{TerminationDrainDuration: true}}, []string{"Istio's pilot-agent setting"}},
		{"istio: --proxy-wait-before-exit", Options{Mesh: mesh.Istio, Given: Given{ProxyWaitBeforeExit: true}}, []string{"a Linkerd proxy's setting"}},
		{"envoy: --app-metrics", Options{Mesh: mesh.Envoy, Given: Given{AppMetrics: true}}, []string{"--app-metrics reads the app's own request counter"}},
		{"auto: --port with --cluster", Options{Mesh: mesh.Auto, Selector: mesh.Selector{Ports: []int{8080}, Clusters: []string{"a"}}}, []string{"use one or the other"}},
		{"auto: a bad --port", Options{Mesh: mesh.Auto, Selector: mesh.Selector{Ports: []int{70000}}}, []string{"--port 70000: not a port number"}},
		{"auto: Envoy's and Linkerd's settings", Options{Mesh: mesh.Auto, Selector: mesh.Selector{Clusters: []string{"a"}},
			Given: Given{InboundListenerPorts: true, RegimeB: true, ProxyWaitBeforeExit: true, TerminationDrainDuration: true}}, nil},
		{"istio: its own settings", Options{Mesh: mesh.Istio, AdminURL: "http://127.0.0.1:15000", Selector: ports,
			Given: Given{InboundListenerPorts: true, DrainAtEnd: true, RegimeB: true, TerminationDrainDuration: true}}, nil},
	} {
		problems, _ := Refused(c.o)
		if len(problems) != len(c.want) {
			t.Errorf("%s: problems %v, want %d", c.name, problems, len(c.want))
			continue
		}
		for i, want := range c.want {
			if !strings.Contains(problems[i].Error(), want) {
				t.Errorf("%s: problem %q, want %q", c.name, problems[i], want)
			}
		}
	}
}

// --drain-mode given to a backend with no drain call is a warning, not a problem: the hook
// still drains by silence.
func TestRefusedDrainModeWarns(t *testing.T) {
	for _, m := range []mesh.Mesh{mesh.None, mesh.Linkerd} {
		problems, warnings := Refused(Options{Mesh: m, Selector: mesh.Selector{Ports: []int{8080}}, Given: Given{DrainMode: mesh.DrainGraceful}})
		if len(problems) > 0 || len(warnings) != 1 || !strings.Contains(warnings[0], "--drain-mode graceful has no effect") {
			t.Errorf("--mesh %s: problems %v, warnings %v", m, problems, warnings)
		}
	}
	if _, warnings := Refused(Options{Mesh: mesh.Istio, Given: Given{DrainMode: mesh.DrainGraceful}}); len(warnings) > 0 {
		t.Errorf("istio: warnings %v", warnings)
	}
}

// Every bad --ignore-source is named, not only the first; away from the pod a $(NAME) is
// the pod's to read.
func TestParseIgnoreSources(t *testing.T) {
	lookup := func(name string) (string, bool) {
		return map[string]string{"HOST_IP": "192.0.2.7"}[name], name == "HOST_IP"
	}
	ignore, problems := ParseIgnoreSources([]string{"nonsense", "$(HOST_IP)", "$(NODE_IP)", "10.0.0.0/8"}, lookup, false)
	if len(problems) != 2 || !strings.Contains(fmt.Sprint(problems), "nonsense") || !strings.Contains(fmt.Sprint(problems), "NODE_IP") {
		t.Errorf("problems %v, want nonsense and NODE_IP", problems)
	}
	if fmt.Sprint(ignore) != "[192.0.2.7/32 10.0.0.0/8]" {
		t.Errorf("ignore %v", ignore)
	}
	ignore, problems = ParseIgnoreSources([]string{"$(NODE_IP)", "10.0.0.0/8"}, nil, true)
	if len(problems) > 0 || fmt.Sprint(ignore) != "[10.0.0.0/8]" {
		t.Errorf("offline: ignore %v, problems %v", ignore, problems)
	}
}

// Open returns each mesh's backend with its own evidence: the socket table beside an Envoy
// sidecar, the kernel's own clients without one, and none beside a Linkerd proxy, whose
// closes say nothing of its clients; only Envoy gets a drain call.
func TestOpenEvidencePerMesh(t *testing.T) {
	hook := func(m mesh.Mesh) Options {
		return Options{Mesh: m, Selector: mesh.Selector{Ports: []int{8080}}, Hook: true, Evidence: &Evidence{}}
	}
	istio := Open(context.Background(), hook(mesh.Istio))
	if _, ok := istio.Clients.(*evidence.Table); !ok || istio.NoDrainCall || istio.AdminURL != "http://127.0.0.1:15000" || len(istio.Problems) > 0 {
		t.Errorf("istio: %+v", istio)
	}
	l := Open(context.Background(), hook(mesh.Linkerd))
	if _, ok := l.Sidecar.(*linkerd.HookSidecar); !ok || l.Clients != nil || !l.NoDrainCall || len(l.Problems) > 0 {
		t.Errorf("linkerd: %+v", l)
	}
	none := Open(context.Background(), hook(mesh.None))
	if _, ok := none.Sidecar.(*kernel.Kernel); !ok || !none.NoDrainCall || none.AdminURL != "" || len(none.Problems) > 0 {
		t.Errorf("none: %+v", none)
	}
	if _, ok := none.Clients.(evidence.Kernel); !ok {
		t.Errorf("none: evidence %T", none.Clients)
	}
	auto := Open(context.Background(), hook(mesh.Auto))
	if auto.Sidecar != nil || auto.Clients != nil || len(auto.Candidates) != 2 || len(auto.Problems) > 0 {
		t.Errorf("auto: %+v", auto)
	}
}

// The hook's drain of an Envoy sidecar says its drain regime in the final event, judged with
// prestop's --drain-at; a backend without a drain call (a Linkerd proxy, the kernel) has none,
// and status and check, which run no drain, get none.
func TestOpenRegimeOnlyForADrainedEnvoy(t *testing.T) {
	open := func(m mesh.Mesh, hook, drainAtEnd bool) Backend {
		return Open(context.Background(), Options{Mesh: m, Selector: mesh.Selector{Ports: []int{8080}}, Hook: hook, Given: Given{DrainAtEnd: drainAtEnd}})
	}
	for _, drainAtEnd := range []bool{false, true} {
		if r, ok := open(mesh.Istio, true, drainAtEnd).Reads.(*regime.Prestop); !ok || r.DrainAtEnd != drainAtEnd {
			t.Errorf("istio hook, --drain-at end %v: reads %#v", drainAtEnd, r)
		}
	}
	for _, b := range []Backend{open(mesh.Linkerd, true, false), open(mesh.None, true, false), open(mesh.Istio, false, false), open(mesh.Auto, true, false)} {
		if b.Reads != nil {
			t.Errorf("%T: reads %#v", b.Sidecar, b.Reads)
		}
	}
}

// A Linkerd proxy's admin port is never a --port to watch, for any command.
func TestOpenLinkerdRefusesItsAdminPort(t *testing.T) {
	b := Open(context.Background(), Options{Mesh: mesh.Linkerd, AdminURL: "http://127.0.0.1:14191", Selector: mesh.Selector{Ports: []int{14191}}})
	if len(b.Problems) != 1 || !strings.Contains(b.Problems[0].Error(), "--port: port 14191 is the Linkerd proxy's admin port") {
		t.Errorf("problems %v", b.Problems)
	}
}
