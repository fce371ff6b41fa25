package plan

import (
	"bytes"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/meshdrain/meshdrain/pkg/mesh"
)

const (
	ms = time.Millisecond
	s  = time.Second
)

// userScenario is docs/facts.md §5: Tomcat with P99 450ms, a worst client lag of 8s, 2s to drain.
func userScenario(sc Sidecar) Input {
	return Input{P99: 450 * ms, EDSLag: 8 * s, AppDrain: 2 * s, Sidecar: sc, CurrentGracePeriod: 30 * s}
}

func mustRecommend(t *testing.T, in Input) Plan {
	t.Helper()
	p, err := Recommend(in)
	if err != nil {
		t.Fatalf("Recommend(%+v): %v", in, err)
	}
	return p
}

func TestRecommendUserScenarioClassic(t *testing.T) {
	p := mustRecommend(t, userScenario(Classic))
	for _, c := range []struct {
		name      string
		got, want time.Duration
	}{
		// 8s + max(1s, 450ms) + 200ms
		{"ExpectedFinish", p.ExpectedFinish, 9200 * ms},
		// max(2s, 9.2s/4 = 2.3s)
		{"Margin", p.Margin, 2300 * ms},
		// ceil(9.2 + 2.3 + 2 + 1 = 14.5s)
		{"GracePeriod", p.GracePeriod, 15 * s},
		// 15 − 2 − 1
		{"Deadline", p.Deadline, 12 * s},
		{"AppExitExpected", p.AppExitExpected, 11200 * ms},
		{"AppExitWorst", p.AppExitWorst, 14 * s},
		{"LastRequestDone", p.LastRequestDone, 8450 * ms},
		// app exit 14s + 1s
		{"TerminationDrainDuration", p.TerminationDrainDuration, 15 * s},
		{"MinimumDrainDuration", p.MinimumDrainDuration, 0},
		{"DrainDuration", p.DrainDuration, 0},
		{"Quiet", p.Quiet, s},
		{"Poll", p.Poll, 200 * ms},
	} {
		if c.got != c.want {
			t.Errorf("%s = %s, want %s", c.name, c.got, c.want)
		}
	}
	if p.ExitOnZeroActiveConnections {
		t.Error("classic must not set EXIT_ON_ZERO_ACTIVE_CONNECTIONS")
	}
	if got, want := p.ProxyConfig(), `{"terminationDrainDuration": "15s"}`; got != want {
		t.Errorf("ProxyConfig = %s, want %s", got, want)
	}
	if got, want := strings.Join(p.PrestopArgs(), " "), "prestop --grace-period=15s --app-drain=2s --quiet=1s --eds-lag-bound=8s --log-file=/proc/1/fd/1"; got != want {
		t.Errorf("PrestopArgs = %s, want %s", got, want)
	}
}

// TestRecommendInvariants checks, over a grid of inputs and every sidecar, the relations the
// pod depends on, whatever the rounding did.
func TestRecommendInvariants(t *testing.T) {
	for _, sc := range Sidecars {
		for _, p99 := range []time.Duration{20 * ms, 450 * ms, 1500 * ms, 4 * s} {
			for _, lag := range []time.Duration{500 * ms, 3 * s, 8 * s, 30 * s} {
				for _, quiet := range []time.Duration{0, 500 * ms, 3 * s} {
					p := mustRecommend(t, Input{P99: p99, EDSLag: lag, Quiet: quiet, Sidecar: sc})
					name := func() string { return string(sc) + " p99=" + fmtD(p99) + " lag=" + fmtD(lag) + " quiet=" + fmtD(quiet) }
					if p.GracePeriod%s != 0 {
						t.Errorf("%s: grace %s not whole seconds", name(), p.GracePeriod)
					}
					if p.Deadline < p.ExpectedFinish+MinMargin {
						t.Errorf("%s: deadline %s leaves less than %s over the expected finish %s", name(), p.Deadline, MinMargin, p.ExpectedFinish)
					}
					if p.GracePeriod != p.Deadline+p.AppDrain+KillMargin {
						t.Errorf("%s: grace %s != deadline %s + app drain %s + %s (prestop's default derivation)", name(), p.GracePeriod, p.Deadline, p.AppDrain, KillMargin)
					}
					if p.AppDrain < p99 {
						t.Errorf("%s: app drain %s < p99", name(), p.AppDrain)
					}
					if p.ExpectedFinish < lag+p99 {
						t.Errorf("%s: expected finish %s before the last request (%s) is done", name(), p.ExpectedFinish, lag+p99)
					}
					if p.SidecarExitWorst < p.AppExitWorst || p.SidecarExitWorst > p.GracePeriod {
						t.Errorf("%s: sidecar exit %s not within [app exit %s, grace %s]", name(), p.SidecarExitWorst, p.AppExitWorst, p.GracePeriod)
					}
					switch sc {
					case Classic:
						if p.TerminationDrainDuration < p.AppExitWorst+KillMargin {
							t.Errorf("%s: terminationDrainDuration %s kills Envoy under the app (exit by %s)", name(), p.TerminationDrainDuration, p.AppExitWorst)
						}
					case ExitOnZero:
						if !p.ExitOnZeroActiveConnections || p.MinimumDrainDuration < p.Deadline {
							t.Errorf("%s: MINIMUM_DRAIN_DURATION %s before meshdrain's deadline %s", name(), p.MinimumDrainDuration, p.Deadline)
						}
					case Native:
						if p.TerminationDrainDuration != 0 || p.MinimumDrainDuration != 0 {
							t.Errorf("%s: native sidecars need no drain setting", name())
						}
					}
				}
			}
		}
	}
}

func TestRecommendDefaults(t *testing.T) {
	p := mustRecommend(t, Input{P99: 450 * ms, EDSLag: 3 * s})
	if p.Input.Sidecar != Classic || p.Quiet != DefaultQuiet || p.Poll != DefaultPoll || p.Input.DrainDuration != DefaultDrainDuration {
		t.Fatalf("defaults not applied: %+v", p.Input)
	}
	// 4 × 450ms = 1.8s, rounded up to 2s.
	if p.AppDrain != 2*s {
		t.Errorf("default app drain = %s, want 2s", p.AppDrain)
	}
	// A tiny P99 still gets a second to shut down.
	if p := mustRecommend(t, Input{P99: 10 * ms, EDSLag: 3 * s}); p.AppDrain != s {
		t.Errorf("default app drain for p99 10ms = %s, want 1s", p.AppDrain)
	}
}

func TestRecommendSlowRequestsWidenTheQuietWait(t *testing.T) {
	// With P99 3s > quiet 1s, meshdrain also waits for the active requests to end.
	p := mustRecommend(t, Input{P99: 3 * s, EDSLag: 2 * s, AppDrain: 5 * s})
	if want := 2*s + 3*s + 200*ms; p.ExpectedFinish != want {
		t.Errorf("ExpectedFinish = %s, want %s", p.ExpectedFinish, want)
	}
}

func TestRecommendLargeLagUsesProportionalMargin(t *testing.T) {
	// 30s + 1s + 0.2s = 31.2s; margin 31.2/4 = 7.8s; grace ceil(31.2+7.8+2+1 = 42s).
	p := mustRecommend(t, Input{P99: 450 * ms, EDSLag: 30 * s, AppDrain: 2 * s})
	if p.Margin != 7800*ms || p.GracePeriod != 42*s || p.Deadline != 39*s {
		t.Errorf("margin %s grace %s deadline %s, want 7.8s 42s 39s", p.Margin, p.GracePeriod, p.Deadline)
	}
}

func TestRecommendExitOnZero(t *testing.T) {
	p := mustRecommend(t, userScenario(ExitOnZero))
	if !p.ExitOnZeroActiveConnections || p.MinimumDrainDuration != 12*s || p.TerminationDrainDuration != 0 {
		t.Fatalf("exit-on-zero settings: %+v", p)
	}
	want := `{"proxyMetadata": {"EXIT_ON_ZERO_ACTIVE_CONNECTIONS": "true", "MINIMUM_DRAIN_DURATION": "12s"}}`
	if got := p.ProxyConfig(); got != want {
		t.Errorf("ProxyConfig = %s, want %s", got, want)
	}
}

func TestRecommendNative(t *testing.T) {
	p := mustRecommend(t, userScenario(Native))
	if p.ProxyConfig() != "" || len(p.Annotations()) != 2 || p.Annotations()[1] != (Annotation{NativeSidecarAnnotation, "true"}) {
		t.Fatalf("native needs the stats and native-sidecar annotations only, got %v", p.Annotations())
	}
	if p.GracePeriod != 15*s {
		t.Errorf("grace = %s, want 15s", p.GracePeriod)
	}
}

func TestRecommendShortDrainDurationIsRaised(t *testing.T) {
	in := userScenario(Classic)
	in.DrainDuration = 10 * s // Envoy would stop accepting at 10s, before the app exits by 14s
	p := mustRecommend(t, in)
	if p.DrainDuration != 14*s {
		t.Fatalf("DrainDuration = %s, want 14s", p.DrainDuration)
	}
	if got, want := p.ProxyConfig(), `{"drainDuration": "14s", "terminationDrainDuration": "15s"}`; got != want {
		t.Errorf("ProxyConfig = %s, want %s", got, want)
	}
}

func TestRecommendCurrentGracePeriod(t *testing.T) {
	for _, c := range []struct {
		current time.Duration
		want    string
	}{
		{10 * s, "too short: meshdrain's deadline would be 10s − 2s − 1s = 7s"},
		{30 * s, "terminationDrainDuration 30s (not 15s)"},
		{15500 * ms, "not whole seconds"},
	} {
		in := userScenario(Classic)
		in.CurrentGracePeriod = c.current
		p := mustRecommend(t, in)
		if !strings.Contains(strings.Join(p.Warnings, "\n"), c.want) {
			t.Errorf("current %s: warnings %q lack %q", c.current, p.Warnings, c.want)
		}
	}
	in := userScenario(Classic)
	in.CurrentGracePeriod = 15 * s
	for _, w := range mustRecommend(t, in).Warnings {
		if strings.Contains(w, "current grace period") {
			t.Errorf("a grace period equal to the plan's gets a note: %s", w)
		}
	}
}

// TestRecommendKeepsLongerBounds: the workload's own grace period and sidecar bounds are kept
// where longer than what suffices, everything derived follows the kept grace period (so what
// plan writes still holds together), and the plan names what would suffice.
func TestRecommendKeepsLongerBounds(t *testing.T) {
	in := userScenario(Classic) // 15s suffices
	in.KeepLonger = Bounds{GracePeriod: 60 * s}
	p := mustRecommend(t, in)
	if p.GracePeriod != 60*s || p.SufficientGracePeriod != 15*s || p.Deadline != 57*s || p.TerminationDrainDuration != 60*s || p.DrainDuration != 59*s {
		t.Errorf("grace %s (suffices %s), deadline %s, terminationDrainDuration %s, drainDuration %s; want 60s (15s), 57s, 60s, 59s",
			p.GracePeriod, p.SufficientGracePeriod, p.Deadline, p.TerminationDrainDuration, p.DrainDuration)
	}
	if want := []Kept{{"terminationGracePeriodSeconds", 60 * s, 15 * s}}; !reflect.DeepEqual(p.Kept, want) {
		t.Errorf("Kept = %v, want %v", p.Kept, want)
	}
	if len(p.Attention) != 1 || !strings.Contains(p.Attention[0], "15s that suffices") || !strings.Contains(p.Attention[0], "terminationDrainDuration 60s (15s would do)") ||
		!strings.Contains(p.Attention[0], "--lower-grace-period") {
		t.Errorf("Attention = %q: want the kept grace period, what suffices, what follows it and the flag", p.Attention)
	}
	if !slices.Contains(p.PrestopArgs(), "--grace-period=60s") {
		t.Errorf("the preStop does not follow the kept grace period: %v", p.PrestopArgs())
	}

	// A terminationDrainDuration longer still is the workload's own: kept, and named.
	in.KeepLonger.TerminationDrainDuration = 90 * s
	p = mustRecommend(t, in)
	if p.TerminationDrainDuration != 90*s || len(p.Kept) != 2 || p.Kept[1] != (Kept{"terminationDrainDuration", 90 * s, 15 * s}) {
		t.Errorf("terminationDrainDuration %s, Kept %v: want 90s kept (15s suffices)", p.TerminationDrainDuration, p.Kept)
	}
	// Shorter than what suffices: nothing is kept, the plan raises it.
	in.KeepLonger = Bounds{GracePeriod: 10 * s, TerminationDrainDuration: 5 * s}
	p = mustRecommend(t, in)
	if p.GracePeriod != 15*s || p.TerminationDrainDuration != 15*s || len(p.Kept)+len(p.Attention) != 0 {
		t.Errorf("shorter bounds: grace %s, terminationDrainDuration %s, Kept %v, Attention %q", p.GracePeriod, p.TerminationDrainDuration, p.Kept, p.Attention)
	}
	// exit-on-zero and classic Linkerd keep their own bound the same way.
	eoz := userScenario(ExitOnZero)
	eoz.KeepLonger = Bounds{MinimumDrainDuration: 40 * s}
	if p := mustRecommend(t, eoz); p.MinimumDrainDuration != 40*s || len(p.Kept) != 1 {
		t.Errorf("exit-on-zero: MINIMUM_DRAIN_DURATION %s, Kept %v: want 40s kept", p.MinimumDrainDuration, p.Kept)
	}
	ld := userScenario(Classic)
	ld.Mesh = mesh.Linkerd
	ld.KeepLonger = Bounds{GracePeriod: 30 * s, WaitBeforeExit: 40 * s}
	if p := mustRecommend(t, ld); p.GracePeriod != 30*s || p.WaitBeforeExit != 40*s || len(p.Kept) != 2 {
		t.Errorf("linkerd classic: grace %s, wait %s, Kept %v: want 30s and 40s kept", p.GracePeriod, p.WaitBeforeExit, p.Kept)
	}
}

// TestLongGracePeriodNamesItsInput: a grace period over ten minutes is warned about, naming
// the input that drives it.
func TestLongGracePeriodNamesItsInput(t *testing.T) {
	for _, c := range []struct {
		in   Input
		want string
	}{
		{Input{P99: 10 * time.Minute, EDSLag: 8 * s}, "mostly from --p99 600s (the app's drain, 4 × p99"},
		{Input{P99: 450 * ms, EDSLag: 8 * s, AppDrain: 15 * time.Minute}, "mostly from --app-drain 900s"},
		{Input{P99: 450 * ms, EDSLag: 20 * time.Minute}, "mostly from --eds-lag 1200s"},
		{Input{P99: 450 * ms, EDSLag: 8 * s, ClientPeriod: 15 * time.Minute}, "mostly from --client-period 900s"},
		{Input{P99: 450 * ms, EDSLag: 8 * s, KeepLonger: Bounds{GracePeriod: 20 * time.Minute}}, "it is the workload's own, which plan keeps"},
	} {
		p := mustRecommend(t, c.in)
		if len(p.Attention) == 0 || !strings.Contains(strings.Join(p.Attention, "\n"), c.want) || !strings.Contains(strings.Join(p.Attention, "\n"), "over 10 minutes") {
			t.Errorf("%+v: grace %s, Attention %q lacks %q", c.in, p.GracePeriod, p.Attention, c.want)
		}
	}
	if p := mustRecommend(t, Input{P99: 450 * ms, EDSLag: 7 * time.Minute}); p.GracePeriod > LongGracePeriod || len(p.Attention) > 0 {
		t.Errorf("grace %s: Attention %q, want none under %s", p.GracePeriod, p.Attention, LongGracePeriod)
	}
}

func TestRecommendRejectsBadInput(t *testing.T) {
	for _, c := range []struct {
		name string
		in   Input
		want string
	}{
		{"no p99", Input{EDSLag: s}, "p99 must be > 0"},
		{"no lag", Input{P99: s}, "eds-lag must be > 0"},
		{"drain below p99", Input{P99: s, EDSLag: s, AppDrain: 500 * ms}, "shorter than p99"},
		{"quiet not above poll", Input{P99: s, EDSLag: s, Quiet: 200 * ms}, "shorter than two polls"},
		{"negative", Input{P99: s, EDSLag: s, AppDrain: -s}, "negative"},
		{"sidecar", Input{P99: s, EDSLag: s, Sidecar: "ambient"}, "not one of"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Recommend(c.in)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want %q", err, c.want)
			}
		})
	}
}

func TestTimelineIsOrdered(t *testing.T) {
	for _, sc := range Sidecars {
		p := mustRecommend(t, userScenario(sc))
		var last time.Duration
		for _, st := range p.Steps {
			if st.At < last {
				t.Errorf("%s: step %q at %s comes after one at %s", sc, st.What, st.At, last)
			}
			last = st.At
		}
		if final := p.Steps[len(p.Steps)-1]; final.At != p.GracePeriod || final.Who != "kubelet" {
			t.Errorf("%s: last step %+v, want the kubelet's SIGKILL at the grace period", sc, final)
		}
	}
}

func TestWriteTextShowsTheArithmetic(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteText(&buf, mustRecommend(t, userScenario(Classic))); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{
		"terminationGracePeriodSeconds: 15",
		"eds-lag 8s + max(quiet 1s, p99 450ms) + poll 200ms",
		"ceil(expected finish 9.2s + margin 2.3s + app-drain 2s + 1s kill margin)",
		`proxy.istio.io/config: '{"terminationDrainDuration": "15s"}'`,
		"sidecar.istio.io/statsInclusionPrefixes: 'cluster.inbound|,http.inbound_,listener.0.0.0.0_15006'",
		"/meshdrain/meshdrain prestop --grace-period=15s --app-drain=2s --quiet=1s --eds-lag-bound=8s --log-file=/proc/1/fd/1",
		"t0+9.2s (≤ 12s)",
		"t0+11.2s (≤ 14s)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("text output lacks %q:\n%s", want, out)
		}
	}
	for i, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "  t0") || strings.HasPrefix(line, "     ") {
			if n := len([]rune(line)); n > textWidth {
				t.Errorf("timeline line %d is %d wide: %q", i, n, line)
			}
		}
	}
}

func TestWriteYAMLNeedsNames(t *testing.T) {
	p := mustRecommend(t, userScenario(Classic))
	if err := WriteYAML(&bytes.Buffer{}, p, PatchOptions{Container: "app"}); err == nil {
		t.Fatal("want an error without image and directory")
	}
}

func TestFormatDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0: "0s", 450 * ms: "450ms", 9200 * ms: "9.2s", 15 * s: "15s", 90 * s: "90s", 8450 * ms: "8.45s",
	} {
		if got := FormatDuration(d); got != want {
			t.Errorf("FormatDuration(%s) = %s, want %s", d, got, want)
		}
	}
}
