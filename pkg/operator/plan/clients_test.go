package plan

import (
	"strings"
	"testing"
)

func TestLastClientLag(t *testing.T) {
	d := Dist{Median: 1500 * ms, P99: 12 * s}
	// One client: the 99% bound is its own p99, the median its median.
	if got := d.LastOf(1, 0.99); got < 11990*ms || got > 12010*ms {
		t.Errorf("LastOf(1, 0.99) = %s, want 12s", got)
	}
	if got := d.LastOf(1, 0.5); got < 1499*ms || got > 1501*ms {
		t.Errorf("LastOf(1, 0.5) = %s, want 1.5s", got)
	}
	// More clients, a later last one; always beyond one client's p99.
	prev := d.LastOf(1, 0.99)
	for _, n := range []int{2, 50, 500, 2000} {
		got := d.LastOf(n, 0.99)
		if got <= prev {
			t.Errorf("LastOf(%d) = %s, not later than for fewer clients (%s)", n, got, prev)
		}
		prev = got
	}
}

func TestRecommendWithClients(t *testing.T) {
	in := Input{P99: 450 * ms, EDSLag: 12 * s, EDSLagMedian: 1500 * ms, Clients: 50, AppDrain: 5 * s}
	p := mustRecommend(t, in)
	// 50 clients, σ = ln(8)/2.326 = 0.894: the 0.99^(1/50) quantile, z = 3.54, is 35.5s;
	// the median of the last client (z = 2.20) 10.8s.
	if p.LastClientLag != 35500*ms || p.TypicalLastClientLag != 10800*ms {
		t.Errorf("last client lag %s, typical %s; want 35.5s and 10.8s", p.LastClientLag, p.TypicalLastClientLag)
	}
	if p.ExpectedFinish != 36700*ms || p.GracePeriod != 52*s || p.Deadline != 46*s || p.TerminationDrainDuration != 52*s {
		t.Errorf("finish %s grace %s deadline %s tdd %s, want 36.7s 52s 46s 52s", p.ExpectedFinish, p.GracePeriod, p.Deadline, p.TerminationDrainDuration)
	}
	if p.TypicalFinish != 12*s {
		t.Errorf("typical finish %s, want 12s", p.TypicalFinish)
	}
	one := in
	one.Clients = 1
	if p1 := mustRecommend(t, one); p1.LastClientLag != 12*s || p1.GracePeriod >= p.GracePeriod {
		t.Errorf("one client: lag %s grace %s; want its p99 12s and a shorter grace than for 50", p1.LastClientLag, p1.GracePeriod)
	}
	for _, bad := range []Input{
		{P99: 450 * ms, EDSLag: 12 * s, Clients: 50},
		{P99: 450 * ms, EDSLag: 12 * s, EDSLagMedian: s},
		{P99: 450 * ms, EDSLag: s, EDSLagMedian: 2 * s, Clients: 3},
	} {
		if _, err := Recommend(bad); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
}

const twoWorkloads = `apiVersion: v1
kind: Service
metadata: {name: web}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  template:
    metadata:
      annotations:
        proxy.istio.io/config: |
          holdApplicationUntilProxyStarts: true
          drainDuration: 60s
        sidecar.istio.io/statsInclusionPrefixes: "cluster.outbound|,http.inbound_"
    spec:
      containers:
      - {name: web, image: web:1, ports: [{containerPort: 8080}, {containerPort: 9000, protocol: UDP}]}
      - {name: istio-proxy, image: proxy}
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db}
spec:
  template:
    metadata:
      annotations:
        sidecar.istio.io/nativeSidecar: "true"
    spec:
      terminationGracePeriodSeconds: 10
      containers:
      - {name: db, image: db:1}
      - {name: backup, image: backup:1}
`

func TestReadWorkload(t *testing.T) {
	m, err := ReadManifests(strings.NewReader(twoWorkloads))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Workload("", ""); err == nil || !strings.Contains(err.Error(), "--workload") {
		t.Errorf("two workloads without --workload: %v", err)
	}
	w, err := m.Workload("deployment/web", "")
	if err != nil {
		t.Fatal(err)
	}
	// istio-proxy is never the app; UDP ports are not inbound HTTP ports; no grace period set.
	if w.Container != "web" || len(w.Ports) != 1 || w.Ports[0] != 8080 || w.GracePeriodSet || w.GracePeriod != DefaultGracePeriod {
		t.Errorf("workload %+v", w)
	}
	if d, err := w.DrainDuration(); err != nil || d != 60*s {
		t.Errorf("drainDuration from YAML proxy config = %s, %v", d, err)
	}
	if _, err := m.Workload("db", ""); err == nil || !strings.Contains(err.Error(), "db, backup") {
		t.Errorf("two app containers without --container: %v", err)
	}
	db, err := m.Workload("db", "db")
	if err != nil {
		t.Fatal(err)
	}
	if sc, why := db.Sidecar(); sc != Native || !strings.Contains(why, NativeSidecarAnnotation) {
		t.Errorf("sidecar from annotations = %s (%s), want native", sc, why)
	}

	// The edit merges into both annotations and keeps the YAML proxy config as YAML.
	p := mustRecommend(t, Input{P99: 450 * ms, EDSLag: 8 * s, AppDrain: 2 * s, Sidecar: Classic, DrainDuration: 60 * s})
	e, err := NewEdit(p, PatchOptions{Image: DefaultImage, Dir: "/meshdrain/"}, w)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Apply(); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if err := m.Write(&out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		// The merged value keeps the quotes it had.
		`sidecar.istio.io/statsInclusionPrefixes: "cluster.outbound|,http.inbound_,cluster.inbound|,listener.0.0.0.0_15006"`,
		"holdApplicationUntilProxyStarts: true\n          drainDuration: 60s\n          terminationDrainDuration: 15s",
		"kind: Service", "name: db", "terminationGracePeriodSeconds: 15",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	// Applying twice changes nothing more: the plan's own preStop is recognised.
	m2, err := ReadManifests(strings.NewReader(out.String()))
	if err != nil {
		t.Fatal(err)
	}
	w2, err := m2.Workload("web", "")
	if err != nil {
		t.Fatal(err)
	}
	if !w2.PreStopIsMeshdrain {
		t.Fatalf("meshdrain's own preStop not recognised: %q", w2.PreStop)
	}
	e2, err := NewEdit(p, PatchOptions{Image: DefaultImage, Dir: "/meshdrain"}, w2)
	if err != nil {
		t.Fatalf("second run: %v", err)
	}
	if err := e2.Apply(); err != nil {
		t.Fatal(err)
	}
	var again strings.Builder
	if err := m2.Write(&again); err != nil {
		t.Fatal(err)
	}
	if again.String() != out.String() {
		t.Errorf("a second plan changed the manifest again:\n%s\n---\n%s", out.String(), again.String())
	}
}

func TestReadManifestsErrors(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"", "no document"},
		{"- a\n- b\n", "not a Kubernetes object"},
		{"apiVersion: v1\nkind: Service\nmetadata: {name: web}\n", "no Deployment, StatefulSet, DaemonSet"},
		{"kind: Deployment\nmetadata: {name: x}\nspec: {}\n", "no spec.template.spec"},
		{"kind: Deployment\nmetadata: {name: x}\nspec: {template: {spec: {terminationGracePeriodSeconds: soon, containers: [{name: a}]}}}\n", "not a number"},
	} {
		m, err := ReadManifests(strings.NewReader(c.in))
		if err == nil {
			_, err = m.Workload("", "")
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: err %v, want %q", c.in, err, c.want)
		}
	}
}
