package podsim

import (
	"math/rand/v2"
	"sort"
	"strings"
	"testing"
	"time"
)

func TestParseDist(t *testing.T) {
	for in, want := range map[string]Dist{
		"2s":                {Median: 2 * time.Second, P99: 2 * time.Second},
		"p50=1.5s,p99=12s":  {Median: 1500 * time.Millisecond, P99: 12 * time.Second},
		"p99=1s, p50=100ms": {Median: 100 * time.Millisecond, P99: time.Second},
	} {
		got, err := ParseDist(in)
		if err != nil || got != want {
			t.Errorf("ParseDist(%q) = %v, %v; want %v", in, got, err, want)
		}
		if again, err := ParseDist(got.String()); err != nil || again != got {
			t.Errorf("ParseDist(%q.String()=%q) = %v, %v", in, got.String(), again, err)
		}
	}
	for _, bad := range []string{"", "fast", "p50=1s", "p50=2s,p99=1s", "p90=1s,p50=1s", "-1s"} {
		if _, err := ParseDist(bad); err == nil {
			t.Errorf("ParseDist(%q) succeeded", bad)
		}
	}
}

// The drawn values must have the quantiles the operator gave, or the scenario is not the one
// described.
func TestDistSampleQuantiles(t *testing.T) {
	d := Dist{Median: 100 * time.Millisecond, P99: 450 * time.Millisecond}
	r := rand.New(rand.NewPCG(1, 2))
	samples := make([]time.Duration, 50000)
	for i := range samples {
		samples[i] = d.Sample(r)
	}
	sort.Slice(samples, func(i, j int) bool { return samples[i] < samples[j] })
	median, p99 := samples[len(samples)/2], samples[len(samples)*99/100]
	if median < 95*time.Millisecond || median > 105*time.Millisecond {
		t.Errorf("median %v, want ~100ms", median)
	}
	if p99 < 420*time.Millisecond || p99 > 480*time.Millisecond {
		t.Errorf("p99 %v, want ~450ms", p99)
	}
}

func TestParseStrategy(t *testing.T) {
	for _, in := range []string{"none", "sleep:5s", "sleep:15s", "meshdrain", "sleep:500ms"} {
		s, err := ParseStrategy(in)
		if err != nil || s.String() != in {
			t.Errorf("ParseStrategy(%q) = %v (%q), %v", in, s, s.String(), err)
		}
	}
	for _, bad := range []string{"", "sleep", "sleep:", "sleep:-1s", "wait:5s", "Meshdrain"} {
		if _, err := ParseStrategy(bad); err == nil {
			t.Errorf("ParseStrategy(%q) succeeded", bad)
		}
	}
}

func TestUserScenarioIsValid(t *testing.T) {
	if err := UserScenario().Validate(); err != nil {
		t.Fatal(err)
	}
	sc := UserScenario()
	sc.TimeScale, sc.QPS, sc.AppShutdown = 0, 0, "later"
	err := sc.Validate()
	if err == nil {
		t.Fatal("invalid scenario accepted")
	}
	for _, want := range []string{"qps", "time scale", "app shutdown"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %s", err, want)
		}
	}
}

// In regime (a) the sidecar plan recommends must outlive the app's drain: Envoy killed before
// the app has finished is exactly the failure the issue is about. (In regime (b), plan's
// default, hold keeps the proxy's SIGTERM until the app has let go: TestRecommendedRunsPlansFlags.)
func TestRegimeASidecarOutlivesTheApp(t *testing.T) {
	sc := UserScenario()
	spec, err := RegimeASidecar(sc)
	if err != nil {
		t.Fatal(err)
	}
	if spec.Mode != SidecarClassic || spec.Name != "regime-a" || spec.holds() {
		t.Errorf("spec = %+v", spec)
	}
	appDrain := spec.MeshdrainAppDrain
	if spec.TerminationDrainDuration < spec.MeshdrainDeadline+appDrain {
		t.Errorf("terminationDrainDuration %v < deadline %v + app drain %v", spec.TerminationDrainDuration, spec.MeshdrainDeadline, appDrain)
	}
	// The plan sizes the deadline on the last of the 50 clients (35.5s in 99 deletions of
	// 100), so the user's 30s grace period is raised to the plan's 52s.
	if sc.grace(spec) != 52*time.Second || !strings.Contains(spec.Note, "--clients 50") {
		t.Errorf("grace period %v, note %q: want the plan's 52s for 50 clients", sc.grace(spec), spec.Note)
	}
	if spec.TerminationDrainDuration > sc.grace(spec) {
		t.Errorf("terminationDrainDuration %v beyond the grace period", spec.TerminationDrainDuration)
	}
	if spec.MeshdrainDeadline < sc.EDSLag.P99 {
		t.Errorf("meshdrain deadline %v shorter than the EDS lag P99 %v", spec.MeshdrainDeadline, sc.EDSLag.P99)
	}

	if !strings.Contains(spec.Note, "raised") {
		t.Errorf("note %q: want the raise said", spec.Note)
	}

	// A constant lag is the last client's lag itself, and a grace period that covers it is kept.
	sc.EDSLag = Dist{Median: 8 * time.Second, P99: 8 * time.Second}
	spec, err = RegimeASidecar(sc)
	if err != nil {
		t.Fatal(err)
	}
	if sc.grace(spec) != 30*time.Second || !strings.Contains(spec.Note, "kept") {
		t.Errorf("grace %v, note %q: want the user's 30s kept", sc.grace(spec), spec.Note)
	}
}

// Every strategy must replay the same requests: same seed, same plan.
func TestPlanClientsIsRepeatable(t *testing.T) {
	sc := UserScenario()
	a, b := planClients(sc), planClients(sc)
	if len(a) != sc.Clients {
		t.Fatalf("%d clients, want %d", len(a), sc.Clients)
	}
	total := 0
	for i := range a {
		if a[i].lag != b[i].lag || len(a[i].arrivals) != len(b[i].arrivals) {
			t.Fatalf("client %d differs between two plans with the same seed", i)
		}
		for j, at := range a[i].arrivals {
			if at >= sc.Warmup+a[i].lag {
				t.Fatalf("client %d sends at %v, after it learned at %v", i, at, sc.Warmup+a[i].lag)
			}
			if j > 0 && at < a[i].arrivals[j-1] {
				t.Fatalf("client %d arrivals out of order", i)
			}
		}
		total += len(a[i].arrivals)
	}
	// Roughly QPS × (warmup + mean lag) requests.
	if total < 1500 || total > 6000 {
		t.Errorf("%d requests planned", total)
	}
	sc.Seed++
	if c := planClients(sc); c[0].lag == a[0].lag {
		t.Error("another seed gave the same lag")
	}
}

func TestMeshdrainArgsAreScaled(t *testing.T) {
	sc := UserScenario()
	sc.TimeScale = 0.1
	args := strings.Join(meshdrainArgs(sc, IstioDefaultSidecar(), "http://127.0.0.1:1", 0), " ")
	for _, want := range []string{
		"prestop", "--admin http://127.0.0.1:1", "--port 8080", "--grace-period 3s", "--app-drain 500ms",
		"--deadline 2.4s", "--quiet 100ms", "--poll 20ms", "--connect-timeout 200ms", "--log-format json",
	} {
		if !strings.Contains(args, want) {
			t.Errorf("args %q lack %q", args, want)
		}
	}
	spec, err := RecommendedSidecar(UserScenario())
	if err != nil {
		t.Fatal(err)
	}
	args = strings.Join(meshdrainArgs(sc, spec, "http://x", 0), " ")
	if want := "--deadline " + sc.scale(spec.MeshdrainDeadline).String(); !strings.Contains(args, want) {
		t.Errorf("args %q lack the plan's deadline %q", args, want)
	}
}

// Without a client-evidence setting meshdrain runs with its own default, as every existing
// run does; with one, the flag reaches meshdrain.
func TestMeshdrainArgsClientEvidence(t *testing.T) {
	sc := UserScenario()
	spec, err := RecommendedSidecar(sc)
	if err != nil {
		t.Fatal(err)
	}
	if args := strings.Join(meshdrainArgs(sc, spec, "http://x", 0), " "); strings.Contains(args, "--client-evidence") {
		t.Errorf("args %q pass --client-evidence though the spec sets none", args)
	}
	spec.MeshdrainClientEvidence = "off"
	args := strings.Join(meshdrainArgs(sc, spec, "http://x", 0), " ")
	if !strings.Contains(args, "--client-evidence off") || strings.Count(args, "--client-evidence") != 1 {
		t.Errorf("args %q: want --client-evidence off once", args)
	}
}

func TestParseFinalEvent(t *testing.T) {
	stderr := `{"level":"info","msg":"draining"}
not json
{"level":"info","msg":"drain finished","reason":"quiet","elapsed_ms":812,"signal":"http-requests","requests_after_drain":3,"active_at_end":0}
`
	ev, err := parseFinalEvent([]byte(stderr))
	if err != nil {
		t.Fatal(err)
	}
	if ev.Reason != "quiet" || ev.ElapsedMS != 812 || ev.Signal != "http-requests" || ev.RequestsAfterDrain != 3 {
		t.Errorf("event = %+v", ev)
	}
	if _, err := parseFinalEvent([]byte("{\"msg\":\"other\"}\n")); err == nil {
		t.Error("no final event accepted")
	}
}
