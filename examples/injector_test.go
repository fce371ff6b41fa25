package examples

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meshdrain/meshdrain/pkg/operator/plan"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// Issue 26, item 8: what plan writes is applied the way Istio's injector applies a pod's
// istio-proxy override, onto a pinned excerpt of the sidecar it injects
// (testdata/istio-injected), in both sidecar modes, and the proxy that results must be sound:
// one istio-proxy, one preStop handler type (meshdrain hold's exec), the injector's image, and
// hold on a path a read-only mount of the install volume gives it.

// injectionModes are the sidecar modes one manifest must be right in: the cluster picks the
// mode (Istio >= 1.27 per node), not the manifest.
var injectionModes = []string{"classic", "native"}

// injectLikeIstio returns the pod spec Istio's injector makes of tpl in mode: the injected
// containers of the fixture added, and the pod's own istio-proxy (the override) merged onto
// the injected one with a strategic merge (kubectl patch --local --type strategic), its image
// "auto" cleared first (pkg/kube/inject/webhook.go, reapplyOverwrittenContainers). In native
// mode the override is taken from containers and merged into the istio-proxy of
// initContainers (pkg/kube/inject/inject.go, RunTemplate). Only the override in containers
// is applied: a classic injection re-applies only the containers it injects there, so an
// istio-proxy the pod lists in initContainers stays as it is, a second proxy with image auto.
func injectLikeIstio(t *testing.T, k *kubectlEnv, tpl corev1.PodTemplateSpec, mode string) corev1.PodSpec {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "istio-injected", mode+".yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var injected corev1.Pod
	if err := yaml.UnmarshalStrict(data, &injected); err != nil {
		t.Fatalf("fixture %s: %v", mode, err)
	}
	spec := *tpl.Spec.DeepCopy()
	override, hasOverride := proxyOverride(spec)
	spec.Containers = without(spec.Containers, func(c corev1.Container) bool { return c.Name == plan.ProxyContainerName })
	// The injected init containers come first (istio-init, and the native istio-proxy), the
	// injected classic proxy after the app's containers.
	spec.InitContainers = append(append([]corev1.Container{}, injected.Spec.InitContainers...), spec.InitContainers...)
	spec.Containers = append(spec.Containers, injected.Spec.Containers...)
	pod := corev1.Pod{TypeMeta: injected.TypeMeta, ObjectMeta: injected.ObjectMeta, Spec: spec}
	if !hasOverride {
		return pod.Spec
	}
	if override.Image == plan.ProxyImageAuto {
		override.Image = ""
	}
	list := "containers"
	if mode == "native" {
		list = "initContainers"
	}
	overlay, err := yaml.Marshal(map[string]any{"spec": map[string]any{list: []corev1.Container{override}}})
	if err != nil {
		t.Fatal(err)
	}
	podYAML, err := yaml.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	var merged corev1.Pod
	out := k.patchLocal(podYAML, overlay)
	if err := yaml.UnmarshalStrict(out, &merged); err != nil {
		t.Fatalf("the merged pod: %v\n%s", err, out)
	}
	return merged.Spec
}

// proxyProblems checks the proxy of an injected pod, as the injector left it in mode.
func proxyProblems(spec corev1.PodSpec, mode string, injectedImage string) []string {
	var problems []string
	var proxies []corev1.Container
	for _, c := range spec.InitContainers {
		if c.Name == plan.ProxyContainerName {
			proxies = append(proxies, c)
			if mode == "classic" {
				problems = append(problems, "an istio-proxy in initContainers, which a classic injection leaves as it is")
			}
		}
	}
	for _, c := range spec.Containers {
		if c.Name == plan.ProxyContainerName {
			proxies = append(proxies, c)
			if mode == "native" {
				problems = append(problems, "an istio-proxy in containers besides the native one")
			}
		}
	}
	if len(proxies) != 1 {
		return append(problems, fmt.Sprintf("%d istio-proxy containers, want one", len(proxies)))
	}
	proxy := proxies[0]
	if proxy.Image != injectedImage {
		problems = append(problems, fmt.Sprintf("image %q, want the injector's %q", proxy.Image, injectedImage))
	}
	if mode == "native" && (proxy.RestartPolicy == nil || *proxy.RestartPolicy != corev1.ContainerRestartPolicyAlways) {
		problems = append(problems, "the native proxy lost restartPolicy: Always")
	}
	if proxy.ReadinessProbe == nil || proxy.SecurityContext == nil || proxy.SecurityContext.RunAsUser == nil {
		problems = append(problems, "the injected probe or security context is gone")
	}
	h := proxy.Lifecycle
	if h == nil || h.PreStop == nil {
		return append(problems, "no preStop: Istio's own drain is not deferred")
	}
	handlers := 0
	for _, set := range []bool{h.PreStop.Exec != nil, h.PreStop.HTTPGet != nil, h.PreStop.TCPSocket != nil, h.PreStop.Sleep != nil} {
		if set {
			handlers++
		}
	}
	if handlers != 1 {
		problems = append(problems, fmt.Sprintf("preStop has %d handler types, the API server accepts one (istio/istio#51865): %+v", handlers, h.PreStop))
	}
	if h.PreStop.Exec == nil {
		return append(problems, "preStop is no exec")
	}
	cmd := h.PreStop.Exec.Command
	if len(cmd) < 2 || filepath.Base(cmd[0]) != "meshdrain" || cmd[1] != "hold" {
		return append(problems, fmt.Sprintf("preStop runs %q, not meshdrain hold", cmd))
	}
	// hold runs from the volume the install init container fills, through a mount of the proxy.
	r := &recorder{}
	volume, rel := func() (v, rel string) {
		defer func() {
			if p := recover(); p != nil && p != errStopCheck {
				panic(p)
			}
		}()
		return installedBinary(r, spec)
	}()
	if len(r.problems) > 0 {
		return append(problems, r.problems...)
	}
	mounted := false
	for _, m := range proxy.VolumeMounts {
		if m.Name == volume && filepath.Join(m.MountPath, rel) == cmd[0] {
			mounted = true
			if !m.ReadOnly {
				problems = append(problems, fmt.Sprintf("the proxy mounts %s writable", volume))
			}
		}
	}
	if !mounted {
		problems = append(problems, fmt.Sprintf("hold runs %s, on no mount of the %s volume (%s) in the proxy", cmd[0], volume, rel))
	}
	return problems
}

// injectedImage is the proxy image of the fixture for mode.
func injectedImage(t *testing.T, mode string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "istio-injected", mode+".yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var pod corev1.Pod
	if err := yaml.Unmarshal(data, &pod); err != nil {
		t.Fatal(err)
	}
	for _, c := range append(pod.Spec.InitContainers, pod.Spec.Containers...) {
		if c.Name == plan.ProxyContainerName {
			return c.Image
		}
	}
	t.Fatalf("fixture %s injects no istio-proxy", mode)
	return ""
}

// checkInjected injects tpl in both modes and checks the proxy, and that the app container's
// preStop is still prestop's.
func checkInjected(t *testing.T, k *kubectlEnv, what string, tpl corev1.PodTemplateSpec) {
	t.Helper()
	for _, mode := range injectionModes {
		spec := injectLikeIstio(t, k, tpl, mode)
		for _, p := range proxyProblems(spec, mode, injectedImage(t, mode)) {
			t.Errorf("%s, %s injection: %s", what, mode, p)
		}
		if c := spec.Containers[0]; c.Lifecycle == nil || c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.Exec == nil || c.Lifecycle.PreStop.Exec.Command[1] != "prestop" {
			t.Errorf("%s, %s injection: the app container's preStop is not prestop's: %+v", what, mode, c.Lifecycle)
		}
	}
}

// proxyOverrideDeployment is a team's Deployment that already overrides istio-proxy (its
// resources and an environment variable), as plan must merge into it.
const proxyOverrideDeployment = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: payments
spec:
  selector:
    matchLabels: {app: payments}
  template:
    metadata:
      labels: {app: payments}
    spec:
      containers:
      - name: payments
        image: registry.example.com/payments:4.2.0
        ports:
        - containerPort: 8080
      - name: istio-proxy
        image: auto
        resources:
          requests:
            cpu: 300m
            memory: 512Mi
        env:
        - name: ISTIO_META_DNS_CAPTURE
          value: "true"
`

// TestInjectorMergesWhatPlanWrites: every Istio example, the kustomize overlay, plan's output
// for the workloads of the kubectl tests, plan -o yaml without -f, and a Deployment with an
// istio-proxy override of its own, as Istio's injector would make them, classic and native.
func TestInjectorMergesWhatPlanWrites(t *testing.T) {
	k := newKubectl(t)
	for _, file := range []string{filepath.Join("istio-classic", "deployment.yaml"), filepath.Join("istio-native", "deployment.yaml")} {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		checkInjected(t, k, file, decodeDeployments(t, file, data)[0].Spec.Template)
	}
	overlay, err := filepath.Abs(filepath.Join("kustomize", "overlay"))
	if err != nil {
		t.Fatal(err)
	}
	checkInjected(t, k, "kubectl kustomize kustomize/overlay", *podTemplateOf(decodeObjects(t, "kustomize", k.run("kustomize", overlay))["Deployment//orders"]))
	for _, c := range kustomizeCases {
		dir, _ := filepath.Abs(filepath.Join("testdata", "kustomize", c.name))
		if c.stops != "" {
			continue // that overlay must fail; TestKustomizeUserWorkloads builds its fix
		}
		for key, obj := range decodeObjects(t, c.name, k.kustomizeBuild(t, dir)) {
			if tpl := podTemplateOf(obj); tpl != nil {
				checkInjected(t, k, "kustomize "+c.name+" "+key, *tpl)
			}
		}
	}

	for name, manifest := range workloadManifests {
		args := append(append([]string{}, storyArgs...), "-f", "-", "--replace-prestop", "-o", "yaml")
		if strings.Contains(name, "two containers") {
			args = append(args, "--container", "web")
		}
		checkInjected(t, k, name+": plan -f -o yaml", decodeWorkload(t, name, meshdrain(t, []byte(manifest), args...)))
		patched := k.patchLocal([]byte(manifest), meshdrain(t, []byte(manifest), append(args, "--patch")...))
		checkInjected(t, k, name+": kubectl patch with plan's --patch", decodeWorkload(t, name, patched))
	}
	// The override of its own keeps its resources and variable through plan and the injector.
	spec := injectLikeIstio(t, k, decodeWorkload(t, "override", meshdrain(t, []byte(proxyOverrideDeployment), append(append([]string{}, storyArgs...), "-f", "-", "-o", "yaml")...)), "native")
	for _, c := range spec.InitContainers {
		if c.Name == plan.ProxyContainerName && (c.Resources.Requests.Memory().String() != "512Mi" || !hasEnv(c, "ISTIO_META_DNS_CAPTURE") || !hasEnv(c, "PILOT_CERT_PROVIDER")) {
			t.Errorf("the merged proxy lost the team's resources or variable, or the injector's: %+v %+v", c.Resources, c.Env)
		}
	}

	for _, sc := range []plan.Sidecar{plan.Classic, plan.Native} {
		var buf bytes.Buffer
		if err := plan.WriteYAML(&buf, mustRecommend(t, userScenario(sc)), plan.PatchOptions{Container: "app", Image: plan.DefaultImage, Dir: "/meshdrain"}); err != nil {
			t.Fatal(err)
		}
		tpl := decodeDeployments(t, "plan -o yaml", []byte("apiVersion: apps/v1\nkind: Deployment\n"+buf.String()))[0].Spec.Template
		checkInjected(t, k, "plan -o yaml --sidecar "+string(sc), tpl)
	}
}

func hasEnv(c corev1.Container, name string) bool {
	for _, e := range c.Env {
		if e.Name == name {
			return true
		}
	}
	return false
}

// TestInjectorChecksCatchBrokenOverrides: the checks above find what the issue saw with the
// real injector: an httpGet preStop beside the injected exec (two handler types, native), an
// override in initContainers (ignored by a classic injection: two proxies), no image auto, no
// mount of the install volume, and no override at all.
func TestInjectorChecksCatchBrokenOverrides(t *testing.T) {
	k := newKubectl(t)
	data, err := os.ReadFile(filepath.Join("istio-native", "deployment.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	load := func() corev1.PodTemplateSpec { return decodeDeployments(t, "istio-native", data)[0].Spec.Template }
	for _, c := range []struct {
		name, mode string
		breakIt    func(*corev1.PodTemplateSpec)
		want       string
	}{
		{"httpGet preStop", "native", func(tpl *corev1.PodTemplateSpec) {
			p := &tpl.Spec.Containers[1]
			p.Lifecycle.PreStop = &corev1.LifecycleHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/quitquitquit"}}
		}, "preStop has 2 handler types"},
		{"override in initContainers", "classic", func(tpl *corev1.PodTemplateSpec) {
			tpl.Spec.InitContainers = append(tpl.Spec.InitContainers, tpl.Spec.Containers[1])
			tpl.Spec.Containers = tpl.Spec.Containers[:1]
		}, "2 istio-proxy containers"},
		{"a pinned image", "classic", func(tpl *corev1.PodTemplateSpec) { tpl.Spec.Containers[1].Image = "docker.io/istio/proxyv2:1.19.0" }, "want the injector's"},
		{"no mount", "native", func(tpl *corev1.PodTemplateSpec) { tpl.Spec.Containers[1].VolumeMounts = nil }, "on no mount of the meshdrain volume"},
		{"no override", "native", func(tpl *corev1.PodTemplateSpec) { tpl.Spec.Containers = tpl.Spec.Containers[:1] }, "preStop runs [\"pilot-agent\""},
		{"no override", "classic", func(tpl *corev1.PodTemplateSpec) { tpl.Spec.Containers = tpl.Spec.Containers[:1] }, "Istio's own drain is not deferred"},
	} {
		t.Run(c.name+"/"+c.mode, func(t *testing.T) {
			tpl := load()
			if found := proxyProblems(injectLikeIstio(t, k, tpl, c.mode), c.mode, injectedImage(t, c.mode)); len(found) > 0 {
				t.Fatalf("the example itself: %q", found)
			}
			c.breakIt(&tpl)
			found := proxyProblems(injectLikeIstio(t, k, tpl, c.mode), c.mode, injectedImage(t, c.mode))
			if !strings.Contains(strings.Join(found, "\n"), c.want) {
				t.Errorf("problems %q do not mention %q", found, c.want)
			}
		})
	}
}
