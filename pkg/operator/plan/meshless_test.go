package plan

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/meshdrain/meshdrain/pkg/mesh"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	sigsyaml "sigs.k8s.io/yaml"
)

func meshlessScenario(m mesh.Mesh) Input {
	return Input{Mesh: m, P99: 450 * ms, EDSLag: 12 * s, EDSLagMedian: 1500 * ms, Clients: 50, AppDrain: 5 * s, Ports: []int{8080}}
}

// TestRecommendMeshless: a pod without a sidecar gets the same grace period as the sidecar
// plans from the same lag and drain, no annotation, and a preStop that watches the app's
// port and leaves the node's probes out; ambient leaves its probes' SNAT source out too.
func TestRecommendMeshless(t *testing.T) {
	sidecar := meshlessScenario(mesh.Istio)
	sidecar.Ports, sidecar.Sidecar = nil, Native
	istio := mustRecommend(t, sidecar)
	for _, c := range []struct {
		m    mesh.Mesh
		want string
	}{
		{mesh.None, "prestop --mesh=none --port=8080 --ignore-source=$(HOST_IP) --grace-period=52s --app-drain=5s --quiet=1s --eds-lag-bound=35.5s --log-file=/proc/1/fd/1"},
		{Ambient, "prestop --mesh=none --port=8080 --ignore-source=$(HOST_IP) --ignore-source=169.254.7.127 --grace-period=52s --app-drain=5s --quiet=1s --eds-lag-bound=35.5s --log-file=/proc/1/fd/1"},
	} {
		p := mustRecommend(t, meshlessScenario(c.m))
		if got := strings.Join(p.PrestopArgs(), " "); got != c.want {
			t.Errorf("%s: PrestopArgs = %s\nwant %s", c.m, got, c.want)
		}
		if p.GracePeriod != istio.GracePeriod || p.Deadline != istio.Deadline {
			t.Errorf("%s: grace %s deadline %s, want the sidecar plans' %s %s", c.m, p.GracePeriod, p.Deadline, istio.GracePeriod, istio.Deadline)
		}
		if len(p.Annotations()) != 0 || p.ProxyConfig() != "" || p.HoldArgs() != nil || p.DefersSidecarDrain() || p.TerminationDrainDuration != 0 || p.DrainDuration != 0 {
			t.Errorf("%s: a sidecar setting in a meshless plan: %v %q %v", c.m, p.Annotations(), p.ProxyConfig(), p.HoldArgs())
		}
		if probe, ok := p.ReadinessProbe(); !ok || probe.Port != 8080 {
			t.Errorf("%s: readiness probe %+v %v, want tcpSocket 8080", c.m, probe, ok)
		}
		var text bytes.Buffer
		if err := WriteText(&text, p); err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"HOST_IP from the downward API", "tcpSocket :8080", "Connection: close", "GOAWAY", "WebSockets",
			"PodDisruptionBudget", "only then, stops accepting", "within --app-drain 5s", "named in its final event"} {
			if !strings.Contains(text.String(), want) {
				t.Errorf("%s: the plan's text lacks %q", c.m, want)
			}
		}
		for _, notWanted := range []string{"Envoy", "istio-proxy", "drainDuration", "linkerd"} {
			if strings.Contains(text.String(), notWanted) && (c.m != Ambient || notWanted != "Envoy") { // ambient's waypoint is an Envoy
				t.Errorf("%s: a sidecar's word %q in a meshless plan:\n%s", c.m, notWanted, text.String())
			}
		}
	}
	p := mustRecommend(t, meshlessScenario(Ambient))
	if notes := strings.Join(p.Warnings, "\n"); !strings.Contains(notes, "169.254.7.127") || !strings.Contains(notes, "waypoint") {
		t.Errorf("ambient notes lack the probe source or the waypoint:\n%s", notes)
	}
}

// TestMeshlessInputsRefused: no port, a port out of range, or a sidecar kind are refused,
// each naming its flag.
func TestMeshlessInputsRefused(t *testing.T) {
	for _, c := range []struct {
		change func(*Input)
		want   string
	}{
		{func(in *Input) { in.Ports = nil }, "--mesh none needs --port P"},
		{func(in *Input) { in.Ports = []int{0, 70000} }, "--port 70000: not a port number"},
		{func(in *Input) { in.Sidecar = Native }, "--sidecar native: a pod of --mesh none has no sidecar"},
	} {
		in := meshlessScenario(mesh.None)
		c.change(&in)
		if _, err := Recommend(in); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Recommend = %v, want %q", err, c.want)
		}
	}
}

// TestMeshlessJSON: -o json names the mesh, the env and the probe, and writes no sidecar.
func TestMeshlessJSON(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteJSON(&buf, mustRecommend(t, meshlessScenario(mesh.None)), "/meshdrain", nil); err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(buf.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	if got["mesh"] != "none" || got["sidecar"] != nil || got["defer_sidecar_drain"] != nil {
		t.Errorf("mesh %v sidecar %v defer %v, want none and no sidecar", got["mesh"], got["sidecar"], got["defer_sidecar_drain"])
	}
	if env, _ := got["env"].(map[string]any); env["HOST_IP"] != "status.hostIP" {
		t.Errorf("env = %v", got["env"])
	}
	if probe, _ := got["readiness_probe"].(map[string]any); probe["tcp_socket_port"] != float64(8080) {
		t.Errorf("readiness_probe = %v", got["readiness_probe"])
	}
	if _, ok := got["inputs"].(map[string]any)["drain_duration"]; ok {
		t.Error("Envoy's drain_duration among a meshless plan's inputs")
	}
}

// checkMeshlessWorkload: the planned workload's app container has HOST_IP from the node's
// IP, once, and a readiness probe (its own, or plan's tcpSocket), with one handler.
func checkMeshlessWorkload(t *testing.T, out []byte, e *Edit) {
	t.Helper()
	for _, doc := range decodeAll(t, out) {
		obj, _ := doc.(map[string]any)
		if !isWorkloadKind(obj["kind"].(string)) {
			continue
		}
		data, err := sigsyaml.Marshal(obj)
		if err != nil {
			t.Fatal(err)
		}
		var d appsv1.Deployment // the pod template is at the same path in the three kinds
		if err := sigsyaml.Unmarshal(data, &d); err != nil {
			t.Fatal(err)
		}
		for _, c := range d.Spec.Template.Spec.Containers {
			if c.Name != e.workload.Container {
				continue
			}
			checkMeshlessContainer(t, c)
		}
	}
}

func checkMeshlessContainer(t *testing.T, c corev1.Container) {
	t.Helper()
	var hostIP int
	for _, env := range c.Env {
		if env.Name == HostIPEnv {
			hostIP++
			if env.ValueFrom == nil || env.ValueFrom.FieldRef == nil || env.ValueFrom.FieldRef.FieldPath != HostIPFieldPath || env.Value != "" {
				t.Errorf("container %s: %s = %+v, want fieldRef %s", c.Name, HostIPEnv, env, HostIPFieldPath)
			}
		}
	}
	if hostIP != 1 {
		t.Errorf("container %s sets %s %d times, want once", c.Name, HostIPEnv, hostIP)
	}
	if c.ReadinessProbe == nil {
		t.Errorf("container %s has no readiness probe", c.Name)
	} else if h := c.ReadinessProbe.ProbeHandler; (h.TCPSocket != nil) && (h.HTTPGet != nil || h.Exec != nil || h.GRPC != nil) {
		t.Errorf("container %s: a readiness probe with two handlers: %+v", c.Name, h)
	}
	if c.Lifecycle == nil || c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.Exec == nil ||
		!strings.Contains(strings.Join(c.Lifecycle.PreStop.Exec.Command, " "), "--mesh=none") {
		t.Errorf("container %s: preStop %+v, want meshdrain prestop --mesh=none", c.Name, c.Lifecycle)
	}
}

// TestMeshlessEditRefuses: a pod on the node's network, or with a HOST_IP of its own that is
// not the node's IP, is refused with the reason.
func TestMeshlessEditRefuses(t *testing.T) {
	base := `apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  template:
    spec:
%s      containers:
        - name: web
          image: web
          ports: [{containerPort: 8080}]
%s`
	for _, c := range []struct{ pod, container, want string }{
		{"      hostNetwork: true\n", "", "hostNetwork: true"},
		{"", "          env: [{name: HOST_IP, value: 10.0.0.1}]\n", "sets HOST_IP to something other than the node's IP"},
	} {
		m, err := ReadManifests(strings.NewReader(strings.ReplaceAll(strings.Replace(base, "%s", c.pod, 1), "%s", c.container)))
		if err != nil {
			t.Fatal(err)
		}
		w, err := m.Workload("", "")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := NewEdit(mustRecommend(t, meshlessScenario(mesh.None)), PatchOptions{Image: DefaultImage, Dir: "/meshdrain"}, w); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("NewEdit = %v, want %q", err, c.want)
		}
	}
}

// TestMeshlessReplanKeepsUserFlags: a re-plan keeps the user's own --port and extra
// --ignore-source, adds none twice, and removes what a pod without a sidecar cannot use.
func TestMeshlessReplanKeepsUserFlags(t *testing.T) {
	// The ports are the plan's own, derived again at each plan (Workload.MeshlessWatch keeps
	// the user's that the container still has): 9090 here, as the CLI would derive it.
	in := meshlessScenario(mesh.None)
	in.Ports = []int{9090}
	p := mustRecommend(t, in)
	old := []string{"--mesh=none", "--port=9090", "--ignore-source=$(HOST_IP)", "--ignore-source=10.0.0.0/8", "--grace-period=30s", "--app-drain=5s",
		"--quiet=1s", "--eds-lag-bound=35.5s", "--drain-at=end", "--log-file=/proc/1/fd/1"}
	m := p.mergePrestop(old)
	got := strings.Join(m.args, " ")
	want := "prestop --mesh=none --port=9090 --ignore-source=$(HOST_IP) --ignore-source=10.0.0.0/8 --grace-period=52s --app-drain=5s --quiet=1s --eds-lag-bound=35.5s --log-file=/proc/1/fd/1"
	if got != want {
		t.Errorf("merged preStop\n got %s\nwant %s", got, want)
	}
	changes := strings.Join(m.changes, "; ")
	for _, w := range []string{"--grace-period 30s → 52s", "removes --drain-at=end (no sidecar"} {
		if !strings.Contains(changes, w) {
			t.Errorf("changes %q lack %q", changes, w)
		}
	}
	// From a Linkerd preStop: the mesh and the admin port go.
	m = p.mergePrestop([]string{"--mesh=linkerd", "--admin=http://127.0.0.1:4191", "--grace-period=52s"})
	if got := strings.Join(m.args, " "); strings.Contains(got, "linkerd") || strings.Contains(got, "--admin") || !strings.Contains(got, "--mesh=none --port=9090") {
		t.Errorf("a meshless re-plan of a Linkerd preStop wrote %s", got)
	}
	// And back: an Istio plan removes --mesh=none.
	istio := mustRecommend(t, userScenario(Native))
	if got := strings.Join(istio.mergePrestop(strings.Fields(want)[1:]).args, " "); strings.Contains(got, "--mesh=none") {
		t.Errorf("an Istio re-plan kept --mesh=none: %s", got)
	}
}

// TestMeshlessWorkloadMesh: plan's own meshless preStop, and an ambient label, name the mesh.
func TestMeshlessWorkloadMesh(t *testing.T) {
	for _, c := range []struct {
		template string
		want     mesh.Mesh
	}{
		{"    metadata: {labels: {istio.io/dataplane-mode: ambient}}\n    spec: {containers: [{name: web, image: web}]}\n", Ambient},
		{"    spec: {containers: [{name: web, image: web, lifecycle: {preStop: {exec: {command: [/meshdrain/meshdrain, prestop, --mesh=none, --port=8080]}}}}]}\n", mesh.None},
		{"    spec: {containers: [{name: web, image: web}]}\n", ""},
	} {
		m, err := ReadManifests(strings.NewReader("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec:\n  template:\n" + c.template))
		if err != nil {
			t.Fatal(err)
		}
		w, err := m.Workload("", "")
		if err != nil {
			t.Fatal(err)
		}
		if got, why := w.Mesh(); got != c.want {
			t.Errorf("Mesh() = %q (%s), want %q", got, why, c.want)
		}
	}
}

// TestMeshlessPatch: without -f the patch sets HOST_IP but no probe (it cannot know whether
// the container has one), and says so.
func TestMeshlessPatch(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteYAML(&buf, mustRecommend(t, meshlessScenario(mesh.None)), PatchOptions{Container: "web", Image: DefaultImage, Dir: "/meshdrain"}); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	if !strings.Contains(out, "fieldPath: status.hostIP") || strings.Contains(out, "readinessProbe:") || !strings.Contains(out, "# No readinessProbe here") {
		t.Errorf("patch:\n%s", out)
	}
	var d appsv1.Deployment
	if err := sigsyaml.UnmarshalStrict([]byte(out), &d); err != nil {
		t.Fatal(err)
	}
}

// TestMeshlessChangesCheckThePod: after -f, the command that checks a rolled-out pod is the
// preStop's own with --validate (meshdrain check reads a sidecar, and there is none).
func TestMeshlessChangesCheckThePod(t *testing.T) {
	m, err := ReadManifests(strings.NewReader("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web, namespace: shop}\nspec:\n  template:\n    spec: {containers: [{name: web, image: web, ports: [{containerPort: 8080}]}]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	w, err := m.Workload("", "")
	if err != nil {
		t.Fatal(err)
	}
	p := mustRecommend(t, meshlessScenario(mesh.None))
	e, err := NewEdit(p, PatchOptions{Image: DefaultImage, Dir: "/meshdrain"}, w)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := WriteChanges(&buf, p, e); err != nil {
		t.Fatal(err)
	}
	// $(HOST_IP) quoted: the operator's shell must not run it, the pod's prestop reads it.
	want := "kubectl exec -n shop deployment/web -c web -- /meshdrain/meshdrain prestop --mesh=none --port=8080 '--ignore-source=$(HOST_IP)' " +
		"--grace-period=52s --app-drain=5s --quiet=1s --eds-lag-bound=35.5s --log-file=/proc/1/fd/1 --validate"
	if !strings.Contains(buf.String(), want) || strings.Contains(buf.String(), "meshdrain check") {
		t.Errorf("changes lack %q:\n%s", want, buf.String())
	}
}
