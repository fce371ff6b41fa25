package cli

import (
	"strings"
	"testing"
)

func TestCompletionScripts(t *testing.T) {
	for shell, marker := range map[string]string{
		"bash":       "__start_meshdrain",
		"zsh":        "#compdef meshdrain",
		"fish":       "complete -c meshdrain",
		"powershell": "Register-ArgumentCompleter",
	} {
		code, out, errOut := runMain(t, "completion", shell)
		if code != ExitOK || !strings.Contains(out, marker) {
			t.Errorf("completion %s: exit %d, stderr %q, output lacks %q", shell, code, errOut, marker)
		}
	}
	for _, args := range [][]string{{"completion"}, {"completion", "tcsh"}} {
		if code, _, _ := runMain(t, args...); code != ExitUsage {
			t.Errorf("%v: exit %d, want %d", args, code, ExitUsage)
		}
	}
}

func TestCompletionOfFlagValues(t *testing.T) {
	// What the shell scripts call: cobra's hidden __complete command.
	code, out, _ := runMain(t, "__complete", "plan", "--sidecar", "")
	if code != ExitOK {
		t.Fatalf("exit %d", code)
	}
	for _, want := range []string{"classic", "exit-on-zero", "native"} {
		if !strings.Contains(out, want) {
			t.Errorf("--sidecar completions lack %s:\n%s", want, out)
		}
	}
	code, out, _ = runMain(t, "__complete", "")
	if code != ExitOK {
		t.Fatalf("exit %d", code)
	}
	for _, want := range []string{"install", "plan", "completion"} {
		if !strings.Contains(out, want) {
			t.Errorf("command completions lack %s:\n%s", want, out)
		}
	}
}

// TestHelpHasExamples checks that each of these commands' --help shows an example, since the
// help text is the documentation a person in a pod's shell has.
func TestHelpHasExamples(t *testing.T) {
	for _, name := range []string{"install", "plan", "completion", "version", "status", "check", "prestop", "hold"} {
		code, out, errOut := runMain(t, name, "--help")
		if code != ExitOK || !strings.Contains(out, "Examples:\n  ") || !strings.Contains(out, "meshdrain "+name) {
			t.Errorf("%s --help: exit %d, stderr %q, no example in:\n%s", name, code, errOut, out)
		}
	}
}

// freeFormFlags take any string (a URL, a path, a name): no completion list applies.
var freeFormFlags = map[string]bool{
	"admin": true, "cluster": true, "http-prefix": true, "pidfile": true, "shutdown-url": true, "exec": true,
	"log-file": true, "source": true, "eds-lag": true, "meshdrain-bin": true, "inbound": true, "inclusion-prefix": true,
	"bind-address": true, "filename": true, "workload": true, "container": true, "image": true, "dir": true,
	"probe-path": true, "channel": true, "hold-channel": true, "drain-url": true, "ignore-source": true,
	"app-metrics": true, "app-requests": true, "pod-spec": true, "lag-from": true, "lag-dist": true,
}

// TestEveryEnumFlagCompletes: every string flag of every command either completes its values
// or is declared free-form, so a new enum flag cannot ship without completion.
func TestEveryEnumFlagCompletes(t *testing.T) {
	root := NewRootCommand(streams{in: strings.NewReader(""), out: &strings.Builder{}, err: &strings.Builder{}})
	for _, cmd := range root.Commands() {
		for _, f := range stringFlags(cmd) {
			if _, ok := cmd.GetFlagCompletionFunc(f.Name); !ok && !freeFormFlags[f.Name] {
				t.Errorf("%s --%s takes a string but completes nothing: add it to enumFlags or freeFormFlags", cmd.Name(), f.Name)
			}
		}
	}
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"__complete", "status", "-o", ""}, []string{"text", "json", "yaml"}},
		{[]string{"__complete", "check", "--min-signal", ""}, []string{"requests", "completions", "connections"}},
		{[]string{"__complete", "prestop", "--drain-mode", ""}, []string{"graceful", "immediate", "none"}},
		// prestop parses its own flags (fail-safe): its completion is its own too.
		{[]string{"__complete", "prestop", "--drain-mode=i"}, []string{"--drain-mode=immediate"}},
		{[]string{"__complete", "prestop", "--grace-period", "30s", "--signal", ""}, []string{"TERM", "USR1"}},
		{[]string{"__complete", "version", "-o", ""}, []string{"yaml"}},
		{[]string{"__complete", "status", "--mesh", ""}, []string{"auto", "istio", "envoy", "linkerd"}},
		{[]string{"__complete", "plan", "--mesh", ""}, []string{"istio", "linkerd"}},
	} {
		code, out, _ := runMain(t, c.args...)
		for _, want := range c.want {
			if code != ExitOK || !strings.Contains(out, want+"\n") {
				t.Errorf("%v: exit %d, completions lack %s:\n%s", c.args[1:], code, want, out)
			}
		}
	}
}

// TestOutputFormats: every command that prints data takes -o text|json|yaml.
func TestOutputFormats(t *testing.T) {
	for _, format := range []string{"json", "yaml"} {
		code, out, errOut := runMain(t, "version", "-o", format)
		if code != ExitOK || !strings.Contains(out, "release") || !strings.Contains(out, "v0.1.0") {
			t.Errorf("version -o %s: exit %d %s\n%s", format, code, errOut, out)
		}
		code, out, errOut = runMain(t, "plan", "--mesh", "istio", "--p99", "450ms", "--eds-lag", "8s", "-o", format, "--container", "web")
		if format == "yaml" { // without -f, plan's YAML is the patch
			if code != ExitOK || !strings.Contains(out, "terminationGracePeriodSeconds: 15") {
				t.Errorf("plan -o yaml: exit %d %s", code, errOut)
			}
			continue
		}
		if code != ExitOK || !strings.Contains(out, "termination_grace_period_seconds") {
			t.Errorf("plan -o %s: exit %d %s", format, code, errOut)
		}
	}
	for _, args := range [][]string{{"version"}, {"status"}, {"check"}, {"plan", "--p99", "1s", "--eds-lag", "2s"}} {
		code, _, errOut := runMain(t, append(args, "-o", "xml")...)
		if code != ExitUsage || !strings.Contains(errOut, "text, json") {
			t.Errorf("%v -o xml: exit %d, stderr %q", args, code, errOut)
		}
	}
}
