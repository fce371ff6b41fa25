package examples

import (
	"bytes"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/meshdrain/meshdrain/pkg/mesh"
	"github.com/meshdrain/meshdrain/pkg/operator/plan"
)

// meshlessWorkloads are workloads without a sidecar as teams have them before meshdrain: the
// report's web Deployment (a sleep 15, an env of its own, no probe), and the StatefulSet and
// DaemonSet of the kinds test (a sleep action, an httpGet preStop, no env at all).
const meshlessWorkloads = `apiVersion: apps/v1
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
          lifecycle:
            preStop:
              exec:
                command: ["/bin/sh", "-c", "sleep 15"]
---
` + statefulSetAndDaemonSet

// TestKustomizeMeshless builds the meshless components onto workloads without a sidecar with
// `kubectl kustomize`: each first container runs the preStop meshdrain plan --mesh none
// writes (for the README's computation, the timing in prestop.yaml) with HOST_IP from the
// downward API and a tcpSocket readiness probe; nothing else changes. Where a container has
// a readiness probe of its own, meshless-readiness stops the build.
func TestKustomizeMeshless(t *testing.T) {
	k := newKubectl(t)
	dir := writeOverlay(t, []byte(meshlessWorkloads), "", "meshless", "meshless-readiness")
	before := decodeObjects(t, "workload.yaml", []byte(meshlessWorkloads))
	after := decodeObjects(t, "kubectl kustomize", k.kustomizeBuild(t, dir))
	checkKustomizedMeshless(t, before, after, true)

	// Without meshless-readiness, a pod with a probe of its own keeps it.
	withProbe := strings.Replace(meshlessWorkloads, "          env:\n", "          readinessProbe:\n            httpGet: {path: /readyz, port: 8080}\n          env:\n", 1)
	dir = writeOverlay(t, []byte(withProbe), "", "meshless")
	before = decodeObjects(t, "workload.yaml", []byte(withProbe))
	checkKustomizedMeshless(t, before, decodeObjects(t, "kubectl kustomize", k.kustomizeBuild(t, dir)), false)

	// With it, the build stops on the probe rather than replace it or add a second handler.
	stderr := k.kustomizeFails(t, writeOverlay(t, []byte(withProbe), "", "meshless", "meshless-readiness"))
	if !strings.Contains(stderr, "readinessProbe") {
		t.Errorf("kustomize failed without naming the readiness probe: %s", stderr)
	}
}

// TestKustomizeMeshlessChecksCatchBrokenResults: the meshless checks find a missing HOST_IP,
// a preStop without --mesh=none, a probe with two handlers and an unplanned change.
func TestKustomizeMeshlessChecksCatchBrokenResults(t *testing.T) {
	k := newKubectl(t)
	dir := writeOverlay(t, []byte(meshlessWorkloads), "", "meshless", "meshless-readiness")
	before := decodeObjects(t, "workload.yaml", []byte(meshlessWorkloads))
	built := k.kustomizeBuild(t, dir)
	for name, breakIt := range map[string]func(tpl *corev1.PodTemplateSpec){
		"no HOST_IP": func(tpl *corev1.PodTemplateSpec) { tpl.Spec.Containers[0].Env = tpl.Spec.Containers[0].Env[:1] },
		"sidecar preStop": func(tpl *corev1.PodTemplateSpec) {
			tpl.Spec.Containers[0].Lifecycle.PreStop.Exec.Command[2] = "--mesh=istio"
		},
		"two handlers": func(tpl *corev1.PodTemplateSpec) {
			tpl.Spec.Containers[0].ReadinessProbe.Exec = &corev1.ExecAction{Command: []string{"true"}}
		},
		"unplanned change": func(tpl *corev1.PodTemplateSpec) { tpl.Spec.ServiceAccountName = "default" },
	} {
		t.Run(name, func(t *testing.T) {
			after := decodeObjects(t, "kubectl kustomize", built)
			breakIt(podTemplateOf(after["Deployment//web"]))
			r := &recorder{}
			func() {
				defer func() {
					if v := recover(); v != nil && v != errStopCheck {
						panic(v)
					}
				}()
				checkKustomizedMeshless(r, before, after, true)
			}()
			if len(r.problems) == 0 {
				t.Error("the checks found nothing wrong")
			}
		})
	}
}

// checkKustomizedMeshless: each workload's first container has the meshless plan's preStop,
// HOST_IP once, a readiness probe with one handler (plan's where it had none and probeAdded);
// once those fields and the pod's meshdrain parts are taken out of both, nothing changed.
func checkKustomizedMeshless(t reporter, before, after map[string]any, probeAdded bool) {
	t.Helper()
	in := userScenario("")
	in.Mesh, in.Ports, in.DeferSidecarDrain = mesh.None, []int{8080}, false
	p := mustRecommend(t, in)
	want := append([]string{"/meshdrain/meshdrain"}, p.PrestopArgs()...)
	workloads := 0
	for key, b := range before {
		a, ok := after[key]
		if !ok {
			t.Errorf("%s: lost", key)
			continue
		}
		if tpl := podTemplateOf(a); tpl != nil {
			workloads++
			app := tpl.Spec.Containers[0]
			if h := app.Lifecycle; h == nil || h.PreStop == nil || h.PreStop.Exec == nil || !reflect.DeepEqual(h.PreStop.Exec.Command, want) {
				t.Errorf("%s: preStop is not plan --mesh none's %q: %+v", key, want, app.Lifecycle)
			}
			hostIP := 0
			for _, e := range app.Env {
				if e.Name == plan.HostIPEnv {
					hostIP++
					if e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != plan.HostIPFieldPath {
						t.Errorf("%s: %s is not fieldRef %s", key, e.Name, plan.HostIPFieldPath)
					}
				}
			}
			if hostIP != 1 {
				t.Errorf("%s: %s set %d times, want once", key, plan.HostIPEnv, hostIP)
			}
			hadProbe := podTemplateOf(b).Spec.Containers[0].ReadinessProbe != nil
			if r := app.ReadinessProbe; r == nil && (hadProbe || probeAdded) {
				t.Errorf("%s: no readiness probe", key)
			} else if r != nil {
				handlers := 0
				for _, set := range []bool{r.Exec != nil, r.HTTPGet != nil, r.TCPSocket != nil, r.GRPC != nil} {
					if set {
						handlers++
					}
				}
				if handlers != 1 {
					t.Errorf("%s: readiness probe with %d handlers: %+v", key, handlers, r.ProbeHandler)
				}
			}
			b, a = deepCopy(t, b), deepCopy(t, a)
			stripPlanned(podTemplateOf(b), nil, false)
			stripPlanned(podTemplateOf(a), nil, false)
			c := &podTemplateOf(a).Spec.Containers[0]
			c.Env = without(c.Env, func(e corev1.EnvVar) bool { return e.Name == plan.HostIPEnv })
			if !hadProbe {
				c.ReadinessProbe = nil
			}
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
	if workloads < 3 {
		t.Fatalf("%d workloads in the input, want the three kinds", workloads)
	}
}
