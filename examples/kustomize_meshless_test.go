package examples

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

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

// meshlessPlan is what `meshdrain plan --mesh none -o json` writes for the pod: the fields the
// meshless components must carry.
type meshlessPlan struct {
	PrestopCommand     []string `json:"prestop_command"`
	GracePeriodSeconds int64    `json:"termination_grace_period_seconds"`
	ReadinessProbe     *struct {
		TCPSocketPort int32 `json:"tcp_socket_port"`
		PeriodSeconds int32 `json:"period_seconds"`
	} `json:"readiness_probe"`
}

// planForMeshlessComponent runs, in-process, the plan command the meshless component's
// prestop.yaml says its numbers come from, with port as <your port>, so that the component
// is compared with what plan writes today, never with numbers copied from it.
func planForMeshlessComponent(t *testing.T, port int) meshlessPlan {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(kustomizeComponent(t, "meshless"), "prestop.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^#\s+meshdrain (plan --mesh none .*)$`).FindSubmatch(data)
	if m == nil {
		t.Fatal("meshless/prestop.yaml does not say which `meshdrain plan --mesh none ...` its numbers come from")
	}
	cmd := strings.Replace(string(m[1]), "<your port>", strconv.Itoa(port), 1)
	if !strings.Contains(cmd, "--port "+strconv.Itoa(port)) {
		t.Fatalf("the stated plan command %q has no --port <your port>", m[1])
	}
	var p meshlessPlan
	if err := json.Unmarshal(meshdrain(t, nil, append(strings.Fields(cmd), "-o", "json")...), &p); err != nil {
		t.Fatalf("meshdrain %s -o json: %v", cmd, err)
	}
	if len(p.PrestopCommand) == 0 || p.GracePeriodSeconds == 0 || p.ReadinessProbe == nil {
		t.Fatalf("meshdrain %s -o json gave no preStop, grace period or readiness probe: %+v", cmd, p)
	}
	return p
}

// withMeshdrainPort is an overlay's workload file with the meshdrain-port object the meshless
// components read the app's port from (their comments show it).
func withMeshdrainPort(workloads string, port int) []byte {
	return []byte(workloads + "---\n" + `apiVersion: meshdrain/v1
kind: PodSettings
metadata:
  name: meshdrain-port
  annotations:
    config.kubernetes.io/local-config: "true"
spec:
  port: ` + strconv.Itoa(port) + "\n")
}

// TestKustomizeMeshless builds the meshless components onto workloads without a sidecar with
// `kubectl kustomize`: each first container runs the preStop `meshdrain plan --mesh none`
// writes for the inputs the component states and the overlay's port, in the grace period plan
// gives (not the sidecar's numbers of ../prestop.yaml), with HOST_IP from the downward API and
// plan's tcpSocket readiness probe on that port; nothing else changes. Where a container has
// a readiness probe of its own, meshless-readiness stops the build; without the port the
// build stops.
func TestKustomizeMeshless(t *testing.T) {
	k := newKubectl(t)
	before := decodeObjects(t, "workload.yaml", []byte(meshlessWorkloads))
	// A replacement whose target kind matches nothing is silently a no-op: each kind is built.
	for _, key := range []string{"Deployment//web", "StatefulSet//ledger", "DaemonSet//edge"} {
		if podTemplateOf(before[key]) == nil {
			t.Fatalf("no %s in the input, want the three kinds", key)
		}
	}
	for _, port := range []int{8080, 9090} {
		t.Run("port "+strconv.Itoa(port), func(t *testing.T) {
			dir := writeOverlay(t, withMeshdrainPort(meshlessWorkloads, port), "", "meshless", "meshless-readiness")
			after := decodeObjects(t, "kubectl kustomize", k.kustomizeBuild(t, dir))
			checkKustomizedMeshless(t, planForMeshlessComponent(t, port), before, after, true)
		})
	}
	want := planForMeshlessComponent(t, 8080)

	// Without meshless-readiness, a pod with a probe of its own keeps it.
	withProbe := strings.Replace(meshlessWorkloads, "          env:\n", "          readinessProbe:\n            httpGet: {path: /readyz, port: 8080}\n          env:\n", 1)
	dir := writeOverlay(t, withMeshdrainPort(withProbe, 8080), "", "meshless")
	beforeWithProbe := decodeObjects(t, "workload.yaml", []byte(withProbe))
	checkKustomizedMeshless(t, want, beforeWithProbe, decodeObjects(t, "kubectl kustomize", k.kustomizeBuild(t, dir)), false)

	// With it, the build stops on the probe rather than replace it or add a second handler.
	stderr := k.kustomizeFails(t, writeOverlay(t, withMeshdrainPort(withProbe, 8080), "", "meshless", "meshless-readiness"))
	if !strings.Contains(stderr, "readinessProbe") {
		t.Errorf("kustomize failed without naming the readiness probe: %s", stderr)
	}

	// No port given: the build stops, naming the object to add, rather than watch a port the
	// component guessed.
	for _, components := range [][]string{{"", "meshless"}, {"", "meshless", "meshless-readiness"}} {
		stderr := k.kustomizeFails(t, writeOverlay(t, []byte(meshlessWorkloads), components...))
		if !strings.Contains(stderr, "meshdrain-port") {
			t.Errorf("%v without a meshdrain-port object: kustomize failed without naming it: %s", components, stderr)
		}
	}
}

// TestKustomizeMeshlessOverlay builds examples/kustomize/overlay-meshless: its Deployment gets
// plan --mesh none's preStop and grace period for the port its meshdrain-port.yaml gives, the
// Service comes out as it went in, and the pod passes Pod Security "restricted".
func TestKustomizeMeshlessOverlay(t *testing.T) {
	k := newKubectl(t)
	dir, err := filepath.Abs(filepath.Join("kustomize", "overlay-meshless"))
	if err != nil {
		t.Fatal(err)
	}
	portFile, err := os.ReadFile(filepath.Join(dir, "meshdrain-port.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var settings struct {
		Spec struct {
			Port int `json:"port"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(portFile, &settings); err != nil || settings.Spec.Port == 0 {
		t.Fatalf("meshdrain-port.yaml: no spec.port (%v)", err)
	}
	input, err := os.ReadFile(filepath.Join(dir, "deployment.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	after := decodeObjects(t, "kubectl kustomize", k.kustomizeBuild(t, dir))
	checkKustomizedMeshless(t, planForMeshlessComponent(t, settings.Spec.Port), decodeObjects(t, "overlay deployment", input), after, true)
	tpl := podTemplateOf(after["Deployment//web"])
	if tpl == nil {
		t.Fatal("no Deployment web in the result")
	}
	checkRestricted(t, "kustomize meshless overlay", tpl.Spec)
}

// TestKustomizeMeshlessChecksCatchBrokenResults: the meshless checks find a missing HOST_IP,
// a preStop without --mesh=none, a probe with two handlers and an unplanned change.
func TestKustomizeMeshlessChecksCatchBrokenResults(t *testing.T) {
	k := newKubectl(t)
	dir := writeOverlay(t, withMeshdrainPort(meshlessWorkloads, 8080), "", "meshless", "meshless-readiness")
	before := decodeObjects(t, "workload.yaml", []byte(meshlessWorkloads))
	built := k.kustomizeBuild(t, dir)
	want := planForMeshlessComponent(t, 8080)
	for name, breakIt := range map[string]func(tpl *corev1.PodTemplateSpec){
		"no HOST_IP": func(tpl *corev1.PodTemplateSpec) { tpl.Spec.Containers[0].Env = tpl.Spec.Containers[0].Env[:1] },
		"sidecar preStop": func(tpl *corev1.PodTemplateSpec) {
			tpl.Spec.Containers[0].Lifecycle.PreStop.Exec.Command[2] = "--mesh=istio"
		},
		"a sidecar's lag bound": func(tpl *corev1.PodTemplateSpec) {
			cmd := tpl.Spec.Containers[0].Lifecycle.PreStop.Exec.Command
			for i, arg := range cmd {
				if strings.HasPrefix(arg, "--eds-lag-bound=") {
					cmd[i] = "--eds-lag-bound=35.5s"
				}
			}
		},
		"a sidecar's grace period": func(tpl *corev1.PodTemplateSpec) {
			grace := int64(52)
			tpl.Spec.TerminationGracePeriodSeconds = &grace
		},
		"probe on another port": func(tpl *corev1.PodTemplateSpec) {
			tpl.Spec.Containers[0].ReadinessProbe.TCPSocket.Port.IntVal++
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
				checkKustomizedMeshless(r, want, before, after, true)
			}()
			if len(r.problems) == 0 {
				t.Error("the checks found nothing wrong")
			}
		})
	}
}

// checkKustomizedMeshless: each workload's first container has the meshless plan's preStop,
// HOST_IP once, a readiness probe with one handler (plan's where it had none and probeAdded),
// and the pod plan's grace period; once those fields and the pod's meshdrain parts are taken
// out of both, nothing changed.
func checkKustomizedMeshless(t reporter, p meshlessPlan, before, after map[string]any, probeAdded bool) {
	t.Helper()
	want := p.PrestopCommand
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
			if g := tpl.Spec.TerminationGracePeriodSeconds; g == nil {
				t.Errorf("%s: no terminationGracePeriodSeconds, plan --mesh none's is %d", key, p.GracePeriodSeconds)
			} else if *g != p.GracePeriodSeconds {
				t.Errorf("%s: terminationGracePeriodSeconds %d, plan --mesh none's is %d", key, *g, p.GracePeriodSeconds)
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
				if w := p.ReadinessProbe; !hadProbe && (r.TCPSocket == nil || r.TCPSocket.Port != intstr.FromInt32(w.TCPSocketPort) || r.PeriodSeconds != w.PeriodSeconds) {
					t.Errorf("%s: readiness probe %+v, plan --mesh none's is tcpSocket %d (a number: a string is a port name) every %ds", key, r, w.TCPSocketPort, w.PeriodSeconds)
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
	if workloads == 0 {
		t.Fatal("no workload in the input")
	}
}
