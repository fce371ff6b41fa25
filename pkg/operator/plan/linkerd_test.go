package plan

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/meshdrain/meshdrain/pkg/mesh"
)

func linkerdScenario(sc Sidecar) Input {
	in := userScenario(sc)
	in.Mesh = mesh.Linkerd
	return in
}

// TestRecommendLinkerdNative: the same grace period as any native sidecar, no annotation,
// and a preStop that reads the proxy's admin port.
func TestRecommendLinkerdNative(t *testing.T) {
	p := mustRecommend(t, linkerdScenario(""))
	if p.Input.Sidecar != Native {
		t.Fatalf("Linkerd's default sidecar = %s, want native (its default since 2.20)", p.Input.Sidecar)
	}
	istio := mustRecommend(t, userScenario(Native))
	if p.GracePeriod != istio.GracePeriod || p.Deadline != istio.Deadline || p.GracePeriod != p.Deadline+p.AppDrain+KillMargin {
		t.Errorf("grace %s deadline %s, want Istio native's %s %s = deadline + app drain + %s", p.GracePeriod, p.Deadline, istio.GracePeriod, istio.Deadline, KillMargin)
	}
	if len(p.Annotations()) != 0 || p.ProxyConfig() != "" || p.WaitBeforeExit != 0 || p.DrainDuration != 0 || p.TerminationDrainDuration != 0 {
		t.Errorf("native Linkerd needs no setting: annotations %v, proxy config %q, wait %s, drainDuration %s, tdd %s",
			p.Annotations(), p.ProxyConfig(), p.WaitBeforeExit, p.DrainDuration, p.TerminationDrainDuration)
	}
	want := "prestop --mesh=linkerd --admin=http://127.0.0.1:4191 --grace-period=15s --app-drain=2s --quiet=1s --eds-lag-bound=8s --log-file=/proc/1/fd/1"
	if got := strings.Join(p.PrestopArgs(), " "); got != want {
		t.Errorf("PrestopArgs = %s\nwant          %s", got, want)
	}
	for _, w := range p.Warnings {
		if strings.Contains(w, "drainDuration") || strings.Contains(w, "Envoy") {
			t.Errorf("an Istio warning in a Linkerd plan: %s", w)
		}
	}
}

// TestRecommendLinkerdClassic: the proxy's preStop sleep covers meshdrain's deadline and the
// app's drain, the grace period covers the sleep plus a margin, and the injection is pinned
// to classic.
func TestRecommendLinkerdClassic(t *testing.T) {
	p := mustRecommend(t, linkerdScenario(Classic))
	// deadline 12s + app drain 2s = 14s; grace 15s.
	if p.WaitBeforeExit != 14*s || p.GracePeriod != 15*s {
		t.Fatalf("wait %s grace %s, want 14s 15s", p.WaitBeforeExit, p.GracePeriod)
	}
	want := []Annotation{{LinkerdNativeSidecarAnnotation, "false"}, {LinkerdWaitBeforeExitAnnotation, "14"}}
	if got := p.Annotations(); len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("annotations %v, want %v", got, want)
	}
	notes := strings.Join(p.Warnings, "\n")
	for _, want := range []string{"proxy-wait-before-exit-seconds 29 (not 14)", "stops accepting at once, inbound and outbound", "Terminating until t0+14s"} {
		if !strings.Contains(notes, want) {
			t.Errorf("warnings lack %q:\n%s", want, notes)
		}
	}
	rolledOut := &Edit{opts: PatchOptions{Dir: "/meshdrain"}, workload: &Workload{Ports: []int{8080}}}
	if got := strings.Join(p.mesh().rolloutCheck(p, rolledOut), " "); got !=
		"/meshdrain/meshdrain check --mesh=linkerd --port=8080 --grace-period=15s --app-drain=2s --proxy-wait-before-exit=14s" {
		t.Errorf("rolloutCheck = %s", got)
	}
}

// TestRecommendLinkerdInvariants holds the relations a Linkerd pod depends on over a grid.
func TestRecommendLinkerdInvariants(t *testing.T) {
	for _, sc := range []Sidecar{Native, Classic} {
		for _, p99 := range []time.Duration{20 * ms, 450 * ms, 1500 * ms, 4 * s} {
			for _, lag := range []time.Duration{500 * ms, 3 * s, 8 * s, 30 * s} {
				for _, appDrain := range []time.Duration{0, 4500 * ms} {
					if appDrain > 0 && appDrain < p99 {
						continue
					}
					p := mustRecommend(t, Input{Mesh: mesh.Linkerd, P99: p99, EDSLag: lag, AppDrain: appDrain, Sidecar: sc})
					name := string(sc) + " p99=" + fmtD(p99) + " lag=" + fmtD(lag) + " drain=" + fmtD(appDrain)
					if p.GracePeriod%s != 0 || p.GracePeriod != p.Deadline+p.AppDrain+KillMargin {
						t.Errorf("%s: grace %s, deadline %s, app drain %s", name, p.GracePeriod, p.Deadline, p.AppDrain)
					}
					if p.SidecarExitWorst < p.AppExitWorst || p.SidecarExitWorst > p.GracePeriod {
						t.Errorf("%s: proxy exit %s not within [app exit %s, grace %s]", name, p.SidecarExitWorst, p.AppExitWorst, p.GracePeriod)
					}
					if sc != Classic {
						continue
					}
					if p.WaitBeforeExit%s != 0 || p.WaitBeforeExit < p.AppExitWorst {
						t.Errorf("%s: proxy-wait-before-exit %s: the proxy stops accepting before the app's latest exit %s", name, p.WaitBeforeExit, p.AppExitWorst)
					}
					if p.GracePeriod < p.WaitBeforeExit+KillMargin {
						t.Errorf("%s: grace %s does not leave %s after the proxy's SIGTERM at %s", name, p.GracePeriod, KillMargin, p.WaitBeforeExit)
					}
				}
			}
		}
	}
}

func TestRecommendLinkerdRejectsIstioModes(t *testing.T) {
	_, err := Recommend(Input{Mesh: mesh.Linkerd, P99: s, EDSLag: s, Sidecar: ExitOnZero})
	if err == nil || !strings.Contains(err.Error(), "Istio's pilot-agent mode") {
		t.Errorf("exit-on-zero with Linkerd: %v", err)
	}
	if _, err := Recommend(Input{Mesh: "consul", P99: s, EDSLag: s}); err == nil || !strings.Contains(err.Error(), "not one of istio, linkerd") {
		t.Errorf("unknown mesh: %v", err)
	}
}

// TestRecommendLinkerdWarnsWaitWithNative: the injector refuses the sleep with a native
// sidecar (linkerd2#12164), which the plan must say rather than ignore.
func TestRecommendLinkerdWarnsWaitWithNative(t *testing.T) {
	in := linkerdScenario(Native)
	in.CurrentWaitBeforeExit = 20 * s
	p := mustRecommend(t, in)
	if !strings.Contains(strings.Join(p.Warnings, "\n"), "injector refuses that combination") {
		t.Errorf("no warning about proxy-wait-before-exit-seconds with a native sidecar: %q", p.Warnings)
	}
	if p := mustRecommend(t, linkerdScenario(Native)); strings.Contains(strings.Join(p.Warnings, "\n"), "refuses") {
		t.Errorf("a warning without the annotation: %q", p.Warnings)
	}
}

func TestLinkerdTimeline(t *testing.T) {
	for _, sc := range []Sidecar{Native, Classic} {
		p := mustRecommend(t, linkerdScenario(sc))
		var last time.Duration
		var text strings.Builder
		for _, st := range p.Steps {
			if st.At < last {
				t.Errorf("%s: step %q at %s comes after one at %s", sc, st.What, st.At, last)
			}
			last = st.At
			text.WriteString(st.Who + ": " + st.What + "\n")
		}
		if final := p.Steps[len(p.Steps)-1]; final.At != p.GracePeriod || final.Who != "kubelet" {
			t.Errorf("%s: last step %+v, want the kubelet's SIGKILL at the grace period", sc, final)
		}
		for _, banned := range []string{"istio", "Envoy", "pilot-agent", "drain_listeners"} {
			if strings.Contains(text.String(), banned) {
				t.Errorf("%s: Linkerd timeline mentions %s:\n%s", sc, banned, text.String())
			}
		}
		if !strings.Contains(text.String(), "makes no drain call") {
			t.Errorf("%s: the timeline does not say meshdrain makes no drain call:\n%s", sc, text.String())
		}
	}
	classic := mustRecommend(t, linkerdScenario(Classic))
	end := classic.Steps[len(classic.Steps)-2]
	if end.Who != "linkerd-proxy" || end.At != classic.WaitBeforeExit || end.At < classic.AppExitWorst {
		t.Errorf("classic: the proxy's SIGTERM step is %+v, want it at the wait %s, after the app's latest exit %s", end, classic.WaitBeforeExit, classic.AppExitWorst)
	}
}

func TestWriteLinkerd(t *testing.T) {
	p := mustRecommend(t, linkerdScenario(Classic))
	var text bytes.Buffer
	if err := WriteText(&text, p); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"sidecar: classic linkerd-proxy",
		"config.alpha.linkerd.io/proxy-wait-before-exit-seconds: '14'",
		"config.linkerd.io/proxy-enable-native-sidecar: 'false'",
		"proxy-wait-before-exit-seconds  = 14s   ceil(app exits by 14s)",
		"--mesh=linkerd --admin=http://127.0.0.1:4191",
	} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("text lacks %q:\n%s", want, text.String())
		}
	}
	for _, banned := range []string{"istio", "drainDuration", "terminationDrainDuration"} {
		if strings.Contains(text.String(), banned) {
			t.Errorf("Linkerd plan text mentions %s:\n%s", banned, text.String())
		}
	}

	var out bytes.Buffer
	if err := WriteJSON(&out, p, "/meshdrain", nil); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Mesh        string            `json:"mesh"`
		Wait        int               `json:"proxy_wait_before_exit_seconds"`
		Inputs      map[string]any    `json:"inputs"`
		Annotations map[string]string `json:"annotations"`
		Prestop     []string          `json:"prestop_command"`
	}
	if err := json.Unmarshal(out.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	if doc.Mesh != "linkerd" || doc.Wait != 14 || doc.Annotations[LinkerdWaitBeforeExitAnnotation] != "14" || doc.Inputs["drain_duration"] != nil ||
		doc.Prestop[1] != "prestop" || doc.Prestop[2] != "--mesh=linkerd" {
		t.Errorf("json: %+v", doc)
	}
	// An Istio plan's JSON has no mesh key: its output stays what it was before Linkerd.
	out.Reset()
	if err := WriteJSON(&out, mustRecommend(t, userScenario(Classic)), "/meshdrain", nil); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), `"mesh"`) || strings.Contains(out.String(), "wait_before_exit") {
		t.Errorf("Istio JSON gained Linkerd keys:\n%s", out.String())
	}
}

func TestWorkloadMeshAndLinkerdSidecar(t *testing.T) {
	for _, c := range []struct {
		name        string
		annotations string
		containers  string
		mesh        mesh.Mesh
		sidecar     Sidecar
		wait        time.Duration
		err         string
	}{
		{"inject", "linkerd.io/inject: enabled", "", mesh.Linkerd, "", 0, ""},
		{"config", "config.linkerd.io/proxy-cpu-request: 100m", "", mesh.Linkerd, "", 0, ""},
		{"classic by annotation", `config.linkerd.io/proxy-enable-native-sidecar: "false"`, "", mesh.Linkerd, Classic, 0, ""},
		{"native, beta spelling", `config.beta.linkerd.io/proxy-enable-native-sidecar: "true"`, "", mesh.Linkerd, Native, 0, ""},
		{"sleep means classic", `config.alpha.linkerd.io/proxy-wait-before-exit-seconds: "20"`, "", mesh.Linkerd, Classic, 20 * s, ""},
		{"bad sleep", `config.alpha.linkerd.io/proxy-wait-before-exit-seconds: "20s"`, "", mesh.Linkerd, Classic, 0, "not a whole number of seconds"},
		{"istio", `sidecar.istio.io/nativeSidecar: "true"`, "", mesh.Istio, "", 0, ""},
		{"both", "linkerd.io/inject: enabled\n        sidecar.istio.io/inject: \"true\"", "", "", "", 0, ""},
		{"injected proxy container", "{}", "\n      - name: linkerd-proxy\n        image: proxy", mesh.Linkerd, "", 0, ""},
		{"nothing", "{}", "", "", "", 0, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			doc := "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec:\n  template:\n    metadata:\n      annotations:\n        " +
				c.annotations + "\n    spec:\n      containers:\n      - name: web\n        image: web" + c.containers + "\n"
			m, err := ReadManifests(strings.NewReader(doc))
			if err != nil {
				t.Fatal(err)
			}
			w, err := m.Workload("", "web")
			if err != nil {
				t.Fatal(err)
			}
			if mesh, why := w.Mesh(); mesh != c.mesh || (mesh != "" && why == "") {
				t.Errorf("Mesh() = %q (%s), want %q", mesh, why, c.mesh)
			}
			if c.mesh == mesh.Linkerd {
				if sc, _ := w.LinkerdSidecar(); sc != c.sidecar {
					t.Errorf("LinkerdSidecar() = %q, want %q", sc, c.sidecar)
				}
			}
			wait, err := w.WaitBeforeExit()
			if (c.err == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.err)) || wait != c.wait {
				t.Errorf("WaitBeforeExit() = %s, %v; want %s, %q", wait, err, c.wait, c.err)
			}
		})
	}
}
