package plan

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	"github.com/meshdrain/meshdrain/pkg/mesh"
)

// deferredScenario is userScenario in regime (b), the route plan writes by default.
func deferredScenario(sc Sidecar) Input {
	in := userScenario(sc)
	in.DeferSidecarDrain = true
	in.CurrentGracePeriod = 0
	return in
}

// TestDeferredPlan: regime (b) writes prestop's --drain-at=end and istio-proxy's hold with
// prestop's timing; terminationDrainDuration bounds only the fallback (the app's drain + 1s)
// and the proxy ends by hold's bound; the timeline says who waits for whom.
func TestDeferredPlan(t *testing.T) {
	for _, sc := range Sidecars {
		t.Run(string(sc), func(t *testing.T) {
			p := mustRecommend(t, deferredScenario(sc))
			if got := p.PrestopArgs(); got[1] != "--drain-at=end" || slices.Index(got[2:], "--drain-at=end") >= 0 {
				t.Errorf("prestop %q: want --drain-at=end once, first", got)
			}
			want := []string{"hold", "--grace-period=" + fmtD(p.GracePeriod), "--app-drain=" + fmtD(p.AppDrain), "--log-file=" + LogFile}
			if got := p.HoldArgs(); !slices.Equal(got, want) {
				t.Errorf("hold %q, want %q", got, want)
			}
			if p.HoldBound != p.Deadline+p.AppDrain || p.HoldBound > p.GracePeriod-KillMargin {
				t.Errorf("hold's bound %s: want deadline %s + app-drain %s, within grace %s − %s", p.HoldBound, p.Deadline, p.AppDrain, p.GracePeriod, KillMargin)
			}
			if p.SidecarExitWorst != p.HoldBound {
				t.Errorf("sidecar exits by %s, want hold's bound %s: hold's drain call ends the proxy at its SIGTERM", p.SidecarExitWorst, p.HoldBound)
			}
			switch sc {
			case Classic:
				if want := 3 * s; p.TerminationDrainDuration != want { // app-drain 2s + 1s
					t.Errorf("terminationDrainDuration %s, want %s: only the fallback's bound", p.TerminationDrainDuration, want)
				}
				if p.ProxyConfig() != `{"terminationDrainDuration": "3s"}` {
					t.Errorf("proxy config %s", p.ProxyConfig())
				}
			case Native:
				if p.TerminationDrainDuration != 0 || p.ProxyConfig() != "" {
					t.Errorf("native: terminationDrainDuration %s, proxy config %q: want none", p.TerminationDrainDuration, p.ProxyConfig())
				}
			}
			var who []string
			for _, st := range p.Steps {
				who = append(who, st.Who)
				if st.Who == "pilot-agent" {
					t.Errorf("step %q: in regime (b) pilot-agent drains only when hold asks", st.What)
				}
			}
			// hold starts at t0, hears prestop's decision, returns; then the kubelet stops the proxy.
			if strings.Count(strings.Join(who, " "), "hold") != 3 {
				t.Errorf("steps by %q: want hold's wait, its drain call and its return", who)
			}
			last := p.Steps[len(p.Steps)-2]
			if last.Who != "kubelet" || !strings.Contains(last.What, "SIGTERM to") || !strings.Contains(last.What, "istio-proxy") || last.Worst != p.HoldBound {
				t.Errorf("the proxy's SIGTERM step %+v: want the kubelet's, by hold's bound %s", last, p.HoldBound)
			}
			var text bytes.Buffer
			if err := WriteText(&text, p); err != nil {
				t.Fatal(err)
			}
			for _, want := range []string{"istio-proxy preStop:           /meshdrain/meshdrain hold --grace-period=", "regime (b): istio-proxy's preStop, meshdrain hold"} {
				if !strings.Contains(text.String(), want) {
					t.Errorf("text lacks %q:\n%s", want, text.String())
				}
			}
			if strings.Contains(text.String(), "regime (a)") {
				t.Errorf("a regime (b) plan says what regime (a) loses:\n%s", text.String())
			}
		})
	}
	// Regime (a): the same plan without hold, as before, and what it loses in one line.
	in := deferredScenario(Classic)
	in.DeferSidecarDrain = false
	p := mustRecommend(t, in)
	if p.HoldArgs() != nil || slices.Contains(p.PrestopArgs(), "--drain-at=end") || p.TerminationDrainDuration != p.AppExitWorst+KillMargin {
		t.Errorf("regime (a): hold %q, prestop %q, terminationDrainDuration %s", p.HoldArgs(), p.PrestopArgs(), p.TerminationDrainDuration)
	}
	if !slices.Contains(p.Warnings, RegimeANote) {
		t.Errorf("regime (a) does not say what it loses: %q", p.Warnings)
	}
	// A Linkerd proxy has no drain to defer.
	in = deferredScenario(Native)
	in.Mesh = mesh.Linkerd
	p = mustRecommend(t, in)
	if p.HoldArgs() != nil || slices.Contains(p.PrestopArgs(), "--drain-at=end") || slices.Contains(p.Warnings, RegimeANote) {
		t.Errorf("linkerd: hold %q, prestop %q, warnings %q", p.HoldArgs(), p.PrestopArgs(), p.Warnings)
	}
}

// deferredEdit plans manifest in regime (b) (or not) and returns the edit, the changed
// manifest and the patch.
func deferredEdit(t *testing.T, manifest string, deferDrain, replace bool) (*Edit, string, string, error) {
	t.Helper()
	m, err := ReadManifests(strings.NewReader(manifest))
	if err != nil {
		t.Fatal(err)
	}
	w, err := m.Workload("", "")
	if err != nil {
		t.Fatal(err)
	}
	in := deferredScenario(Classic)
	in.DeferSidecarDrain = deferDrain
	e, err := NewEdit(mustRecommend(t, in), PatchOptions{Image: DefaultImage, Dir: "/meshdrain", ReplacePreStop: replace}, w)
	if err != nil {
		return nil, "", "", err
	}
	var patch, out bytes.Buffer
	if err := e.WritePatch(&patch); err != nil {
		t.Fatal(err)
	}
	if err := e.Apply(); err != nil {
		t.Fatal(err)
	}
	if err := m.Write(&out); err != nil {
		t.Fatal(err)
	}
	return e, out.String(), patch.String(), nil
}

// withProxy is a Deployment whose team overrides istio-proxy already (resources, an env
// variable, holdApplicationUntilProxyStarts' postStart), given its preStop lines.
func withProxy(preStop string) string {
	return `apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  template:
    spec:
      containers:
        - name: web
          image: web:1
        - name: istio-proxy
          image: auto
          resources:
            requests: {cpu: 200m, memory: 256Mi}
          env:
            - name: ISTIO_META_DNS_CAPTURE
              value: "true"
          lifecycle:
            postStart:
              exec:
                command: ["pilot-agent", "wait"]
` + preStop
}

// TestDeferredEditMergesIntoTheProxyOverride: plan merges hold's preStop and the mount into an
// istio-proxy the workload already overrides, keeping its other fields; the patch sets only
// those (never the image of an override that has one); a re-plan changes nothing.
func TestDeferredEditMergesIntoTheProxyOverride(t *testing.T) {
	e, out, patch, err := deferredEdit(t, withProxy(""), true, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"cpu: 200m", "ISTIO_META_DNS_CAPTURE", `command: ["pilot-agent", "wait"]`, "- hold", "mountPath: /meshdrain"} {
		if !strings.Contains(out, want) {
			t.Errorf("the changed manifest lacks %q:\n%s", want, out)
		}
	}
	if strings.Count(out, "name: istio-proxy") != 1 {
		t.Errorf("want one istio-proxy:\n%s", out)
	}
	if !strings.Contains(strings.Join(e.Changes, "\n"), "container istio-proxy (the workload's own override, its other fields kept): mounts /meshdrain read-only, preStop runs /meshdrain/meshdrain hold") {
		t.Errorf("changes %q", e.Changes)
	}
	proxyPatch := patch[strings.Index(patch, "- name: istio-proxy"):]
	if strings.Contains(proxyPatch, "image:") || strings.Contains(proxyPatch, "cpu") || !strings.Contains(proxyPatch, "- hold") {
		t.Errorf("the patch sets more of istio-proxy than plan's part, or not hold:\n%s", proxyPatch)
	}
	e, again, _, err := deferredEdit(t, out, true, false)
	if err != nil || again != out || len(e.Changes) != 0 {
		t.Errorf("a re-plan: %v, changes %q, output changed: %v", err, e.Changes, again != out)
	}
}

// TestDeferredEditRespectsAProxyPreStop: a preStop of the team's on istio-proxy is refused,
// named, unless --replace-prestop; then replaced whole (the patch nulls its handler), never
// written next to it. hold's own flags are kept on a re-plan; an istio-proxy in initContainers
// and, in regime (a), a hold plan would leave deferring, are refused.
func TestDeferredEditRespectsAProxyPreStop(t *testing.T) {
	httpGet := "            preStop:\n              httpGet: {path: /quitquitquit, port: 15020}\n"
	_, _, _, err := deferredEdit(t, withProxy(httpGet), true, false)
	if err == nil || !strings.Contains(err.Error(), "container istio-proxy of Deployment/web already has a preStop hook (httpGet :15020/quitquitquit)") ||
		!strings.Contains(err.Error(), "--replace-prestop") {
		t.Errorf("an httpGet preStop on istio-proxy: %v", err)
	}
	e, out, patch, err := deferredEdit(t, withProxy(httpGet), true, true)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out, "httpGet") || !strings.Contains(patch, "httpGet: null") || !strings.Contains(e.ProxyReplacementNote(), "httpGet :15020/quitquitquit") {
		t.Errorf("--replace-prestop: note %q, patch:\n%s\nmanifest:\n%s", e.ProxyReplacementNote(), patch, out)
	}

	hold := "            preStop:\n              exec:\n                command: [/meshdrain/meshdrain, hold, --grace-period=30s, --channel=@team, --deadline=20s]\n"
	e, out, _, err = deferredEdit(t, withProxy(hold), true, false)
	if err != nil {
		t.Fatal(err)
	}
	cmd := e.ProxyPrestopCommand()
	if !slices.Contains(cmd, "--channel=@team") || slices.Contains(cmd, "--deadline=20s") || !slices.Contains(cmd, "--grace-period=15s") {
		t.Errorf("re-plan of a hold preStop: %q", cmd)
	}
	if !strings.Contains(strings.Join(e.Changes, "\n"), "--grace-period 30s → 15s") || !strings.Contains(strings.Join(e.Changes, "\n"), "removes --deadline=20s (hold derives") {
		t.Errorf("changes %q", e.Changes)
	}
	if _, _, _, err := deferredEdit(t, out, false, false); err == nil || !strings.Contains(err.Error(), "runs meshdrain hold") {
		t.Errorf("regime (a) over a hold override: %v", err)
	}

	inInit := strings.Replace(withProxy(""), "      containers:\n", "      initContainers:\n        - name: istio-proxy\n          image: auto\n      containers:\n", 1)
	if _, _, _, err := deferredEdit(t, inInit, true, false); err == nil || !strings.Contains(err.Error(), "move it to containers") {
		t.Errorf("istio-proxy in initContainers: %v", err)
	}
	m, err := ReadManifests(strings.NewReader(withProxy("")))
	if err != nil {
		t.Fatal(err)
	}
	w, err := m.Workload("", ProxyContainerName)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewEdit(mustRecommend(t, deferredScenario(Classic)), PatchOptions{Image: DefaultImage, Dir: "/meshdrain"}, w); err == nil ||
		!strings.Contains(err.Error(), "the app container cannot be istio-proxy") {
		t.Errorf("--container istio-proxy: %v", err)
	}
	other := strings.Replace(withProxy(""), "          image: auto\n", "          image: auto\n          volumeMounts:\n            - {name: certs, mountPath: /meshdrain}\n", 1)
	if _, _, _, err := deferredEdit(t, other, true, false); err == nil || !strings.Contains(err.Error(), "already mounts volume certs at /meshdrain") {
		t.Errorf("another volume at /meshdrain in istio-proxy: %v", err)
	}
}

// TestRemovingTheLastItemOfTheLastContainer: removing a preStop's last flag (a hand-set
// --deadline, the container's last line) while adding a field after that container wrote two
// edits at one place ("overlapping edits"); the removal now leaves the line's end alone.
func TestRemovingTheLastItemOfTheLastContainer(t *testing.T) {
	manifest := `kind: Deployment
metadata: {name: web}
spec:
  template:
    spec:
      terminationGracePeriodSeconds: 15
      containers:
        - name: web
          lifecycle:
            preStop:
              exec:
                command:
                  - /meshdrain/meshdrain
                  - prestop
                  - --grace-period=15s
                  - --deadline=10s
`
	for _, deferDrain := range []bool{false, true} {
		_, out, _, err := deferredEdit(t, manifest, deferDrain, false)
		if err != nil {
			t.Fatal(err)
		}
		checkStrict(t, []byte("apiVersion: apps/v1\n"+out))
		if strings.Contains(out, "--deadline") || !strings.Contains(out, "          volumeMounts:\n") {
			t.Errorf("regime (b) %v:\n%s", deferDrain, out)
		}
	}
}

// TestDeferredEditWithoutAWorkload: plan -o yaml without -f adds plan's own override, image
// auto, to the patch.
func TestDeferredEditWithoutAWorkload(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteYAML(&buf, mustRecommend(t, deferredScenario(Native)), PatchOptions{Container: "app", Image: DefaultImage, Dir: "/meshdrain"}); err != nil {
		t.Fatal(err)
	}
	proxy := buf.String()[strings.Index(buf.String(), "- name: istio-proxy"):]
	for _, want := range []string{"image: auto", "readOnly: true", "- hold", "--grace-period=" + fmtD(mustRecommend(t, deferredScenario(Native)).GracePeriod)} {
		if !strings.Contains(proxy, want) {
			t.Errorf("the patch's istio-proxy lacks %q:\n%s", want, proxy)
		}
	}
}
