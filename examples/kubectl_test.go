package examples

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/meshdrain/meshdrain/pkg/cli"
	"github.com/meshdrain/meshdrain/pkg/operator/plan"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// kubectlEnv runs kubectl with nothing to reach but a server this test starts on loopback:
// even `kubectl patch --local` and `kubectl kustomize` ask a server for /version first, so a
// kubeconfig points them at one that answers only that, and HOME keeps kubectl's caches in
// the test's directory.
type kubectlEnv struct {
	t        *testing.T
	bin, dir string
	mu       sync.Mutex
	seen     []string
}

func newKubectl(t *testing.T) *kubectlEnv {
	t.Helper()
	bin, err := exec.LookPath("kubectl")
	if err != nil {
		t.Skip("kubectl is not on PATH: the manifests are checked with kubectl patch --local and kubectl kustomize where it is installed")
	}
	k := &kubectlEnv{t: t, bin: bin, dir: t.TempDir()}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		k.mu.Lock()
		k.seen = append(k.seen, r.Method+" "+r.URL.Path)
		k.mu.Unlock()
		if r.URL.Path == "/version" {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"major":"1","minor":"32","gitVersion":"v1.32.0"}`))
			return
		}
		http.NotFound(w, r)
	}))
	t.Cleanup(srv.Close)
	kubeconfig := "apiVersion: v1\nkind: Config\nclusters:\n- name: test\n  cluster: {server: \"" + srv.URL + "\"}\n" +
		"contexts:\n- name: test\n  context: {cluster: test, user: test}\nusers:\n- name: test\n  user: {}\ncurrent-context: test\n"
	if err := os.WriteFile(filepath.Join(k.dir, "kubeconfig"), []byte(kubeconfig), 0o600); err != nil {
		t.Fatal(err)
	}
	return k
}

func (k *kubectlEnv) run(args ...string) []byte {
	k.t.Helper()
	cmd := exec.Command(k.bin, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+filepath.Join(k.dir, "kubeconfig"), "HOME="+k.dir)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		k.t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return out
}

// patchLocal applies a strategic-merge patch to a manifest as `kubectl patch --local` does.
func (k *kubectlEnv) patchLocal(manifest, patch []byte) []byte {
	k.t.Helper()
	mf, pf := filepath.Join(k.dir, "workload.yaml"), filepath.Join(k.dir, "patch.yaml")
	if err := os.WriteFile(mf, manifest, 0o600); err != nil {
		k.t.Fatal(err)
	}
	if err := os.WriteFile(pf, patch, 0o600); err != nil {
		k.t.Fatal(err)
	}
	return k.run("patch", "--local", "-f", mf, "--type", "strategic", "--patch-file", pf, "-o", "yaml")
}

// meshdrain runs the CLI in-process with stdin.
func meshdrain(t *testing.T, stdin []byte, args ...string) []byte {
	t.Helper()
	var out, errOut bytes.Buffer
	if code := cli.Main(args, bytes.NewReader(stdin), &out, &errOut); code != 0 {
		t.Fatalf("meshdrain %s: exit %d: %s", strings.Join(args, " "), code, errOut.String())
	}
	return out.Bytes()
}

// storyArgs are the plan flags of userScenario, the one computation the README tells.
var storyArgs = []string{"plan", "--p99", "450ms", "--eds-lag", "p50=1.5s,p99=12s", "--clients", "50", "--app-drain", "5s"}

// workloadManifests are the three ways an ordinary workload broke plan -o yaml (issue 10):
// a container not named app, a proxy config with other keys, an httpGet or exec preStop; and
// a team's istio-proxy override that plan must merge into (issue 26).
var workloadManifests = map[string]string{
	"existing istio-proxy override": proxyOverrideDeployment,
	"httpGet preStop": `apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
      annotations:
        proxy.istio.io/config: '{"holdApplicationUntilProxyStarts": true}'
    spec:
      containers:
      - name: web
        image: registry.example.com/web:1.2.3
        ports:
        - containerPort: 8080
        lifecycle:
          preStop:
            httpGet:
              path: /shutdown
              port: 8080
`,
	"exec sleep preStop": `apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: web
spec:
  serviceName: web
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
      annotations:
        # YAML in the annotation, as Istio also accepts it
        proxy.istio.io/config: |
          holdApplicationUntilProxyStarts: true
          proxyMetadata:
            ISTIO_META_DNS_CAPTURE: "true"
    spec:
      terminationGracePeriodSeconds: 30
      containers:
      - name: web
        image: registry.example.com/web:1.2.3
        lifecycle:
          preStop:
            exec:
              command: ["sleep", "15"]
`,
	"sleep action, two containers": `apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: web
spec:
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
      annotations:
        sidecar.istio.io/statsInclusionPrefixes: "cluster.outbound|"
    spec:
      containers:
      - name: web
        image: registry.example.com/web:1.2.3
        lifecycle:
          preStop:
            sleep:
              seconds: 15
      - name: log-shipper
        image: registry.example.com/shipper:2
`,
}

// TestPlanPatchThroughKubectl applies plan's patch to each workload with kubectl patch
// --local, decodes the result strictly, and checks it is the pod the examples describe, with
// the workload's own containers, keys and ports untouched. The changed manifest plan prints
// itself must be the same workload.
func TestPlanPatchThroughKubectl(t *testing.T) {
	k := newKubectl(t)
	for name, manifest := range workloadManifests {
		t.Run(name, func(t *testing.T) {
			args := append(append([]string{}, storyArgs...), "-f", "-", "--replace-prestop", "-o", "yaml")
			if strings.Contains(name, "two containers") {
				args = append(args, "--container", "web")
			}
			patch := meshdrain(t, []byte(manifest), append(args, "--patch")...)
			patched := k.patchLocal([]byte(manifest), patch)
			before := decodeWorkload(t, "before", []byte(manifest))
			after := decodeWorkload(t, "kubectl patch --local", patched)
			checkPodTemplate(t, "istio-classic", after)
			checkUntouched(t, before, after)

			changed := meshdrain(t, []byte(manifest), args...)
			own := decodeWorkload(t, "plan -o yaml", changed)
			// A strategic merge places a new container after the patch's item before it, plan
			// after the workload's containers: the order of containers means nothing to the
			// kubelet, and the injector finds istio-proxy by name.
			if !reflect.DeepEqual(proxyLast(own), proxyLast(after)) {
				a, _ := yaml.Marshal(after)
				b, _ := yaml.Marshal(own)
				t.Errorf("plan's changed manifest differs from kubectl's patch result:\nkubectl:\n%s\nplan:\n%s", a, b)
			}
		})
	}
}

// proxyLast is tpl with its istio-proxy container moved last.
func proxyLast(tpl corev1.PodTemplateSpec) corev1.PodTemplateSpec {
	tpl = *tpl.DeepCopy()
	proxy, ok := proxyOverride(tpl.Spec)
	if ok {
		tpl.Spec.Containers = append(without(tpl.Spec.Containers, func(c corev1.Container) bool { return c.Name == plan.ProxyContainerName }), proxy)
	}
	return tpl
}

// decodeWorkload decodes the first document of data strictly as a Deployment, StatefulSet or
// DaemonSet and returns its pod template.
func decodeWorkload(t *testing.T, what string, data []byte) corev1.PodTemplateSpec {
	t.Helper()
	doc := strings.SplitN(string(data), "\n---\n", 2)[0]
	var meta struct {
		Kind string `json:"kind"`
	}
	if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	var err error
	switch meta.Kind {
	case "Deployment":
		var d appsv1.Deployment
		err = yaml.UnmarshalStrict([]byte(doc), &d)
		return orFatal(t, what, err, d.Spec.Template)
	case "StatefulSet":
		var s appsv1.StatefulSet
		err = yaml.UnmarshalStrict([]byte(doc), &s)
		return orFatal(t, what, err, s.Spec.Template)
	case "DaemonSet":
		var d appsv1.DaemonSet
		err = yaml.UnmarshalStrict([]byte(doc), &d)
		return orFatal(t, what, err, d.Spec.Template)
	}
	t.Fatalf("%s: kind %q", what, meta.Kind)
	return corev1.PodTemplateSpec{}
}

func orFatal(t *testing.T, what string, err error, tpl corev1.PodTemplateSpec) corev1.PodTemplateSpec {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: strict decoding: %v", what, err)
	}
	return tpl
}

// checkUntouched: the patch adds meshdrain and merges settings; it never adds a container,
// loses an annotation key, or changes the app's image and ports.
func checkUntouched(t *testing.T, before, after corev1.PodTemplateSpec) {
	t.Helper()
	// Regime (b) adds istio-proxy's override (Istio only): the rest are the workload's own.
	containers := after.Spec.Containers
	if _, had := proxyOverride(before.Spec); !had {
		containers = without(containers, func(c corev1.Container) bool { return c.Name == plan.ProxyContainerName })
	}
	if len(containers) != len(before.Spec.Containers) {
		t.Fatalf("%d containers after, %d before: the patch added a container", len(after.Spec.Containers), len(before.Spec.Containers))
	}
	for i, c := range containers {
		b := before.Spec.Containers[i]
		if c.Name != b.Name || c.Image != b.Image || !reflect.DeepEqual(c.Ports, b.Ports) {
			t.Errorf("container %d: %s %s %v, was %s %s %v", i, c.Name, c.Image, c.Ports, b.Name, b.Image, b.Ports)
		}
		if h := c.Lifecycle; h != nil && h.PreStop != nil {
			n := 0
			for _, set := range []bool{h.PreStop.Exec != nil, h.PreStop.HTTPGet != nil, h.PreStop.TCPSocket != nil, h.PreStop.Sleep != nil} {
				if set {
					n++
				}
			}
			if n != 1 {
				t.Errorf("container %s: preStop has %d handlers, Kubernetes wants exactly one: %+v", c.Name, n, h.PreStop)
			}
		}
	}
	for key, was := range before.Annotations {
		now, ok := after.Annotations[key]
		if !ok {
			t.Errorf("annotation %s lost", key)
			continue
		}
		if key == "proxy.istio.io/config" || key == "sidecar.istio.io/statsInclusionPrefixes" {
			for _, kept := range []string{"holdApplicationUntilProxyStarts", "ISTIO_META_DNS_CAPTURE", "cluster.outbound|"} {
				if strings.Contains(was, kept) && !strings.Contains(now, kept) {
					t.Errorf("annotation %s lost %s: %q", key, kept, now)
				}
			}
		}
	}
}

// TestKustomizeComponent builds the example overlay that uses the kustomize components with
// `kubectl kustomize`, decodes it strictly and checks it like the teams' workloads of
// kustomize_test.go (only the planned fields change) and like the other examples.
func TestKustomizeComponent(t *testing.T) {
	k := newKubectl(t)
	dir, err := filepath.Abs(filepath.Join("kustomize", "overlay"))
	if err != nil {
		t.Fatal(err)
	}
	out := k.run("kustomize", dir)
	input, err := os.ReadFile(filepath.Join("kustomize", "overlay", "deployment.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	after := decodeObjects(t, "kubectl kustomize", out)
	checkKustomized(t, plan.Native, decodeObjects(t, "overlay deployment", input), after)
	tpl := podTemplateOf(after["Deployment//orders"])
	if tpl == nil {
		t.Fatal("no Deployment orders in the result")
	}
	checkRestricted(t, "kustomize overlay", tpl.Spec)
}

// linkerdWorkloads are Linkerd workloads plan must change without adding an Istio setting:
// injection and a proxy setting on the pod with a guessed sleep in the app; a classic proxy
// whose own sleep is too short; injection asked for on the namespace (--mesh linkerd).
var linkerdWorkloads = map[string]struct {
	manifest string
	args     []string
}{
	"native, exec sleep preStop": {manifest: `apiVersion: apps/v1
kind: Deployment
metadata:
  name: orders
  namespace: shop
spec:
  selector:
    matchLabels: {app: orders}
  template:
    metadata:
      labels: {app: orders}
      annotations:
        linkerd.io/inject: enabled
        config.linkerd.io/proxy-cpu-request: 100m
    spec:
      terminationGracePeriodSeconds: 30
      containers:
      - name: orders
        image: registry.example.com/orders:1.2.3
        ports:
        - containerPort: 8080
        lifecycle:
          preStop:
            exec:
              command: ["sleep", "15"]
`},
	"classic, proxy sleep too short": {manifest: `apiVersion: apps/v1
kind: Deployment
metadata:
  name: orders
spec:
  selector:
    matchLabels: {app: orders}
  template:
    metadata:
      labels: {app: orders}
      annotations:
        linkerd.io/inject: enabled
        config.linkerd.io/proxy-enable-native-sidecar: "false"
        config.alpha.linkerd.io/proxy-wait-before-exit-seconds: "5"
    spec:
      containers:
      - name: orders
        image: registry.example.com/orders:1.2.3
        ports:
        - containerPort: 8080
`},
	"namespace injection, sleep action": {args: []string{"--mesh", "linkerd"}, manifest: `apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: orders
spec:
  serviceName: orders
  selector:
    matchLabels: {app: orders}
  template:
    metadata:
      labels: {app: orders}
    spec:
      containers:
      - name: orders
        image: registry.example.com/orders:1.2.3
        lifecycle:
          preStop:
            sleep:
              seconds: 15
`},
}

// TestPlanLinkerdPatchThroughKubectl applies plan's patch for each Linkerd workload with
// kubectl patch --local, decodes the result strictly and checks it like the Linkerd examples;
// plan's own changed manifest must be the same workload.
func TestPlanLinkerdPatchThroughKubectl(t *testing.T) {
	k := newKubectl(t)
	for name, w := range linkerdWorkloads {
		t.Run(name, func(t *testing.T) {
			args := append(append(append([]string{}, storyArgs...), w.args...), "-f", "-", "--replace-prestop", "-o", "yaml")
			patch := meshdrain(t, []byte(w.manifest), append(args, "--patch")...)
			if strings.Contains(string(patch), "istio") {
				t.Errorf("the patch of a Linkerd workload sets an Istio setting:\n%s", patch)
			}
			patched := k.patchLocal([]byte(w.manifest), patch)
			before := decodeWorkload(t, "before", []byte(w.manifest))
			after := decodeWorkload(t, "kubectl patch --local", patched)
			checkUntouched(t, before, after)
			judged := *after.DeepCopy()
			if _, ok := judged.Annotations[plan.LinkerdInjectAnnotation]; !ok && len(w.args) > 0 {
				// Injection asked for on the namespace: the pod would carry it once admitted.
				if judged.Annotations == nil {
					judged.Annotations = map[string]string{}
				}
				judged.Annotations[plan.LinkerdInjectAnnotation] = "enabled"
			}
			checkPodTemplate(t, "linkerd", judged)

			own := decodeWorkload(t, "plan -o yaml", meshdrain(t, []byte(w.manifest), args...))
			if !reflect.DeepEqual(own, after) {
				a, _ := yaml.Marshal(after)
				b, _ := yaml.Marshal(own)
				t.Errorf("plan's changed manifest differs from kubectl's patch result:\nkubectl:\n%s\nplan:\n%s", a, b)
			}
		})
	}
}
