package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/meshdrain/meshdrain/pkg/mesh/kernel/kerneltest"
)

// TestPrestopMeshNoneUnprivileged runs the binary's prestop --mesh none as the distroless
// nonroot user (uid 65532) with no capability at all, in a network namespace of the test's
// own, beside a keep-alive client that never learns and a probe from an ignored source: the
// socket table, the destroy broadcasts and /proc/net/snmp must all be readable so, and the
// holder named. Root is needed to become uid 65532 (setpriv), and a namespace where that
// uid exists: unshare -n, not -rn.
func TestPrestopMeshNoneUnprivileged(t *testing.T) {
	if !kerneltest.Inside(t, true) {
		return
	}
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Skip("setpriv(1) is not installed")
	}
	// The test binary's directory is root's own (0700): the hook gets a copy it can run.
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	hook := filepath.Join(dir, "meshdrain")
	raw, err := os.ReadFile(binary)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(hook, raw, 0o755); err != nil {
		t.Fatal(err)
	}

	s := kerneltest.StartServer(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	holder := kerneltest.NewClient(s, "127.0.0.2")
	holder.KeepAlive(ctx, t, 50*time.Millisecond, time.Time{})
	kerneltest.NewClient(s, "127.0.0.9").PerRequest(ctx, 100*time.Millisecond, time.Time{}, true)

	const bound = time.Second
	cmd := exec.Command(setpriv, "--reuid=65532", "--regid=65532", "--clear-groups", "--inh-caps=-all", "--bounding-set=-all", "--",
		hook, "prestop", "--mesh", "none", "--port", strconv.Itoa(s.Port), "--ignore-source", "$(PROBE_IP)",
		"--eds-lag-bound", bound.String(), "--grace-period", "10s", "--min-wait", "500ms", "--quiet", "500ms",
		"--settled-quiet", "500ms", "--poll", "100ms", "--hold-channel=")
	cmd.Env = append(os.Environ(), "PROBE_IP=127.0.0.9")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	start := time.Now()
	err = cmd.Run()
	took := time.Since(start)
	t.Logf("prestop as uid 65532 took %v:\n%s", took.Round(time.Millisecond), stderr.String())
	if err != nil {
		t.Fatalf("prestop --mesh none as uid 65532: %v", err)
	}
	var final map[string]any
	sc := bufio.NewScanner(&stderr)
	for sc.Scan() {
		var ev map[string]any
		if json.Unmarshal(sc.Bytes(), &ev) == nil && ev["msg"] == "drain finished" {
			final = ev
		}
	}
	if final == nil {
		t.Fatal("no final event")
	}
	if final["reason"] != "quiet" || final["client_evidence"] != "socket-table" || final["signal"] != "kernel" {
		t.Errorf("reason %v, client_evidence %v, signal %v: want quiet, socket-table, kernel", final["reason"], final["client_evidence"], final["signal"])
	}
	if got, _ := final["clients_never_learn"].([]any); len(got) != 1 || got[0] != "127.0.0.2" {
		t.Errorf("clients_never_learn %v, want the holder 127.0.0.2", final["clients_never_learn"])
	}
	if strings.Contains(stderr.String(), "127.0.0.9") {
		t.Errorf("the ignored probe source is named in the log")
	}
	if rss, _ := final["peak_rss_kib"].(float64); rss <= 0 || rss > 32<<10 {
		t.Errorf("peak RSS %v KiB, want at most 32 MiB", final["peak_rss_kib"])
	} else {
		t.Logf("peak RSS %.0f KiB", rss)
	}
	elapsed, _ := final["elapsed_ms"].(float64)
	if d := time.Duration(elapsed)*time.Millisecond - bound; d > 1200*time.Millisecond+kerneltest.RunQueueWaitOf(os.Getpid()) {
		t.Errorf("the holder kept the hook %v past the lag bound", d)
	}
}
