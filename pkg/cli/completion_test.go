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
	for _, name := range []string{"install", "plan", "completion"} {
		code, out, errOut := runMain(t, name, "--help")
		if code != ExitOK || !strings.Contains(out, "Examples:\n  ") || !strings.Contains(out, "meshdrain "+name) {
			t.Errorf("%s --help: exit %d, stderr %q, no example in:\n%s", name, code, errOut, out)
		}
	}
}
