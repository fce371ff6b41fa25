package examples

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/meshdrain/meshdrain/pkg/operator/plan"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// The kustomize route of issue 20: the components in kustomize/meshdrain must turn a team's own
// workloads, whatever their app container is called and whatever else they hold, into pods
// meshdrain works in, changing only what the plan changes; where kustomize cannot merge a
// value the user set, the build must fail, never replace it.

// kustomizeComponent is the directory of a component under kustomize/meshdrain ("" for the
// component itself).
func kustomizeComponent(t *testing.T, sub string) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("kustomize", "meshdrain", sub))
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// writeOverlay writes an overlay of the given workload file and components into a new
// directory. kustomize refuses absolute component paths, so they are written relative to it.
func writeOverlay(t *testing.T, workload []byte, components ...string) string {
	t.Helper()
	dir := t.TempDir()
	var k strings.Builder
	k.WriteString("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - workload.yaml\ncomponents:\n")
	for _, c := range components {
		rel, err := filepath.Rel(dir, kustomizeComponent(t, c))
		if err != nil {
			t.Fatal(err)
		}
		k.WriteString("  - " + filepath.ToSlash(rel) + "\n")
	}
	for name, data := range map[string][]byte{"kustomization.yaml": []byte(k.String()), "workload.yaml": workload} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// kustomize runs `kubectl kustomize dir` for test t (a subtest's own, so that a failure
// stops that subtest), with kubectl reaching nothing but k's loopback server.
func (k *kubectlEnv) kustomize(t *testing.T, dir string) (stdout []byte, stderr string, err error) {
	t.Helper()
	cmd := exec.Command(k.bin, "kustomize", dir)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+filepath.Join(k.dir, "kubeconfig"), "HOME="+k.dir)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	return out.Bytes(), errOut.String(), err
}

// kustomizeBuild builds dir, which must succeed.
func (k *kubectlEnv) kustomizeBuild(t *testing.T, dir string) []byte {
	t.Helper()
	out, stderr, err := k.kustomize(t, dir)
	if err != nil {
		t.Fatalf("kubectl kustomize %s: %v\n%s", dir, err, stderr)
	}
	return out
}

// kustomizeFails builds dir, which must fail and print nothing, and returns kustomize's
// error.
func (k *kubectlEnv) kustomizeFails(t *testing.T, dir string) string {
	t.Helper()
	out, stderr, err := k.kustomize(t, dir)
	if err == nil {
		t.Fatalf("kubectl kustomize %s succeeded, want it to fail:\n%s", dir, out)
	}
	if len(out) > 0 {
		t.Errorf("kubectl kustomize %s failed but printed manifests:\n%s", dir, out)
	}
	return stderr
}

// kustomizeCases are three workloads unlike the examples, as a team has them before meshdrain
// (issue 20), each with the overlay it is built with (testdata/kustomize/<name>).
var kustomizeCases = []struct {
	name    string
	sidecar plan.Sidecar
	// stops names the annotation the overlay as written must stop the build on; byHand is
	// the change to the workload the component's comments then ask for, and thenUses the
	// components the overlay then lists ("" is kustomize/meshdrain itself).
	stops    string
	byHand   func(string) string
	thenUses []string
}{
	{
		// Spring Boot, app container "orders-api", preStop `sh -c "sleep 15"`, its own
		// statsInclusionPrefixes (cluster.outbound|), classic sidecar, grace 30s.
		name: "spring-sleep", sidecar: plan.Classic,
		stops: "sidecar.istio.io~1statsInclusionPrefixes",
		byHand: func(w string) string {
			return strings.Replace(w, `statsInclusionPrefixes: "cluster.outbound|"`,
				`statsInclusionPrefixes: "cluster.outbound|,`+plan.StatsInclusionPrefixes+`"`, 1)
		},
		thenUses: []string{"", "istio-hold", "istio-classic"},
	},
	// App "checkout" and a fluent-bit log shipper, an init container of its own, postStart on
	// the app, native sidecars, an istio-proxy override of its own (resources).
	{name: "log-shipper", sidecar: plan.Native},
	// A commented file with a ConfigMap, the Deployment (container "api", no annotations, no
	// lifecycle, no volumes) and a Service; classic sidecar.
	{name: "multi-doc", sidecar: plan.Classic},
}

// TestKustomizeUserWorkloads builds each team's overlay with `kubectl kustomize`, decodes the
// result strictly and checks that only the planned fields changed and nothing broke.
func TestKustomizeUserWorkloads(t *testing.T) {
	k := newKubectl(t)
	for _, c := range kustomizeCases {
		t.Run(c.name, func(t *testing.T) {
			dir, err := filepath.Abs(filepath.Join("testdata", "kustomize", c.name))
			if err != nil {
				t.Fatal(err)
			}
			workload, err := os.ReadFile(filepath.Join(dir, "workload.yaml"))
			if err != nil {
				t.Fatal(err)
			}
			if c.stops != "" {
				msg := k.kustomizeFails(t, dir)
				if !strings.Contains(msg, c.stops) {
					t.Fatalf("the build failed, but not on %s:\n%s", c.stops, msg)
				}
				fixed := c.byHand(string(workload))
				if fixed == string(workload) {
					t.Fatal("the change by hand changed nothing")
				}
				workload = []byte(fixed)
				dir = writeOverlay(t, workload, c.thenUses...)
			}
			before := decodeObjects(t, "workload.yaml", workload)
			after := decodeObjects(t, "kubectl kustomize", k.kustomizeBuild(t, dir))
			checkKustomized(t, c.sidecar, before, after)
		})
	}
}

// TestKustomizeFailsLoudly: a pod that sets proxy.istio.io/config itself (the example
// overlay's, holdApplicationUntilProxyStarts) stops the build with either drain component,
// rather than losing the team's settings.
func TestKustomizeFailsLoudly(t *testing.T) {
	k := newKubectl(t)
	workload, err := os.ReadFile(filepath.Join("kustomize", "overlay", "deployment.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{"istio-classic", "istio-native"} {
		t.Run(c, func(t *testing.T) {
			msg := k.kustomizeFails(t, writeOverlay(t, workload, "", "istio-hold", "istio-stats", c))
			if !strings.Contains(msg, "proxy.istio.io~1config") || !strings.Contains(msg, c) {
				t.Errorf("the build failed, but the error names neither the annotation nor the component:\n%s", msg)
			}
		})
	}
}

// statefulSetAndDaemonSet: the other two kinds the component applies to, each with its app
// container under yet another name.
const statefulSetAndDaemonSet = `apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: ledger
spec:
  serviceName: ledger
  selector:
    matchLabels: {app: ledger}
  template:
    metadata:
      labels: {app: ledger}
    spec:
      containers:
        - name: ledger-server
          image: registry.example.com/ledger:3.0.0
          lifecycle:
            preStop:
              sleep:
                seconds: 20
---
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: edge
spec:
  selector:
    matchLabels: {app: edge}
  template:
    metadata:
      labels: {app: edge}
      annotations:
        team: edge
    spec:
      containers:
        - name: edge-proxy
          image: registry.example.com/edge:1.4.0
          lifecycle:
            preStop:
              httpGet:
                path: /quiesce
                port: 9901
`

// TestKustomizeComponentKinds: a replacement whose target kind does not match is silently a
// no-op, so each kind the component names is built and checked.
func TestKustomizeComponentKinds(t *testing.T) {
	k := newKubectl(t)
	dir := writeOverlay(t, []byte(statefulSetAndDaemonSet), "", "istio-hold", "istio-stats", "istio-classic")
	before := decodeObjects(t, "workload.yaml", []byte(statefulSetAndDaemonSet))
	after := decodeObjects(t, "kubectl kustomize", k.kustomizeBuild(t, dir))
	checkKustomized(t, plan.Classic, before, after)
}

// TestKustomizeChecksCatchBrokenResults: the checks themselves find what issue 20 saw (an
// extra container without an image, the old sleep kept, a value of the team's lost) and any
// other change, or the tests above prove nothing.
func TestKustomizeChecksCatchBrokenResults(t *testing.T) {
	k := newKubectl(t)
	dir, err := filepath.Abs(filepath.Join("testdata", "kustomize", "log-shipper"))
	if err != nil {
		t.Fatal(err)
	}
	workload, err := os.ReadFile(filepath.Join(dir, "workload.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	before := decodeObjects(t, "workload.yaml", workload)
	built := k.kustomizeBuild(t, dir)
	if found := kustomizeProblems(plan.Native, before, decodeObjects(t, "kubectl kustomize", built)); len(found) > 0 {
		t.Fatalf("the unbroken result has problems: %v", found)
	}
	breaks := map[string]func(tpl *corev1.PodTemplateSpec){
		"container without an image": func(tpl *corev1.PodTemplateSpec) {
			tpl.Spec.Containers = append(tpl.Spec.Containers, corev1.Container{Name: "app"})
		},
		"old sleep kept": func(tpl *corev1.PodTemplateSpec) {
			tpl.Spec.Containers[0].Lifecycle.PreStop.Sleep = &corev1.SleepAction{Seconds: 15}
		},
		"annotation value replaced": func(tpl *corev1.PodTemplateSpec) {
			tpl.Annotations["kubectl.kubernetes.io/default-container"] = "app"
		},
		"log shipper changed": func(tpl *corev1.PodTemplateSpec) {
			tpl.Spec.Containers[1].Lifecycle = nil
		},
		"user's init container changed": func(tpl *corev1.PodTemplateSpec) {
			tpl.Spec.InitContainers[0].Args = nil
		},
		"app's postStart lost": func(tpl *corev1.PodTemplateSpec) {
			tpl.Spec.Containers[0].Lifecycle.PostStart = nil
		},
		"no proxy config": func(tpl *corev1.PodTemplateSpec) {
			delete(tpl.Annotations, plan.ProxyConfigAnnotation)
		},
		"unplanned field": func(tpl *corev1.PodTemplateSpec) {
			tpl.Spec.ServiceAccountName = "default"
		},
	}
	for name, breakIt := range breaks {
		t.Run(name, func(t *testing.T) {
			after := decodeObjects(t, "kubectl kustomize", built)
			breakIt(podTemplateOf(after["Deployment//checkout"]))
			if found := kustomizeProblems(plan.Native, before, after); len(found) == 0 {
				t.Error("the checks found nothing wrong")
			}
		})
	}
}

// kustomizeProblems runs checkKustomized and returns what it found wrong.
func kustomizeProblems(sc plan.Sidecar, before, after map[string]any) (found []string) {
	r := &recorder{}
	defer func() {
		if v := recover(); v != nil && v != errStopCheck {
			panic(v)
		}
		found = r.problems
	}()
	checkKustomized(r, sc, before, after)
	return nil
}

// decodeObjects splits a YAML stream into documents and decodes each strictly into its API
// type, keyed by kind/namespace/name.
func decodeObjects(t reporter, what string, data []byte) map[string]any {
	t.Helper()
	objs := map[string]any{}
	for i, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(data), -1) {
		if strings.TrimSpace(stripComments(doc)) == "" {
			continue
		}
		var meta struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name, Namespace string
			} `json:"metadata"`
		}
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			t.Fatalf("%s document %d: %v", what, i, err)
		}
		var obj any
		switch meta.Kind {
		case "Deployment":
			obj = &appsv1.Deployment{}
		case "StatefulSet":
			obj = &appsv1.StatefulSet{}
		case "DaemonSet":
			obj = &appsv1.DaemonSet{}
		case "ConfigMap":
			obj = &corev1.ConfigMap{}
		case "Service":
			obj = &corev1.Service{}
		default:
			t.Fatalf("%s document %d: kind %q", what, i, meta.Kind)
		}
		if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
			t.Fatalf("%s document %d: strict decoding: %v", what, i, err)
		}
		key := meta.Kind + "/" + meta.Metadata.Namespace + "/" + meta.Metadata.Name
		if _, dup := objs[key]; dup {
			t.Fatalf("%s: %s twice", what, key)
		}
		objs[key] = obj
	}
	return objs
}

// podTemplateOf is a workload's pod template, nil for other objects.
func podTemplateOf(obj any) *corev1.PodTemplateSpec {
	switch o := obj.(type) {
	case *appsv1.Deployment:
		return &o.Spec.Template
	case *appsv1.StatefulSet:
		return &o.Spec.Template
	case *appsv1.DaemonSet:
		return &o.Spec.Template
	}
	return nil
}

// checkKustomized compares a kustomize result with its input: the same objects; in each
// workload the planned values, the team's containers and annotations kept; and, once the
// planned fields are taken out of both, every object identical.
func checkKustomized(t reporter, sc plan.Sidecar, before, after map[string]any) {
	t.Helper()
	for key := range after {
		if _, ok := before[key]; !ok {
			t.Errorf("%s: in the result, not in the input", key)
		}
	}
	workloads := 0
	for key, b := range before {
		a, ok := after[key]
		if !ok {
			t.Errorf("%s: lost", key)
			continue
		}
		if tpl := podTemplateOf(a); tpl != nil {
			workloads++
			added := checkPlannedPod(t, key, sc, *podTemplateOf(b), *tpl)
			_, hadProxy := proxyOverride(podTemplateOf(b).Spec)
			b, a = deepCopy(t, b), deepCopy(t, a)
			stripPlanned(podTemplateOf(b), nil, false)
			stripPlanned(podTemplateOf(a), added, !hadProxy)
		}
		wantText, err := yaml.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		gotText, err := yaml.Marshal(a)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(wantText, gotText) {
			t.Errorf("%s: changed beyond the plan (- input, + result, planned fields taken out):\n%s", key, lineDiff(string(wantText), string(gotText)))
		}
	}
	if workloads == 0 {
		t.Fatal("no workload in the input")
	}
}

// checkPlannedPod checks one workload's pod against the plan for sc and returns the
// annotations the components added.
func checkPlannedPod(t reporter, key string, sc plan.Sidecar, before, after corev1.PodTemplateSpec) (added []string) {
	t.Helper()
	p := mustRecommend(t, userScenario(sc))
	for _, c := range append(append([]corev1.Container{}, after.Spec.InitContainers...), after.Spec.Containers...) {
		if c.Image == "" {
			t.Errorf("%s: container %q has no image (the API server rejects the pod)", key, c.Name)
		}
	}
	// The input's containers, and istio-proxy's override (regime b) where it had none.
	wantNames := containerNames(before.Spec.Containers)
	beforeProxy, hadProxy := proxyOverride(before.Spec)
	if !hadProxy {
		wantNames = append(wantNames, plan.ProxyContainerName)
	}
	if got := containerNames(after.Spec.Containers); !reflect.DeepEqual(got, wantNames) {
		t.Errorf("%s: containers %v, want %v (the input's, and istio-proxy's override)", key, got, wantNames)
	}
	if proxy, ok := proxyOverride(after.Spec); ok && hadProxy {
		// The team's override keeps its fields; only the image, the mount and the preStop are set.
		kept := *proxy.DeepCopy()
		kept.Image, kept.Lifecycle = beforeProxy.Image, beforeProxy.Lifecycle
		kept.VolumeMounts = without(kept.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == plan.VolumeName })
		if !reflect.DeepEqual(kept, beforeProxy) {
			t.Errorf("%s: the input's istio-proxy override changed beyond image, mount and preStop:\n%+v\nwas\n%+v", key, kept, beforeProxy)
		}
	}
	if got, want := containerNames(after.Spec.InitContainers), append(containerNames(before.Spec.InitContainers), plan.InitContainerName); !reflect.DeepEqual(got, want) {
		t.Errorf("%s: init containers %v, want %v (the input's and meshdrain's)", key, got, want)
	}
	if len(after.Spec.Containers) == 0 || len(before.Spec.Containers) == 0 {
		t.Fatalf("%s: no containers", key)
	}

	// The app container (the first) runs meshdrain's preStop, and only that.
	app := after.Spec.Containers[0]
	want := append([]string{"/meshdrain/meshdrain"}, p.PrestopArgs()...)
	if h := app.Lifecycle; h == nil || h.PreStop == nil || h.PreStop.Exec == nil || !reflect.DeepEqual(h.PreStop.Exec.Command, want) {
		t.Errorf("%s: container %s's preStop is not meshdrain's %q: %+v", key, app.Name, want, app.Lifecycle)
	} else if h.PreStop.Sleep != nil || h.PreStop.HTTPGet != nil || h.PreStop.TCPSocket != nil {
		t.Errorf("%s: container %s's preStop keeps its old handler besides meshdrain's: %+v", key, app.Name, h.PreStop)
	}
	for i, c := range after.Spec.Containers[1:] {
		if c.Name != plan.ProxyContainerName && i+1 < len(before.Spec.Containers) && !reflect.DeepEqual(c, before.Spec.Containers[i+1]) {
			t.Errorf("%s: container %s is not the app container, and changed", key, c.Name)
		}
	}

	// Every annotation of the team's keeps its value; the components add the plan's where
	// the pod had none.
	for k, v := range before.Annotations {
		if after.Annotations[k] != v {
			t.Errorf("%s: annotation %s is %q, the input's was %q", key, k, after.Annotations[k], v)
		}
	}
	for _, a := range p.Annotations() {
		if _, had := before.Annotations[a.Key]; had || a.Key == plan.NativeSidecarAnnotation {
			continue // the team's own, or the choice of sidecar, which no component makes
		}
		if got := after.Annotations[a.Key]; got != a.Value {
			t.Errorf("%s: annotation %s is %q, the plan's is %q", key, a.Key, got, a.Value)
		}
		added = append(added, a.Key)
	}

	if g := after.Spec.TerminationGracePeriodSeconds; g == nil || *g != int64(p.GracePeriod.Seconds()) {
		t.Errorf("%s: terminationGracePeriodSeconds %v, the plan's is %s", key, g, p.GracePeriod)
	}
	checkPodTemplate(t, "istio-"+string(sc), after)
	checkImage(t, after.Spec)
	return added
}

func containerNames(cs []corev1.Container) []string {
	names := []string{}
	for _, c := range cs {
		names = append(names, c.Name)
	}
	return names
}

// stripPlanned takes out of a pod template what the meshdrain components set: the grace
// period, meshdrain's volume and init container, the app container's mount and preStop,
// istio-proxy's override (the whole container where the components added it, else its
// image, mount and preStop), and the annotations they added.
func stripPlanned(tpl *corev1.PodTemplateSpec, added []string, proxyAdded bool) {
	spec := &tpl.Spec
	if proxyAdded {
		spec.Containers = without(spec.Containers, func(c corev1.Container) bool { return c.Name == plan.ProxyContainerName })
	}
	for i := range spec.Containers {
		if c := &spec.Containers[i]; c.Name == plan.ProxyContainerName {
			c.Image = ""
			c.VolumeMounts = without(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == plan.VolumeName })
			if c.Lifecycle != nil {
				c.Lifecycle.PreStop = nil
				if reflect.DeepEqual(*c.Lifecycle, corev1.Lifecycle{}) {
					c.Lifecycle = nil
				}
			}
		}
	}
	spec.TerminationGracePeriodSeconds = nil
	spec.InitContainers = without(spec.InitContainers, func(c corev1.Container) bool { return c.Name == plan.InitContainerName })
	spec.Volumes = without(spec.Volumes, func(v corev1.Volume) bool { return v.Name == plan.VolumeName })
	if len(spec.Containers) > 0 {
		app := &spec.Containers[0]
		app.VolumeMounts = without(app.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == plan.VolumeName })
		if app.Lifecycle != nil {
			app.Lifecycle.PreStop = nil
			if reflect.DeepEqual(*app.Lifecycle, corev1.Lifecycle{}) {
				app.Lifecycle = nil
			}
		}
	}
	for _, k := range added {
		delete(tpl.Annotations, k)
	}
	if len(tpl.Annotations) == 0 {
		tpl.Annotations = nil
	}
}

// without returns list without the items drop matches, nil when none is left.
func without[T any](list []T, drop func(T) bool) []T {
	var kept []T
	for _, item := range list {
		if !drop(item) {
			kept = append(kept, item)
		}
	}
	return kept
}

// deepCopy copies a decoded object, so that taking the planned fields out leaves it as it was.
func deepCopy(t reporter, obj any) any {
	t.Helper()
	switch o := obj.(type) {
	case *appsv1.Deployment:
		return o.DeepCopy()
	case *appsv1.StatefulSet:
		return o.DeepCopy()
	case *appsv1.DaemonSet:
		return o.DeepCopy()
	}
	t.Fatalf("no copy for %T", obj)
	return nil
}

// lineDiff shows which lines of a and b differ: a longest common subsequence of lines, the
// rest marked - (only in a) and + (only in b).
func lineDiff(a, b string) string {
	x, y := strings.Split(a, "\n"), strings.Split(b, "\n")
	lcs := make([][]int, len(x)+1)
	for i := range lcs {
		lcs[i] = make([]int, len(y)+1)
	}
	for i := len(x) - 1; i >= 0; i-- {
		for j := len(y) - 1; j >= 0; j-- {
			if x[i] == y[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	var out strings.Builder
	i, j := 0, 0
	for i < len(x) || j < len(y) {
		switch {
		case i < len(x) && j < len(y) && x[i] == y[j]:
			i, j = i+1, j+1
		case j < len(y) && (i == len(x) || lcs[i][j+1] >= lcs[i+1][j]):
			out.WriteString("+ " + y[j] + "\n")
			j++
		default:
			out.WriteString("- " + x[i] + "\n")
			i++
		}
	}
	return out.String()
}
