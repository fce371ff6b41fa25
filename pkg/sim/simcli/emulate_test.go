package simcli

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshdrain/meshdrain/pkg/cli"
)

func runMain(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = Main(args, strings.NewReader(""), &out, &errOut)
	return code, out.String(), errOut.String()
}

// runMeshdrain runs the pod binary's commands (status, check) in-process, as a user would
// point them at an emulator.
func runMeshdrain(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = cli.Main(args, strings.NewReader(""), &out, &errOut)
	return code, out.String(), errOut.String()
}

// statusJSON is `meshdrain status -o json` decoded, as far as these tests read it.
func statusJSON(t *testing.T, args ...string) (doc struct {
	Mesh    string `json:"mesh"`
	Inbound []struct {
		RequestsTotal *float64 `json:"requests_total"`
	} `json:"inbound"`
}) {
	t.Helper()
	code, out, errOut := runMeshdrain(t, append([]string{"status", "-o", "json"}, args...)...)
	if code != ExitOK {
		t.Fatalf("status: exit %d %s", code, errOut)
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil || len(doc.Inbound) == 0 {
		t.Fatalf("status -o json: %v\n%s", err, out)
	}
	return doc
}

func sendRequests(t *testing.T, url string, n int) {
	t.Helper()
	client := &http.Client{Transport: &http.Transport{Proxy: nil}, Timeout: 5 * time.Second}
	for i := 0; i < n; i++ {
		resp, err := client.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
	}
}

// syncBuffer is a bytes buffer the emulator writes to while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestEmulateLinkerd runs `meshdrain-sim emulate --mesh linkerd` in-process, reads it with status
// and check as a user would, then ends it as the pod's deletion does.
func TestEmulateLinkerd(t *testing.T) {
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }))
	defer app.Close()
	var out, errOut syncBuffer
	root := NewRootCommand(streams{in: strings.NewReader(""), out: &out, err: &errOut})
	root.SetArgs([]string{"emulate", "--mesh", "linkerd", "--admin", "http://127.0.0.1:0",
		"--inbound", "8080=127.0.0.1:0>" + strings.TrimPrefix(app.URL, "http://"), "--probe-path", "/healthz"})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()

	var admin, inboundAddr string
	deadline := time.Now().Add(5 * time.Second)
	for admin == "" || inboundAddr == "" {
		if time.Now().After(deadline) {
			t.Fatalf("no banner: %q %q", out.String(), errOut.String())
		}
		for _, line := range strings.Split(out.String(), "\n") {
			if v, ok := strings.CutPrefix(line, "admin: "); ok {
				admin = v
			}
			if v, ok := strings.CutPrefix(line, "inbound 8080: "); ok {
				inboundAddr, _, _ = strings.Cut(v, " -> ")
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	sendRequests(t, "http://"+inboundAddr+"/", 4)
	sendRequests(t, "http://"+inboundAddr+"/healthz", 1)
	if doc := statusJSON(t, "--admin", admin, "--port", "8080"); doc.Mesh != "linkerd" || doc.Inbound[0].RequestsTotal == nil || *doc.Inbound[0].RequestsTotal != 4 {
		t.Errorf("status against the emulator: %+v", doc)
	}
	if code, out, _ := runMeshdrain(t, "check", "--admin", admin, "--port", "8080"); code != ExitOK {
		t.Errorf("check against the emulator: exit %d\n%s", code, out)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("emulate: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("emulate did not stop")
	}
	if !strings.Contains(errOut.String(), "emulator stopped") {
		t.Errorf("no final log line: %s", errOut.String())
	}
	if code, _, errOut := runMain(t, "emulate", "--mesh", "linkerd", "--injection", "native", "--wait-before-exit", "5s"); code != ExitUsage ||
		!strings.Contains(errOut, "cannot be used simultaneously") {
		t.Errorf("a sleep on a native sidecar: exit %d %s", code, errOut)
	}
}

func TestEmulateAdminIsAURL(t *testing.T) {
	for _, bad := range []string{"127.0.0.1:15000", "http://127.0.0.1", "http://127.0.0.1:15000/stats", "https://127.0.0.1:15000"} {
		code, _, errOut := runMain(t, "emulate", "--admin", bad, "--inbound", "8080=127.0.0.1:1")
		if code != ExitUsage || !strings.Contains(errOut, "--admin") {
			t.Errorf("emulate --admin %s: exit %d, stderr %q", bad, code, errOut)
		}
	}
	if addr, err := adminListenAddr("http://127.0.0.1:0/"); err != nil || addr != "127.0.0.1:0" {
		t.Errorf("adminListenAddr = %q, %v", addr, err)
	}
}
