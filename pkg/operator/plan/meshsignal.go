package plan

import (
	"fmt"
	"strings"

	"github.com/meshdrain/meshdrain/pkg/mesh"
)

// What a pod template says of its mesh. A plan written for the wrong mesh is worse than none:
// an istio-proxy override (image: auto) in a pod that no injector fills is pulled as the image
// "auto" and the pod never starts (docs/facts.md §8), and a sidecar preStop in a pod without
// a sidecar ends at once as a silent sleep. So plan decides the mesh from the manifest, or
// from --mesh, before it writes anything, and refuses to guess.

// Injection switches, as Istio and Linkerd read them on a pod.
const (
	// IstioInjectKey is Istio's per-pod switch, as a label (which Istio reads first) or an
	// annotation: "false" makes its injector skip the pod, whatever the namespace says.
	IstioInjectKey = "sidecar.istio.io/inject"
	// IstioRevLabel names the control plane revision that injects the pod.
	IstioRevLabel = "istio.io/rev"
	// linkerdInjectDisabled is linkerd.io/inject's value that makes Linkerd's injector skip
	// the pod.
	linkerdInjectDisabled = "disabled"
)

// meshSignals are what one workload's template says: the reasons it names each mesh, and the
// reasons an injector skips it.
type meshSignals struct {
	istio, linkerd, ambient, none string
	// istioSkips and linkerdSkips say why that injector would leave the pod alone ("" when it
	// would not).
	istioSkips, linkerdSkips string
}

// signals reads the template's labels, annotations, containers and hostNetwork.
func (w *Workload) signals() meshSignals {
	var s meshSignals
	if w.HostNetwork {
		s.istioSkips = "hostNetwork: true (no injector injects a pod on the node's network)"
		s.linkerdSkips = s.istioSkips
		s.none = "hostNetwork: true: no injector injects a pod on the node's network"
	}
	// Istio reads the label before the annotation.
	inject, injectWhere := w.Labels[IstioInjectKey], "label"
	if _, ok := w.Labels[IstioInjectKey]; !ok {
		inject, injectWhere = w.Annotations[IstioInjectKey], "annotation"
	}
	if strings.EqualFold(inject, "false") {
		s.istioSkips = fmt.Sprintf("%s %s: \"false\" (Istio's injector skips the pod)", injectWhere, IstioInjectKey)
		if s.none == "" {
			s.none = s.istioSkips
		}
	}
	if strings.EqualFold(w.Annotations[LinkerdInjectAnnotation], linkerdInjectDisabled) && s.linkerdSkips == "" {
		s.linkerdSkips = fmt.Sprintf("annotation %s: %s (Linkerd's injector skips the pod)", LinkerdInjectAnnotation, linkerdInjectDisabled)
	}
	for _, key := range sortedKeys(w.Annotations) {
		switch {
		case key == LinkerdInjectAnnotation && strings.EqualFold(w.Annotations[key], linkerdInjectDisabled):
		case s.linkerd == "" && (key == LinkerdInjectAnnotation || strings.HasPrefix(key, "config.linkerd.io/") ||
			strings.HasPrefix(key, "config.alpha.linkerd.io/") || strings.HasPrefix(key, "config.beta.linkerd.io/")):
			s.linkerd = "annotation " + key
		case key == IstioInjectKey && strings.EqualFold(w.Annotations[key], "false"):
		case s.istio == "" && (strings.HasPrefix(key, "sidecar.istio.io/") || strings.HasPrefix(key, "proxy.istio.io/")):
			s.istio = "annotation " + key
		}
	}
	for _, key := range []string{IstioInjectKey, IstioRevLabel} {
		if v, ok := w.Labels[key]; ok && s.istio == "" && !(key == IstioInjectKey && strings.EqualFold(v, "false")) {
			s.istio = fmt.Sprintf("label %s: %s", key, v)
		}
	}
	if m, _ := w.PrestopFlag("mesh"); m == string(mesh.Linkerd) && s.linkerd == "" {
		// plan's own preStop for a native Linkerd sidecar, which needs no annotation.
		s.linkerd = "the preStop's --mesh=linkerd"
	}
	for _, c := range w.Containers {
		switch {
		case c == "linkerd-proxy" && s.linkerd == "":
			s.linkerd = "container linkerd-proxy"
		case c == ProxyContainerName && s.istio == "":
			s.istio = "container " + ProxyContainerName
		}
	}
	if w.Labels[AmbientModeLabel] == AmbientModeValue {
		s.ambient = "label " + AmbientModeLabel + ": " + AmbientModeValue
	}
	if m, _ := w.PrestopFlag("mesh"); m == string(mesh.None) && s.none == "" {
		s.none = "the preStop's --mesh=none"
	}
	return s
}

// Mesh is the mesh the pod template names, and why; "" when it names none, or both Istio and
// Linkerd. An injector that skips the pod outweighs its other signals: such a pod has no
// sidecar, whatever else its template says. Injection asked for on the namespace does not show
// in a workload: DecideMesh then asks for --mesh.
func (w *Workload) Mesh() (mesh.Mesh, string) {
	s := w.signals()
	istio, linkerd := s.istio, s.linkerd
	if s.istioSkips != "" {
		istio = ""
	}
	if s.linkerdSkips != "" {
		linkerd = ""
	}
	switch {
	case istio != "" && linkerd != "":
		return "", ""
	case istio != "":
		return mesh.Istio, istio
	case linkerd != "":
		return mesh.Linkerd, linkerd
	case s.ambient != "" && !w.HostNetwork:
		return Ambient, s.ambient
	case s.none != "":
		return mesh.None, s.none
	}
	return "", ""
}

// DecideMesh is the mesh plan writes for: given (--mesh, "" when not given) and the workload
// read with -f (nil without). A given mesh whose injector skips the pod is refused, since
// the sidecar it plans for will not be there; with no --mesh, the workload must name one.
func DecideMesh(given mesh.Mesh, w *Workload) (mesh.Mesh, string, error) {
	if w == nil {
		if given == "" {
			return mesh.Istio, "no --mesh and no -f: Istio, plan's default without a manifest", nil
		}
		return given, "--mesh " + string(given), nil
	}
	id := w.Kind + "/" + w.Name
	s := w.signals()
	if given != "" {
		skips := map[mesh.Mesh]string{mesh.Istio: s.istioSkips, mesh.Linkerd: s.linkerdSkips}[given]
		if skips != "" {
			return "", "", fmt.Errorf("--mesh %s: %s says %s, so the pod gets no %s sidecar for the preStop to read "+
				"(and an %s override would be pulled as the image %q and never start): plan it with --mesh none",
				given, id, skips, given, ProxyContainerName, ProxyImageAuto)
		}
		return given, "--mesh " + string(given), nil
	}
	if m, why := w.Mesh(); m != "" {
		return m, why, nil
	}
	if s.istio != "" && s.linkerd != "" {
		return "", "", fmt.Errorf("%s names both Istio (%s) and Linkerd (%s): pass --mesh istio or --mesh linkerd", id, s.istio, s.linkerd)
	}
	return "", "", fmt.Errorf("%s names no mesh: no Istio or Linkerd label, annotation or proxy container, no hostNetwork; "+
		"injection is often asked for on the namespace, which a workload does not show. Pass --mesh %s. "+
		"To see what namespace %s asks for: kubectl get namespace %s --show-labels "+
		"(istio-injection=enabled or istio.io/rev: istio; istio.io/dataplane-mode=ambient: ambient) and "+
		"kubectl get namespace %s -o jsonpath='{.metadata.annotations.linkerd\\.io/inject}' (enabled: linkerd); none of them: --mesh none",
		id, strings.Join(mesh.Names(Meshes...), "|"), w.namespaceOr("NS"), w.namespaceOr("NS"), w.namespaceOr("NS"))
}

// namespaceOr is the workload's namespace, or placeholder when the manifest leaves it to
// kubectl's context.
func (w *Workload) namespaceOr(placeholder string) string {
	if w.Namespace != "" {
		return w.Namespace
	}
	return placeholder
}
