package plan

import (
	"strings"
	"testing"
)

// TestProxyConfigChangeNeverKeepsWhatItSets: the change line for proxy.istio.io/config names
// each key once, as set (with its old value) or kept, never both; a key that already has the
// plan's value is no change, and a config that needs none is left as it is written.
func TestProxyConfigChangeNeverKeepsWhatItSets(t *testing.T) {
	manifest := func(cfg string) string {
		return `kind: Deployment
metadata: {name: web}
spec:
  template:
    metadata:
      annotations:
        proxy.istio.io/config: '` + cfg + `'
    spec:
      containers:
        - name: web
`
	}
	in := userScenario(Classic) // terminationDrainDuration 15s suffices, drainDuration 45s is enough
	for _, c := range []struct {
		cfg, want string
	}{
		{`{"terminationDrainDuration": "5s", "holdApplicationUntilProxyStarts": true}`,
			"annotation proxy.istio.io/config sets terminationDrainDuration 5s → 15s (keeps holdApplicationUntilProxyStarts)"},
		{`{"drainDuration": "10s", "terminationDrainDuration": "5s"}`,
			"annotation proxy.istio.io/config sets drainDuration 10s → 14s, terminationDrainDuration 5s → 15s"},
		{`{"drainDuration": "45s"}`, "annotation proxy.istio.io/config sets terminationDrainDuration 15s (keeps drainDuration)"},
		{`{"drainDuration": "45s", "terminationDrainDuration": "15s"}`, ""},
		{`{"drainDuration": "45s", "terminationDrainDuration": "15000ms"}`, ""},
	} {
		m, err := ReadManifests(strings.NewReader(manifest(c.cfg)))
		if err != nil {
			t.Fatal(err)
		}
		w, err := m.Workload("", "")
		if err != nil {
			t.Fatal(err)
		}
		in := in
		if d, _ := w.DrainDuration(); d > 0 {
			in.DrainDuration = d
		}
		e, err := NewEdit(mustRecommend(t, in), PatchOptions{Image: DefaultImage, Dir: "/meshdrain"}, w)
		if err != nil {
			t.Fatal(err)
		}
		var got string
		for _, ch := range e.Changes {
			if strings.HasPrefix(ch, "annotation "+ProxyConfigAnnotation) {
				got = ch
			}
		}
		if got != c.want {
			t.Errorf("%s: change %q, want %q", c.cfg, got, c.want)
		}
		if set, kept, ok := strings.Cut(got, " (keeps "); ok {
			for _, k := range strings.Split(strings.TrimSuffix(kept, ")"), ", ") {
				if strings.Contains(set, k+" ") {
					t.Errorf("%s: %q both sets and keeps %s", c.cfg, got, k)
				}
			}
		}
	}
}
