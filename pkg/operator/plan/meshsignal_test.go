package plan

import (
	"strings"
	"testing"

	"github.com/meshdrain/meshdrain/pkg/mesh"
)

// TestDecideMesh: the mesh comes from --mesh or the manifest, never from a default, and a
// mesh whose injector skips the pod is refused: its sidecar would not be there, and an
// istio-proxy override would be pulled as the image "auto".
func TestDecideMesh(t *testing.T) {
	for _, c := range []struct {
		name     string
		given    mesh.Mesh
		template string
		want     mesh.Mesh
		err      string
	}{
		{"no signal", "", "{}", "", "names no mesh"},
		{"no signal, flag", mesh.None, "{}", mesh.None, ""},
		{"istio annotation", "", "{annotations: {proxy.istio.io/config: '{}'}}", mesh.Istio, ""},
		{"istio rev label", "", "{labels: {istio.io/rev: canary}}", mesh.Istio, ""},
		{"istio inject label true", "", "{labels: {sidecar.istio.io/inject: \"true\"}}", mesh.Istio, ""},
		{"inject false label", "", "{labels: {sidecar.istio.io/inject: \"false\"}}", mesh.None, ""},
		{"inject false annotation with other istio keys", "", "{annotations: {sidecar.istio.io/inject: \"false\", sidecar.istio.io/statsInclusionPrefixes: x}}", mesh.None, ""},
		{"label outweighs annotation", "", "{labels: {sidecar.istio.io/inject: \"true\"}, annotations: {sidecar.istio.io/inject: \"false\"}}", mesh.Istio, ""},
		{"istio given, inject false", mesh.Istio, "{labels: {sidecar.istio.io/inject: \"false\"}}", "", "Istio's injector skips the pod"},
		{"linkerd", "", "{annotations: {linkerd.io/inject: enabled}}", mesh.Linkerd, ""},
		{"linkerd disabled", "", "{annotations: {linkerd.io/inject: disabled}}", "", "names no mesh"},
		{"linkerd given, disabled", mesh.Linkerd, "{annotations: {linkerd.io/inject: disabled}}", "", "Linkerd's injector skips"},
		{"ambient", "", "{labels: {istio.io/dataplane-mode: ambient}}", Ambient, ""},
		{"both", "", "{annotations: {linkerd.io/inject: enabled, proxy.istio.io/config: '{}'}}", "", "both Istio"},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := readTestWorkload(t, "    metadata: "+c.template+"\n    spec: {containers: [{name: web, image: web}]}\n")
			got, why, err := DecideMesh(c.given, w)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("DecideMesh = %q, %v; want an error with %q", got, err, c.err)
				}
				return
			}
			if err != nil || got != c.want || why == "" {
				t.Errorf("DecideMesh = %q (%s), %v; want %q", got, why, err, c.want)
			}
		})
	}
	// The manifest's message names every mesh and how to see the namespace's.
	_, _, err := DecideMesh("", readTestWorkload(t, "    spec: {containers: [{name: web, image: web}]}\n"))
	for _, want := range []string{"--mesh istio|linkerd|none|ambient", "kubectl get namespace NS --show-labels", "linkerd\\.io/inject"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("no-signal error lacks %q: %v", want, err)
		}
	}
	// hostNetwork: no injector injects the pod.
	hn := readTestWorkload(t, "    spec: {hostNetwork: true, containers: [{name: web, image: web}]}\n")
	if m, _, err := DecideMesh("", hn); m != mesh.None || err != nil {
		t.Errorf("hostNetwork: %q, %v; want none", m, err)
	}
	if _, _, err := DecideMesh(mesh.Istio, hn); err == nil || !strings.Contains(err.Error(), "hostNetwork") {
		t.Errorf("--mesh istio on hostNetwork: %v; want refused", err)
	}
}

// TestNoAutoImageOutsideIstio: an istio-proxy override left in a pod planned without Istio
// is refused, since its image "auto" would never be pulled.
func TestNoAutoImageOutsideIstio(t *testing.T) {
	w := readTestWorkload(t, "    metadata: {labels: {sidecar.istio.io/inject: \"false\"}}\n    spec: {containers: [{name: web, image: web, ports: [{containerPort: 8080}]}, {name: istio-proxy, image: auto}]}\n")
	in := meshlessScenario(mesh.None)
	p := mustRecommend(t, in)
	if _, err := NewEdit(p, PatchOptions{Image: DefaultImage, Dir: "/meshdrain"}, w); err == nil || !strings.Contains(err.Error(), "never start") {
		t.Errorf("NewEdit = %v; want a refusal of the image auto", err)
	}
}

func readTestWorkload(t *testing.T, template string) *Workload {
	t.Helper()
	m, err := ReadManifests(strings.NewReader("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec:\n  template:\n" + template))
	if err != nil {
		t.Fatal(err)
	}
	w, err := m.Workload("", "web")
	if err != nil {
		t.Fatal(err)
	}
	return w
}
