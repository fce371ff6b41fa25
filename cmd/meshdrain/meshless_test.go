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
	final := finalEvent(t, stderr.Bytes())
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

// TestPrestopMeshNoneMonitorPastTheBound runs the binary's prestop --mesh none beside a
// monitor that opens a connection to the app's port every 700 ms, before the hook and on past
// its lag bound (issue 37), more often than the settled quiet window (1 s), so that every open
// counted held the hook to its deadline (14 s, exit 3): it is taken for a caller that
// addresses the pod directly, so the hook exits 0 a few of its periods past the bound, and the
// final event names it.
func TestPrestopMeshNoneMonitorPastTheBound(t *testing.T) {
	if !kerneltest.Inside(t, false) {
		return
	}
	s := kerneltest.StartServer(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const period = 700 * time.Millisecond
	kerneltest.NewClient(s, "127.0.0.3").PerRequest(ctx, period, time.Time{}, false)

	const bound = 3 * time.Second
	cmd := exec.Command(binary, "prestop", "--mesh", "none", "--port", strconv.Itoa(s.Port),
		"--eds-lag-bound", bound.String(), "--grace-period", "20s", "--app-drain", "5s", "--min-wait", bound.String(),
		"--poll", "100ms", "--hold-channel=")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	t.Logf("prestop beside a monitor every %v:\n%s", period, stderr.String())
	if err != nil {
		t.Fatalf("prestop --mesh none beside a monitor: %v (want exit 0)", err)
	}
	final := finalEvent(t, stderr.Bytes())
	if got, _ := final["clients_addressing_pod"].([]any); len(got) != 1 || got[0] != "127.0.0.3" {
		t.Errorf("clients_addressing_pod %v, want the monitor 127.0.0.3", final["clients_addressing_pod"])
	}
	elapsed, _ := final["elapsed_ms"].(float64)
	// Its third open past the bound comes within 3 periods of it; the settled window after
	// the second, and a poll.
	if d := time.Duration(elapsed)*time.Millisecond - bound; final["reason"] != "quiet" || d > 3*period+time.Second+kerneltest.RunQueueWait() {
		t.Errorf("reason %v, %v past the lag bound: want quiet within three of the monitor's periods and a second", final["reason"], d)
	}
}

// finalEvent is the hook's final event ("drain finished") among its stderr lines.
func finalEvent(t *testing.T, stderr []byte) map[string]any {
	t.Helper()
	var final map[string]any
	sc := bufio.NewScanner(bytes.NewReader(stderr))
	for sc.Scan() {
		var ev map[string]any
		if json.Unmarshal(sc.Bytes(), &ev) == nil && ev["msg"] == "drain finished" {
			final = ev
		}
	}
	if final == nil {
		t.Fatal("no final event")
	}
	return final
}
