package examples

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"

	"github.com/meshdrain/meshdrain/pkg/mesh"
	"github.com/meshdrain/meshdrain/pkg/operator/plan"
)

// meshlessScenario is what examples/meshless was planned with (see its comments).
func meshlessScenario() plan.Input {
	return plan.Input{Mesh: mesh.None, Ports: []int{8080}, P99: 450 * time.Millisecond, EDSLag: 5 * time.Second, AppDrain: 5 * time.Second}
}

// checkMeshless: a pod without a sidecar runs exactly the preStop plan writes for it, on the
// app's own ports, with the node's IP from the downward API left out as the probes' source, a
// readiness probe, and no mesh's setting.
func checkMeshless(t reporter, tpl corev1.PodTemplateSpec, ps prestop, app corev1.Container, grace time.Duration) {
	t.Helper()
	for key := range tpl.Annotations {
		if strings.Contains(key, "istio.io") || strings.Contains(key, "linkerd.io") {
			t.Errorf("annotation %s: a mesh's setting on a pod without a sidecar", key)
		}
	}
	for _, c := range tpl.Spec.Containers {
		if c.Name == plan.ProxyContainerName || c.Name == "linkerd-proxy" {
			t.Errorf("container %s in a pod without a sidecar", c.Name)
		}
	}
	want := mustRecommend(t, meshlessScenario())
	if got, w := strings.Join(ps.args, " "), strings.Join(want.PrestopArgs(), " "); got != w {
		t.Errorf("preStop runs\n  %s\nmeshdrain plan --mesh none writes\n  %s", got, w)
	}
	if grace != want.GracePeriod {
		t.Errorf("grace %s, but meshdrain plan --mesh none recommends %s", grace, want.GracePeriod)
	}
	for _, port := range app.Ports {
		if !contains(ps.args, "--port="+strconv.Itoa(int(port.ContainerPort))) {
			t.Errorf("containerPort %d is not among prestop's --port: its clients would not be watched", port.ContainerPort)
		}
	}
	if !contains(ps.args, "--ignore-source="+plan.IgnoreHostIP) {
		t.Errorf("prestop does not leave out %s: the kubelet's probes would count as a client", plan.IgnoreHostIP)
	}
	hostIP := 0
	for _, e := range app.Env {
		if e.Name != plan.HostIPEnv {
			continue
		}
		hostIP++
		if e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != plan.HostIPFieldPath {
			t.Errorf("env %s is not fieldRef %s: --ignore-source=%s would leave out the wrong source", e.Name, plan.HostIPFieldPath, plan.IgnoreHostIP)
		}
	}
	if hostIP != 1 {
		t.Errorf("the app container sets %s %d times, want once (from the downward API)", plan.HostIPEnv, hostIP)
	}
	if app.ReadinessProbe == nil {
		t.Errorf("the app container has no readiness probe: a new pod would get connections before it listens")
	}
	if tpl.Spec.HostNetwork {
		t.Errorf("hostNetwork: the pod would see the node's sockets, and prestop refuses --mesh none there")
	}
}

// TestMeshlessObjects: the meshless example's Service, PodDisruptionBudget and Ingress decode
// strictly, select the Deployment's pods and name its port.
func TestMeshlessObjects(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("meshless", "deployment.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]bool{}
	for _, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(data), -1) {
		var meta struct {
			Kind string `json:"kind"`
		}
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			t.Fatal(err)
		}
		kinds[meta.Kind] = true
		switch meta.Kind {
		case "Service":
			var s corev1.Service
			if err := yaml.UnmarshalStrict([]byte(doc), &s); err != nil {
				t.Fatal(err)
			}
			if s.Spec.Selector["app"] != "web" || s.Spec.Ports[0].TargetPort.String() != "http" {
				t.Errorf("Service %+v does not send to the pods' http port", s.Spec)
			}
		case "PodDisruptionBudget":
			var p policyv1.PodDisruptionBudget
			if err := yaml.UnmarshalStrict([]byte(doc), &p); err != nil {
				t.Fatal(err)
			}
			if p.Spec.Selector.MatchLabels["app"] != "web" || p.Spec.MaxUnavailable == nil {
				t.Errorf("PodDisruptionBudget %+v does not bound the web pods' evictions", p.Spec)
			}
		case "Ingress":
			var i networkingv1.Ingress
			if err := yaml.UnmarshalStrict([]byte(doc), &i); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, k := range []string{"Deployment", "Service", "PodDisruptionBudget", "Ingress"} {
		if !kinds[k] {
			t.Errorf("the meshless example has no %s", k)
		}
	}
}

// TestMeshlessChecksCatchBrokenManifests proves the meshless checks are not vacuous.
func TestMeshlessChecksCatchBrokenManifests(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("meshless", "deployment.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	good := decodeDeployments(t, "meshless", data)[0].Spec.Template
	if p := problems("meshless", good); len(p) > 0 {
		t.Fatalf("the example itself: %v", p)
	}
	for _, c := range []struct {
		name    string
		breakIt func(tpl *corev1.PodTemplateSpec)
		want    string
	}{
		{"no HOST_IP", func(tpl *corev1.PodTemplateSpec) { tpl.Spec.Containers[0].Env = tpl.Spec.Containers[0].Env[1:] }, "sets HOST_IP 0 times"},
		{"HOST_IP from the pod's IP", func(tpl *corev1.PodTemplateSpec) {
			tpl.Spec.Containers[0].Env[0].ValueFrom.FieldRef = &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}
		}, "is not fieldRef status.hostIP"},
		{"no readiness probe", func(tpl *corev1.PodTemplateSpec) { tpl.Spec.Containers[0].ReadinessProbe = nil }, "no readiness probe"},
		{"a second port not watched", func(tpl *corev1.PodTemplateSpec) {
			tpl.Spec.Containers[0].Ports = append(tpl.Spec.Containers[0].Ports, corev1.ContainerPort{ContainerPort: 9090})
		}, "containerPort 9090"},
		{"no --ignore-source", func(tpl *corev1.PodTemplateSpec) {
			cmd := tpl.Spec.Containers[0].Lifecycle.PreStop.Exec.Command
			tpl.Spec.Containers[0].Lifecycle.PreStop.Exec.Command = append(append([]string{}, cmd[:4]...), cmd[5:]...)
		}, "does not leave out"},
		{"an Istio annotation", func(tpl *corev1.PodTemplateSpec) {
			tpl.Annotations = map[string]string{plan.StatsInclusionAnnotation: plan.StatsInclusionPrefixes}
		}, "a mesh's setting"},
	} {
		tpl := *good.DeepCopy()
		c.breakIt(&tpl)
		p := strings.Join(problems("meshless", tpl), "\n")
		if !strings.Contains(p, c.want) {
			t.Errorf("%s: problems %q, want one with %q", c.name, p, c.want)
		}
	}
}

// meshlessArgs are the plan flags of meshlessScenario.
var meshlessArgs = []string{"plan", "--mesh", "none", "--port", "8080", "--p99", "450ms", "--eds-lag", "5s", "--app-drain", "5s"}

// TestPlanMeshlessPatchThroughKubectl applies plan --mesh none's patch to the ordinary
// workloads with kubectl patch --local, decodes the result strictly and checks it: the app
// gets HOST_IP once and one readiness probe, keeps its containers, ports and annotations, and
// plan's own changed manifest is the same workload. A workload with an env and a probe of its
// own keeps them.
func TestPlanMeshlessPatchThroughKubectl(t *testing.T) {
	k := newKubectl(t)
	manifests := map[string]string{"with env and probe": meshlessWithEnvAndProbe}
	for name, m := range workloadManifests {
		if name != "existing istio-proxy override" {
			manifests[name] = m
		}
	}
	for name, manifest := range manifests {
		t.Run(name, func(t *testing.T) {
			args := append(append([]string{}, meshlessArgs...), "-f", "-", "--replace-prestop", "-o", "yaml")
			if strings.Contains(name, "two containers") {
				args = append(args, "--container", "web")
			}
			patch := meshdrain(t, []byte(manifest), append(args, "--patch")...)
			after := decodeWorkload(t, "kubectl patch --local", k.patchLocal([]byte(manifest), patch))
			before := decodeWorkload(t, "before", []byte(manifest))
			checkUntouched(t, before, after)
			ps, app := findPrestop(t, after.Spec)
			if argValue(ps.args, "--mesh") != "none" {
				t.Errorf("preStop %q", ps.args)
			}
			hostIP := 0
			for _, e := range app.Env {
				if e.Name == plan.HostIPEnv {
					hostIP++
				}
			}
			if hostIP != 1 || app.ReadinessProbe == nil {
				t.Errorf("app: %s %d times, readiness probe %+v", plan.HostIPEnv, hostIP, app.ReadinessProbe)
			}
			if h := app.ReadinessProbe; h != nil && h.TCPSocket != nil && (h.HTTPGet != nil || h.Exec != nil) {
				t.Errorf("a readiness probe with two handlers: %+v", h.ProbeHandler)
			}
			for _, e := range before.Spec.Containers[0].Env {
				found := false
				for _, a := range app.Env {
					found = found || reflect.DeepEqual(a, e)
				}
				if !found {
					t.Errorf("env %s lost", e.Name)
				}
			}
			// A strategic merge puts a new env item before the workload's, plan after them: the
			// order matters only to a variable that refers to an earlier one, and none refers
			// to HOST_IP (the kubelet does not expand the hook's command).
			own := envSorted(decodeWorkload(t, "plan -o yaml", meshdrain(t, []byte(manifest), args...)))
			after = envSorted(after)
			if !reflect.DeepEqual(own, after) {
				a, _ := yaml.Marshal(after)
				b, _ := yaml.Marshal(own)
				t.Errorf("plan's changed manifest differs from kubectl's patch result:\nkubectl:\n%s\nplan:\n%s", a, b)
			}
		})
	}
}

// envSorted is tpl with each container's env in name order.
func envSorted(tpl corev1.PodTemplateSpec) corev1.PodTemplateSpec {
	tpl = *tpl.DeepCopy()
	for i := range tpl.Spec.Containers {
		env := tpl.Spec.Containers[i].Env
		sort.Slice(env, func(a, b int) bool { return env[a].Name < env[b].Name })
	}
	return tpl
}

// meshlessWithEnvAndProbe is a workload with an env and a readiness probe of its own.
const meshlessWithEnvAndProbe = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      terminationGracePeriodSeconds: 60
      containers:
      - name: web
        image: registry.example.com/web:1.8.0
        ports:
        - containerPort: 8080
        env:
        - name: LOG_LEVEL
          value: info
        readinessProbe:
          httpGet: {path: /readyz, port: 8080}
        lifecycle:
          preStop:
            exec:
              command: ["/bin/sh", "-c", "sleep 15"]
`
