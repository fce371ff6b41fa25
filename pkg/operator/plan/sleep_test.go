package plan

import (
	"strings"
	"testing"
	"time"

	yaml "go.yaml.in/yaml/v3"
)

func TestPreStopSleep(t *testing.T) {
	for _, c := range []struct {
		handler string
		sleeps  time.Duration // 0: not a hook that only sleeps
	}{
		{`exec: {command: ["sh", "-c", "sleep 15"]}`, 15 * s},
		{`exec: {command: ["/bin/sh", "-c", "sleep 15"]}`, 15 * s},
		{`exec: {command: ["sleep", "15"]}`, 15 * s},
		{`exec: {command: ["/bin/sleep", "15"]}`, 15 * s},
		{`exec: {command: ["/usr/bin/sleep", "20"]}`, 20 * s},
		{`exec: {command: ["sh", "-c", "sleep 15s"]}`, 15 * s},
		{`exec: {command: ["bash", "-c", "sleep 15"]}`, 15 * s},
		{`exec: {command: ["/bin/bash", "-c", "  sleep 15 ;\n"]}`, 15 * s},
		{`exec: {command: ["sh", "-c", "sleep 15;"]}`, 15 * s},
		{`exec: {command: ["sh", "-c", "/bin/sleep 15"]}`, 15 * s},
		{`exec: {command: ["sh", "-c", "sleep 0.5"]}`, 500 * ms},
		{`exec: {command: ["sh", "-c", "sleep 1m"]}`, time.Minute},
		{"exec:\n  command:\n  - sh\n  - -c\n  - |\n    sleep 15\n", 15 * s},
		{`sleep: {seconds: 20}`, 20 * s},

		// Anything that does more than sleep, or a sleep plan cannot stand in for.
		{`exec: {command: ["sh", "-c", "sleep 15 && kill 1"]}`, 0},
		{`exec: {command: ["sh", "-c", "sleep 15; nginx -s quit"]}`, 0},
		{`exec: {command: ["sh", "-c", "sleep 15\nkill 1"]}`, 0},
		{`exec: {command: ["sh", "-c", "echo bye; sleep 15"]}`, 0},
		{`exec: {command: ["sh", "-c", "sleep $DELAY"]}`, 0},
		{`exec: {command: ["sh", "-c", "sleep 5 10"]}`, 0},
		{`exec: {command: ["sh", "-c", "sleep"]}`, 0},
		{`exec: {command: ["sh", "-c", "sleep", "15"]}`, 0}, // sleep with no argument, $0=15
		{`exec: {command: ["sleep", "infinity"]}`, 0},
		{`exec: {command: ["sleep 15"]}`, 0}, // no shell: a binary named "sleep 15"
		{`exec: {command: ["python", "-c", "sleep 15"]}`, 0},
		{`exec: {command: ["sh", "-c", "/app/drain.sh"]}`, 0},
		{`httpGet: {path: /shutdown, port: 8080}`, 0},
		{`sleep: {seconds: soon}`, 0},
		{"sleep: {seconds: 5}\nexec: {command: [sleep, \"5\"]}", 0}, // two handlers: invalid
	} {
		var doc yaml.Node
		if err := yaml.Unmarshal([]byte(c.handler), &doc); err != nil {
			t.Fatalf("%s: %v", c.handler, err)
		}
		got, ok := preStopSleep(doc.Content[0])
		if ok != (c.sleeps > 0) || got != c.sleeps {
			t.Errorf("%s: sleeps %s (%v), want %s", c.handler, got, ok, c.sleeps)
		}
	}
}

func workloadWithPreStop(t *testing.T, handler string) *Workload {
	t.Helper()
	manifest := "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec:\n  template:\n    spec:\n      containers:\n" +
		"      - name: web\n        image: web:1\n        lifecycle:\n          preStop:\n" + indentText(handler, "            ")
	m, err := ReadManifests(strings.NewReader(manifest))
	if err != nil {
		t.Fatal(err)
	}
	w, err := m.Workload("", "")
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func indentText(text, prefix string) string {
	var b strings.Builder
	for _, l := range strings.Split(strings.TrimSuffix(text, "\n"), "\n") {
		b.WriteString(prefix + l + "\n")
	}
	return b.String()
}

// TestSleepingPreStopIsReplacedWithoutTheFlag: a preStop that only sleeps is replaced and the
// edit says so; any other needs --replace-prestop, and the refusal does not hint that a sleep
// would be kept or replaced anyway.
func TestSleepingPreStopIsReplacedWithoutTheFlag(t *testing.T) {
	p := mustRecommend(t, Input{P99: 450 * ms, EDSLag: 8 * s, AppDrain: 2 * s, Sidecar: Classic})
	opts := PatchOptions{Image: DefaultImage, Dir: "/meshdrain"}

	for _, handler := range []string{
		"exec:\n  command: [\"sh\", \"-c\", \"sleep 15\"]",
		"exec:\n  command: [\"/bin/sleep\", \"15\"]",
		"sleep:\n  seconds: 15",
	} {
		w := workloadWithPreStop(t, handler)
		e, err := NewEdit(p, opts, w)
		if err != nil {
			t.Errorf("%s: refused without --replace-prestop: %v", handler, err)
			continue
		}
		if e.Replaced != w.PreStop || !e.ReplacedOnlySlept {
			t.Errorf("%s: replaced %q (only slept %v), want %q", handler, e.Replaced, e.ReplacedOnlySlept, w.PreStop)
		}
		if note := e.ReplacementNote(); !strings.Contains(note, "container web") || !strings.Contains(note, w.PreStop) || !strings.Contains(note, "only slept 15s") {
			t.Errorf("%s: note %q does not say what was replaced", handler, note)
		}
		var patch strings.Builder
		if err := e.WritePatch(&patch); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(patch.String(), "# Replaces the preStop of container web, "+w.PreStop+", which only slept 15s") {
			t.Errorf("%s: patch does not say what it replaces:\n%s", handler, patch.String())
		}
		if strings.HasPrefix(handler, "sleep:") && !strings.Contains(patch.String(), "sleep: null") {
			t.Errorf("the patch keeps the sleep action next to exec (two handlers):\n%s", patch.String())
		}
	}

	for _, handler := range []string{
		"httpGet:\n  path: /shutdown\n  port: 8080",
		"exec:\n  command: [\"sh\", \"-c\", \"sleep 15 && nginx -s quit\"]",
	} {
		w := workloadWithPreStop(t, handler)
		_, err := NewEdit(p, opts, w)
		if err == nil || !strings.Contains(err.Error(), "--replace-prestop") || !strings.Contains(err.Error(), w.PreStop) ||
			!strings.Contains(err.Error(), "does more than sleep") {
			t.Errorf("%s: err %v, want a refusal naming the hook and --replace-prestop", handler, err)
		}
		o := opts
		o.ReplacePreStop = true
		e, err := NewEdit(p, o, w)
		if err != nil {
			t.Fatal(err)
		}
		if e.ReplacedOnlySlept || !strings.Contains(e.ReplacementNote(), "--replace-prestop") {
			t.Errorf("%s: note %q", handler, e.ReplacementNote())
		}
	}

	// meshdrain's own hook is no replacement at all.
	w := workloadWithPreStop(t, "exec:\n  command: [/meshdrain/meshdrain, prestop]")
	e, err := NewEdit(p, opts, w)
	if err != nil {
		t.Fatalf("meshdrain's preStop: %v", err)
	}
	if e.Replaced != "" || e.ReplacementNote() != "" {
		t.Errorf("meshdrain's preStop replaced: %q", e.ReplacementNote())
	}
}
