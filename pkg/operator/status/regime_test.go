package status

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/meshdrain/meshdrain/pkg/clock"
	"github.com/meshdrain/meshdrain/pkg/hook/regime"
	"github.com/meshdrain/meshdrain/pkg/mesh"
)

var regimeStart = time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)

// watchLines runs status --watch in line mode over the script, one line per sample.
func watchLines(t *testing.T, o Options, script ...scripted) []string {
	t.Helper()
	var out bytes.Buffer
	o.AdminURL, o.Watch, o.Interval, o.Samples, o.Clock = "http://admin", true, time.Second, len(script), clock.NewAutoFake(regimeStart)
	if err := Run(context.Background(), Envoy(&scriptedAdmin{state: StateLive, script: script}), &out, o); err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSpace(out.String()), "\n")
}

// status judges the regime from its samples as prestop's final event does: the drain closes
// rising since its first sample, before prestop --drain-at end has decided, are the sidecar
// draining on its own (regime a); standing, regime (b) so far; a count above zero at the
// first sample is unknown until an answer without a close shows it is not draining.
func TestStatusSaysTheRegime(t *testing.T) {
	for _, tc := range []struct {
		name   string
		o      Options
		script []scripted
		want   []string
	}{
		{"the sidecar drains on its own", Options{}, []scripted{{snap: httpSnapshot(10, 0)}, {snap: drainingSnapshot(15, 0)}, {snap: drainingSnapshot(20, 4)}},
			[]string{"regime=b", "regime=b", "regime=a"}},
		{"told connections to close before, then answers without", Options{}, []scripted{{snap: drainingSnapshot(10, 3)}, {snap: drainingSnapshot(12, 3)}, {snap: drainingSnapshot(12, 3)}},
			[]string{"regime=unknown", "regime=unknown", "regime=b"}},
		{"--drain-at start", Options{DrainAtStart: true}, []scripted{{snap: httpSnapshot(10, 0)}, {snap: drainingSnapshot(15, 4)}},
			[]string{"regime=a", "regime=a"}},
	} {
		lines := watchLines(t, tc.o, tc.script...)
		for i, want := range tc.want {
			if i >= len(lines) || !strings.Contains(lines[i], " "+want) {
				t.Errorf("%s: sample %d: want %q in:\n%s", tc.name, i, want, strings.Join(lines, "\n"))
			}
		}
	}
}

// The text report says the regime in a line, with the fix where the sidecar drains on its
// own; JSON carries prestop's field names.
func TestStatusRegimeLineAndJSON(t *testing.T) {
	var out bytes.Buffer
	err := Run(context.Background(), Envoy(&scriptedAdmin{state: StateLive, script: []scripted{{snap: httpSnapshot(10, 0)}, {snap: drainingSnapshot(20, 4)}}}), &out,
		Options{AdminURL: "http://admin", Watch: true, Terminal: true, Interval: time.Second, Samples: 2, Clock: clock.NewAutoFake(regimeStart)})
	if err != nil {
		t.Fatal(err)
	}
	frames := strings.Split(out.String(), clearScreen)
	last := frames[len(frames)-1]
	if want := "regime:  a: the sidecar drains on its own (http.<prefix>.downstream_cx_drain_close rose by 4 since status's first sample): " +
		"unless prestop --drain-at end has already decided (its own drain comes then, just before the app is told to stop), check the istio-proxy override (" +
		regime.OverridesCheck; !strings.Contains(last, want) {
		t.Errorf("want %q in:\n%s", want, last)
	}
	if first := frames[1]; !strings.Contains(first, "regime:  b so far: no connection told to close since status's first sample") {
		t.Errorf("first sample:\n%s", first)
	}

	out.Reset()
	if err := Run(context.Background(), Envoy(&scriptedAdmin{state: StateLive, script: []scripted{{snap: drainingSnapshot(20, 4)}}}), &out,
		Options{AdminURL: "http://admin", Output: OutputJSON, Clock: clock.NewAutoFake(regimeStart)}); err != nil {
		t.Fatal(err)
	}
	doc := jsonLines(t, out.String())[0]
	if doc["drain_regime"] != "unknown" || !strings.Contains(doc["drain_regime_why"].(string), "had told 4 connections to close before the first read") {
		t.Errorf("drain_regime %v, drain_regime_why %v", doc["drain_regime"], doc["drain_regime_why"])
	}
}

// Without the drain-close counter the regime is unknown, with the annotation to add; a
// Linkerd proxy gets no drain call and no regime line.
func TestStatusRegimeUnknownAndLinkerd(t *testing.T) {
	noHTTP := httpSnapshot(10, 0)
	noHTTP.Endpoints[0].HTTPRequestsTotal, noHTTP.Endpoints[0].HTTPRequestsActive = nil, nil
	noHTTP.Endpoints[0].ClusterRequestsTotal, noHTTP.Endpoints[0].ClusterRequestsActive = f(10), f(0)
	var out bytes.Buffer
	if err := Run(context.Background(), Envoy(&scriptedAdmin{state: StateLive, script: []scripted{{snap: noHTTP}}}), &out,
		Options{AdminURL: "http://admin", Clock: clock.NewAutoFake(regimeStart)}); err != nil {
		t.Fatal(err)
	}
	if want := "regime:  unknown: the sidecar does not count the connections it tells to close (http.<prefix>.downstream_cx_drain_close), " +
		"so whether its own drain was deferred cannot be seen: add http.inbound_ to the pod annotation sidecar.istio.io/statsInclusionPrefixes"; !strings.Contains(out.String(), want) {
		t.Errorf("want %q in:\n%s", want, out.String())
	}

	r := Report{Mesh: mesh.Linkerd}
	var w regimeWatch
	w.fill(&r)
	out.Reset()
	if err := WriteLine(&out, r); err != nil {
		t.Fatal(err)
	}
	if r.DrainRegime != "" || strings.Contains(out.String(), "regime") {
		t.Errorf("Linkerd: regime %q, line %s", r.DrainRegime, out.String())
	}
}

// check with --drain-at end: a sidecar that tells no connection to close passes on one sample;
// one that told some takes more, and fails if the count rises (regime a, with the fix),
// passes if it answers without telling one to close, warns if it answers nothing. Without
// the counter it warns with the annotation. Without --drain-at end there is no such item.
func TestCheckDrainRegime(t *testing.T) {
	for _, tc := range []struct {
		name       string
		drainAtEnd bool
		script     []scripted
		status     string // "" no item
		text       string
		samples    int
	}{
		{"nothing told to close", true, []scripted{{snap: httpSnapshot(10, 0)}}, Pass, "regime b (--drain-at end)", 1},
		{"the sidecar drains", true, []scripted{{snap: drainingSnapshot(10, 3)}, {snap: drainingSnapshot(20, 9)}}, Fail,
			"regime a: the sidecar's own drain was not deferred (http.<prefix>.downstream_cx_drain_close rose by 6 in 1s over 2 samples) check the istio-proxy override (" + regime.OverridesCheck, 2},
		{"told before, answers without", true, []scripted{{snap: drainingSnapshot(10, 3)}, {snap: drainingSnapshot(12, 3)}, {snap: drainingSnapshot(12, 3)}}, Pass,
			"downstream_cx_drain_close 3, not rising", 3},
		{"told before, no answer", true, []scripted{{snap: drainingSnapshot(10, 3)}}, Warn, "run the check while requests reach the pod", 2},
		{"regime (a)", false, []scripted{{snap: drainingSnapshot(10, 3)}, {snap: drainingSnapshot(20, 9)}}, "", "", 1},
	} {
		admin := &scriptedAdmin{state: StateLive, istio: true, script: tc.script}
		res := Evaluate(context.Background(), Envoy(admin), CheckOptions{AdminURL: "u", DrainAtEnd: tc.drainAtEnd, Clock: clock.NewAutoFake(regimeStart)})
		it, found := item(res, "drain-regime")
		switch {
		case tc.status == "" && found:
			t.Errorf("%s: item %+v, want none", tc.name, it)
		case tc.status != "" && (!found || it.Status != tc.status || !strings.Contains(it.Message+" "+it.Fix, tc.text)):
			t.Errorf("%s: item %+v, want %s mentioning %q", tc.name, it, tc.status, tc.text)
		}
		if res.OK != (tc.status != Fail) {
			t.Errorf("%s: ok %v", tc.name, res.OK)
		}
		if admin.calls != tc.samples {
			t.Errorf("%s: %d samples, want %d", tc.name, admin.calls, tc.samples)
		}
	}
	noHTTP := httpSnapshot(10, 0)
	noHTTP.Endpoints[0].HTTPRequestsTotal, noHTTP.Endpoints[0].HTTPRequestsActive = nil, nil
	noHTTP.Endpoints[0].ClusterRequestsTotal, noHTTP.Endpoints[0].ClusterRequestsActive = f(10), f(0)
	res := Evaluate(context.Background(), Envoy(&scriptedAdmin{state: StateLive, istio: true, script: []scripted{{snap: noHTTP}}}),
		CheckOptions{AdminURL: "u", DrainAtEnd: true, Clock: clock.NewAutoFake(regimeStart)})
	if it, _ := item(res, "drain-regime"); it.Status != Warn || !strings.Contains(it.Fix, "http.inbound_") {
		t.Errorf("without the counter: %+v", it)
	}
}

// In regime (b) terminationDrainDuration only bounds a fallback: regime (a)'s rule that it
// outlive the app's latest exit is not applied, and Istio's default is not warned about.
func TestCheckTimingInRegimeB(t *testing.T) {
	live := func() *scriptedAdmin {
		return &scriptedAdmin{state: StateLive, istio: true, script: []scripted{{snap: httpSnapshot(1, 0)}}}
	}
	o := CheckOptions{AdminURL: "u", GracePeriod: 52 * time.Second, AppDrain: 5 * time.Second, TerminationDrainDuration: 6 * time.Second, Clock: clock.NewAutoFake(regimeStart)}
	if res := Evaluate(context.Background(), Envoy(live()), o); res.OK {
		t.Fatalf("regime (a), terminationDrainDuration 6s: passed, want the outlive rule to fail it: %+v", res.Checks)
	}
	o.DrainAtEnd = true
	res := Evaluate(context.Background(), Envoy(live()), o)
	it, _ := item(res, "termination-drain-duration")
	if !res.OK || it.Status != Pass || !strings.Contains(it.Message, "regime (a)'s rule that it outlive the app's latest exit at t0+51s does not apply") {
		t.Errorf("regime (b), terminationDrainDuration 6s: ok %v, item %+v", res.OK, it)
	}
	o.TerminationDrainDuration = 0
	res = Evaluate(context.Background(), Envoy(live()), o)
	if it, found := item(res, "termination-drain-duration"); found || !res.OK {
		t.Errorf("regime (b), terminationDrainDuration not given: ok %v, item %+v; want no warning about Istio's default", res.OK, it)
	}
}
