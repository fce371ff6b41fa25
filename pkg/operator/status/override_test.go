package status

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// podWith is a live pod with the given containers and initContainers, as YAML lists.
func podWith(containers, initContainers string) []byte {
	return []byte("apiVersion: v1\nkind: Pod\nmetadata:\n  name: hello\n  namespace: shop\nspec:\n" +
		"  initContainers:\n" + initContainers + "  containers:\n" + containers)
}

const (
	appRegimeB = `  - name: hello
    image: example.com/hello:1.0
    lifecycle:
      preStop:
        exec:
          command: [/meshdrain/meshdrain, prestop, --drain-at=end, --grace-period=52s]
`
	appRegimeA = `  - name: hello
    image: example.com/hello:1.0
    lifecycle:
      preStop:
        exec:
          command: [/meshdrain/meshdrain, prestop, --grace-period=52s]
`
	overrideAuto = `  - name: istio-proxy
    image: auto
    volumeMounts: [{name: meshdrain, mountPath: /meshdrain, readOnly: true}]
    lifecycle:
      preStop:
        exec:
          command: [/meshdrain/meshdrain, hold, --grace-period=52s]
`
	noInit = "  - name: meshdrain-install\n    image: ghcr.io/meshdrain/meshdrain:v0.1.0\n"
)

// TestCheckProxyOverride judges live pods: Istio's injected proxies of both sidecar modes
// (testdata/override, made from examples/testdata/istio-injected) with and without the
// override merged, and the pods whose proxy no injector filled or that have none.
func TestCheckProxyOverride(t *testing.T) {
	fixture := func(name string) []byte {
		data, err := os.ReadFile(filepath.Join("testdata", "override", name))
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	for _, tc := range []struct {
		name    string
		pod     []byte
		status  string
		message string // a part of the item's message
		fix     string // a part of its fix; "" for none
	}{
		{"classic merged", fixture("classic-merged.yaml"), Pass, "classic sidecar, image gcr.io/istio-testing/proxyv2:latest) runs meshdrain hold", ""},
		{"native merged", fixture("native-merged.yaml"), Pass, "native sidecar", ""},
		{"kubectl -o json", fixture("classic-merged.json"), Pass, "the injector merged the override", ""},
		{"classic not merged", fixture("classic-unmerged.yaml"), Fail,
			"lacks the meshdrain hold preStop and a mount of the meshdrain volume while hello's preStop runs meshdrain prestop --drain-at=end", "Istio older than 1.9"},
		{"native not merged", fixture("native-unmerged.yaml"), Fail, "lacks the meshdrain hold preStop", "spec.containers"},
		{"image auto", podWith(appRegimeB+overrideAuto, noInit), Fail, "image auto", "kubectl get namespace shop --show-labels"},
		{"image auto in regime (a)", podWith(appRegimeA+overrideAuto, noInit), Fail, "cannot start", "kubectl get namespace shop"},
		{"override left in initContainers", podWith(appRegimeB, noInit+overrideAuto), Fail, "initContainers has image auto", "spec.containers"},
		{"no proxy", podWith(appRegimeB, noInit), Fail, "has no istio-proxy", "--mesh none"},
		{"regime (a)", podWith(appRegimeA, noInit), Pass, "no override needed", ""},
		{"regime (a) by a later flag", podWith(strings.Replace(appRegimeB, "--grace-period=52s", "--drain-at=start", 1), noInit), Pass, "no override needed", ""},
		{"regime (b) from the environment", podWith(appRegimeA+"    env:\n    - {name: MESHDRAIN_DRAIN_AT, value: end}\n", noInit), Fail, "has no istio-proxy", ""},
		{"no meshdrain", podWith("  - name: hello\n    image: example.com/hello:1.0\n", ""), Pass, "no override needed", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			it, err := CheckProxyOverride(tc.pod)
			if err != nil {
				t.Fatal(err)
			}
			if it.Name != OverrideItem || it.Status != tc.status || !strings.Contains(it.Message, tc.message) || !strings.Contains(it.Fix, tc.fix) {
				t.Errorf("got %+v, want status %s, a message with %q and a fix with %q", it, tc.status, tc.message, tc.fix)
			}
			if (it.Status == Fail) != (it.Fix != "") {
				t.Errorf("a failed item (only) says its fix: %+v", it)
			}
		})
	}
}

func TestCheckProxyOverrideRefusesWhatIsNotAPod(t *testing.T) {
	for _, in := range []string{"kind: Deployment\nspec: {}\n", "kind: [", ""} {
		if it, err := CheckProxyOverride([]byte(in)); err == nil {
			t.Errorf("%q: got %+v, want an error", in, it)
		}
	}
}
