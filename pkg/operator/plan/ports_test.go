package plan

import (
	"slices"
	"strings"
	"testing"
)

// springBoot is an app on 8080 with Spring Boot's management port 8081: probes and
// Prometheus there, no client.
const springBoot = `apiVersion: apps/v1
kind: Deployment
metadata: {name: orders, namespace: shop}
spec:
  template:
    metadata:
      labels: {app: orders}
      annotations: {prometheus.io/port: "8081"}
    spec:
      containers:
      - name: orders
        image: orders:1
        ports:
        - {name: http, containerPort: 8080}
        - {name: management, containerPort: 8081}
        - {containerPort: 9000}
        readinessProbe: {httpGet: {port: management, path: /actuator/health/readiness}}
%s`

func workloadOf(t *testing.T, doc string) *Workload {
	t.Helper()
	m, err := ReadManifests(strings.NewReader(doc))
	if err != nil {
		t.Fatal(err)
	}
	w, err := m.Workload("", "")
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// TestClientPorts: the ports a Service sends to; without one, every port but the platform's,
// each left out said with the flag that adds it back.
func TestClientPorts(t *testing.T) {
	for _, c := range []struct {
		name, extra string
		want        []int
		notes       []string
	}{
		{"no service", "", []int{8080, 9000}, []string{"port 8081 (management) left out", "--port 8081 watches it too"}},
		{"service by name", "---\napiVersion: v1\nkind: Service\nmetadata: {name: orders, namespace: shop}\nspec: {selector: {app: orders}, ports: [{port: 80, targetPort: http}]}\n",
			[]int{8080}, []string{"port 9000 left out: no Service of the input (Service/orders)", "--port 9000 watches it too"}},
		{"service of another app", "---\napiVersion: v1\nkind: Service\nmetadata: {name: cart}\nspec: {selector: {app: cart}, ports: [{port: 8080}]}\n",
			[]int{8080, 9000}, nil},
		{"service in a List, by number", "---\napiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: Service\n  metadata: {name: orders}\n  spec: {selector: {app: orders}, ports: [{port: 9000}]}\n",
			[]int{9000}, []string{"port 8080 (http) left out"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			doc := strings.Replace(springBoot, "%s", "", 1) + c.extra
			ports, left := workloadOf(t, doc).ClientPorts()
			if !slices.Equal(ports, c.want) {
				t.Errorf("ports %v, want %v (notes %q)", ports, c.want, left)
			}
			for _, n := range c.notes {
				if !strings.Contains(strings.Join(left, "\n"), n) {
					t.Errorf("notes %q lack %q", left, n)
				}
			}
		})
	}
	// Probes alone on the first port leave it watched: it is, by convention, the app's.
	doc := strings.Replace(strings.Replace(springBoot, "port: management, path", "port: 8080, path", 1), "prometheus.io/port: \"8081\"", "x: y", 1)
	doc = strings.Replace(doc, "name: management, ", "", 1)
	if ports, left := workloadOf(t, strings.Replace(doc, "%s", "", 1)).ClientPorts(); !slices.Equal(ports, []int{8080, 8081, 9000}) {
		t.Errorf("probes on the first port: %v (%q), want every port", ports, left)
	}
}

// TestMeshlessWatch: exec probes on the loopback leave loopback sources out, and a re-plan
// drops a --port the container no longer has and keeps one the user added back.
func TestMeshlessWatch(t *testing.T) {
	probe := "        livenessProbe: {exec: {command: [sh, -c, 'curl -fsS http://localhost:8080/healthz']}}\n"
	mw := workloadOf(t, strings.Replace(springBoot, "%s", probe, 1)).MeshlessWatch(nil)
	if !mw.IgnoreLoopback || !strings.Contains(strings.Join(mw.Notes, "\n"), "livenessProbe exec") {
		t.Errorf("curl localhost:8080: %+v", mw)
	}
	mw = workloadOf(t, strings.Replace(springBoot, "%s", "        livenessProbe: {exec: {command: [grpc_health_probe, -addr=:9000]}}\n", 1)).MeshlessWatch(nil)
	if !mw.IgnoreLoopback {
		t.Errorf("grpc_health_probe -addr=:9000: %+v", mw)
	}
	mw = workloadOf(t, strings.Replace(springBoot, "%s", "        livenessProbe: {exec: {command: [curl, 'localhost:8081/health']}}\n", 1)).MeshlessWatch(nil)
	if mw.IgnoreLoopback {
		t.Errorf("a probe on the unwatched 8081 needs no loopback rule: %+v", mw)
	}
	replan := "        lifecycle: {preStop: {exec: {command: [/meshdrain/meshdrain, prestop, --mesh=none, --port=7070, --port=8081]}}}\n"
	mw = workloadOf(t, strings.Replace(springBoot, "%s", replan, 1)).MeshlessWatch(nil)
	notes := strings.Join(mw.Notes, "\n")
	if !slices.Equal(mw.Ports, []int{8080, 9000, 8081}) || !strings.Contains(notes, "--port=7070 dropped") || strings.Contains(notes, "--port 8081 watches") {
		t.Errorf("re-plan: %v %q; want 7070 dropped, 8081 kept (the user's)", mw.Ports, mw.Notes)
	}
	if mw := workloadOf(t, strings.Replace(springBoot, "%s", "", 1)).MeshlessWatch([]int{8081}); !slices.Equal(mw.Ports, []int{8081}) || len(mw.Notes) != 0 {
		t.Errorf("--port given: %+v", mw)
	}
}
