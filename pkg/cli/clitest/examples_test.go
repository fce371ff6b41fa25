package clitest

import (
	"reflect"
	"testing"
)

// TestParseExamples: each kind of line the binaries' help shows, read as the shell, kubectl
// or the kubelet would run it.
func TestParseExamples(t *testing.T) {
	text := `  # a comment, then a blank line

  meshdrain plan --p99 450ms -f deploy.yaml -o yaml > deploy.meshdrain.yaml
  source <(meshdrain completion bash)
  meshdrain completion zsh > "${fpath[1]}/_meshdrain"
  meshdrain completion powershell | Out-String | Invoke-Expression
  kubectl exec deploy/web -c web -- /meshdrain/meshdrain version -o json
  kubectl port-forward deploy/web 15000:15000 &
  meshdrain-sim emulate --inbound '8080=127.0.0.1:15006>127.0.0.1:8080' \
    --agent exit-on-zero
  lifecycle:
    preStop:
      exec:
        command: ["/meshdrain/meshdrain", "prestop", "--grace-period=52s",
                  "--log-file=/proc/1/fd/1"]`
	got, err := parseExamples("meshdrain x", text)
	if err != nil {
		t.Fatal(err)
	}
	want := []Example{
		{Program: "meshdrain", Args: []string{"plan", "--p99", "450ms", "-f", "deploy.yaml", "-o", "yaml"}},
		{Program: "meshdrain", Args: []string{"completion", "bash"}},
		{Program: "meshdrain", Args: []string{"completion", "zsh"}},
		{Program: "meshdrain", Args: []string{"completion", "powershell"}},
		{Program: "meshdrain", Args: []string{"version", "-o", "json"}, InPod: true},
		{Program: "kubectl", Args: []string{"port-forward", "deploy/web", "15000:15000"}},
		{Program: "meshdrain-sim", Args: []string{"emulate", "--inbound", "8080=127.0.0.1:15006>127.0.0.1:8080", "--agent", "exit-on-zero"}},
		{Program: "meshdrain", Args: []string{"prestop", "--grace-period=52s", "--log-file=/proc/1/fd/1"}, InPod: true},
	}
	if len(got) != len(want) {
		t.Fatalf("%d examples, want %d: %+v", len(got), len(want), got)
	}
	for i := range want {
		g := got[i]
		if g.Program != want[i].Program || !reflect.DeepEqual(g.Args, want[i].Args) || g.InPod != want[i].InPod || g.Command != "meshdrain x" {
			t.Errorf("example %d (%q): %+v, want %+v", i, g.Line, g, want[i])
		}
	}
	if want := `meshdrain-sim emulate --inbound '8080=127.0.0.1:15006>127.0.0.1:8080' --agent exit-on-zero`; got[6].Line != want {
		t.Errorf("continued line %q, want %q", got[6].Line, want)
	}
	if _, err := parseExamples("x", `  meshdrain plan --p99 '450ms`); err == nil {
		t.Error("an unterminated quote parsed")
	}
}

func TestUnderDir(t *testing.T) {
	dir := t.TempDir()
	for arg, want := range map[string]string{
		"/meshdrain":                 dir + "/meshdrain",
		"--svg=/tmp/rollout":         "--svg=" + dir + "/tmp/rollout",
		"--log-file=/proc/1/fd/1":    "--log-file=/proc/1/fd/1",
		"deploy.yaml":                "deploy.yaml",
		"--admin=http://127.0.0.1:1": "--admin=http://127.0.0.1:1",
	} {
		if got := underDir(t, dir, arg); got != want {
			t.Errorf("underDir(%q) = %q, want %q", arg, got, want)
		}
	}
}
