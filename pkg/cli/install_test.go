package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestInstallCommandCopiesTheRunningExecutable(t *testing.T) {
	dir := t.TempDir()
	code, out, errOut := runMain(t, "install", dir)
	if code != ExitOK {
		t.Fatalf("exit %d, stderr %s", code, errOut)
	}
	dest := filepath.Join(dir, "meshdrain")
	if !strings.HasPrefix(out, "installed "+dest+" (") {
		t.Fatalf("stdout = %q", out)
	}
	exe, _ := os.Executable()
	want, _ := os.ReadFile(exe)
	got, err := os.ReadFile(dest)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("installed copy differs from the running executable (err %v)", err)
	}
}

func TestInstallCommandErrors(t *testing.T) {
	if code, _, _ := runMain(t, "install"); code != ExitUsage {
		t.Errorf("no DEST: exit %d, want %d", code, ExitUsage)
	}
	missing := filepath.Join(t.TempDir(), "nope") + "/"
	if code, _, errOut := runMain(t, "install", missing); code != ExitFailure || !strings.Contains(errOut, "does not exist") {
		t.Errorf("missing dir: exit %d stderr %q, want %d", code, errOut, ExitFailure)
	}
}
