package drain

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// A pid file is read without ever blocking and without reading more than a pid: a FIFO, a
// device or a large file is refused at once.
func TestReadPIDFileIsBounded(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "ok"), " 4242\n")
	writeFile(t, filepath.Join(dir, "big"), strings.Repeat("1", 10000))
	writeFile(t, filepath.Join(dir, "junk"), "app\n")
	writeFile(t, filepath.Join(dir, "zero"), "0\n")
	for path, want := range map[string]string{
		filepath.Join(dir, "ok"):      "",
		fifo:                          "not a regular file",
		"/dev/zero":                   "not a regular file",
		dir:                           "not a regular file",
		filepath.Join(dir, "big"):     "not a pid file",
		filepath.Join(dir, "junk"):    "no valid pid",
		filepath.Join(dir, "zero"):    "no valid pid",
		filepath.Join(dir, "missing"): "no such file",
	} {
		// Each read ends on what the file is, never on the context: asserted by its error
		// (a read that blocked, on the fifo or /dev/zero, would end with the context's), not by
		// a wall-clock bound a busy machine could break.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		pid, err := ReadPIDFile(ctx, path)
		cancel()
		if errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s: err %v: the read blocked", path, err)
			continue
		}
		if want == "" {
			if err != nil || pid != 4242 {
				t.Errorf("%s: pid %d err %v", path, pid, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err %v, want %q", path, err, want)
		}
	}
}

func TestParseStartTime(t *testing.T) {
	fields := "S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 987654 21 22"
	for _, comm := range []string{"sleep", "a) b) (c", "with space", ")"} {
		got, err := parseStartTime([]byte(fmt.Sprintf("123 (%s) %s\n", comm, fields)))
		if err != nil || got != 987654 {
			t.Errorf("comm %q: %d, %v", comm, got, err)
		}
	}
	for _, bad := range []string{"", "123 sleep S 1", "123 (x) S 1 2", "123 (x) " + strings.Replace(fields, "987654", "x", 1)} {
		if _, err := parseStartTime([]byte(bad)); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// startApp starts a process to signal and returns it with a channel that gets its exit.
func startApp(t *testing.T) (*exec.Cmd, <-chan error) {
	t.Helper()
	app := exec.Command("sleep", "30")
	if err := app.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- app.Wait() }()
	t.Cleanup(func() { app.Process.Kill() })
	return app, done
}

func TestSignalActionChecksAtStart(t *testing.T) {
	ctx := context.Background()
	app, _ := startApp(t)
	dir := t.TempDir()
	missingPID := filepath.Join(dir, "missing.pid")
	for name, build := range map[string]func() (*SignalAction, error){
		"KILL":       func() (*SignalAction, error) { return NewSignalAction(ctx, syscall.SIGKILL, app.Process.Pid, "") },
		"STOP":       func() (*SignalAction, error) { return NewSignalAction(ctx, syscall.SIGSTOP, app.Process.Pid, "") },
		"pid 0":      func() (*SignalAction, error) { return NewSignalAction(ctx, syscall.SIGTERM, 0, "") },
		"pid -1":     func() (*SignalAction, error) { return NewSignalAction(ctx, syscall.SIGTERM, -1, "") },
		"own pid":    func() (*SignalAction, error) { return NewSignalAction(ctx, syscall.SIGTERM, os.Getpid(), "") },
		"no process": func() (*SignalAction, error) { return NewSignalAction(ctx, syscall.SIGTERM, 1<<22+7, "") },
		"both": func() (*SignalAction, error) {
			return NewSignalAction(ctx, syscall.SIGTERM, app.Process.Pid, missingPID)
		},
		"no pidfile": func() (*SignalAction, error) { return NewSignalAction(ctx, syscall.SIGTERM, 0, missingPID) },
	} {
		if a, err := build(); err == nil {
			t.Errorf("%s: accepted (%v)", name, a)
		}
	}
	// PID 1 is the app in most containers: it must stay allowed (here it is some other init).
	if _, err := ProcessStartTime(1); err == nil {
		if _, err := NewSignalAction(ctx, syscall.SIGTERM, 1, ""); err != nil && !strings.Contains(err.Error(), "may not signal") {
			t.Errorf("pid 1 refused: %v", err)
		}
	}
}

func TestSignalActionSignalsTheIdentifiedProcess(t *testing.T) {
	ctx := context.Background()
	app, done := startApp(t)
	pidFile := filepath.Join(t.TempDir(), "app.pid")
	writeFile(t, pidFile, strconv.Itoa(app.Process.Pid)+"\n")
	a, err := NewSignalAction(ctx, syscall.SIGTERM, 0, pidFile)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(a.String(), "SIGTERM") || !strings.Contains(a.String(), pidFile) {
		t.Errorf("String() = %s", a)
	}
	if err := a.Run(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "terminated") {
			t.Errorf("app ended with %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("app not signalled")
	}
}

// The pid file names another process at signal time (the app restarted, or someone rewrote
// it): meshdrain refuses rather than signal a process it did not identify.
func TestSignalActionRefusesAnotherProcess(t *testing.T) {
	ctx := context.Background()
	first, firstDone := startApp(t)
	second, secondDone := startApp(t)
	pidFile := filepath.Join(t.TempDir(), "app.pid")
	writeFile(t, pidFile, strconv.Itoa(first.Process.Pid))
	a, err := NewSignalAction(ctx, syscall.SIGTERM, 0, pidFile)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, pidFile, strconv.Itoa(second.Process.Pid))
	if err := a.Run(ctx); err == nil || !strings.Contains(err.Error(), "refusing") {
		t.Errorf("err = %v, want a refusal", err)
	}
	// The identified process exited: nothing is signalled, and it says so.
	writeFile(t, pidFile, strconv.Itoa(first.Process.Pid))
	first.Process.Kill()
	<-firstDone
	if err := a.Run(ctx); err == nil || !strings.Contains(err.Error(), "exited") {
		t.Errorf("err = %v, want 'exited'", err)
	}
	select {
	case err := <-secondDone:
		t.Errorf("the other process was signalled: %v", err)
	default:
	}
}

// A pid reused by another process has another start time: refused even without a pid file.
func TestSignalActionRefusesAReusedPID(t *testing.T) {
	app, done := startApp(t)
	a, err := NewSignalAction(context.Background(), syscall.SIGTERM, app.Process.Pid, "")
	if err != nil {
		t.Fatal(err)
	}
	fake := t.TempDir()
	old := procRoot
	procRoot = fake
	defer func() { procRoot = old }()
	if err := os.MkdirAll(filepath.Join(fake, strconv.Itoa(app.Process.Pid)), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(fake, strconv.Itoa(app.Process.Pid), "stat"),
		fmt.Sprintf("%d (sleep) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 %d 21 22\n", app.Process.Pid, a.target.startTime+1))
	if err := a.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "another process") {
		t.Errorf("err = %v, want a refusal", err)
	}
	select {
	case err := <-done:
		t.Errorf("signalled anyway: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
}

func TestExecActionChecksAtStart(t *testing.T) {
	for _, argv := range [][]string{nil, {""}, {"/nonexistent/stop"}, {"no-such-program-anywhere"}, {"/etc"}} {
		if _, err := NewExecAction(argv); err == nil {
			t.Errorf("%q accepted", argv)
		}
	}
	if a, err := NewExecAction([]string{"true"}); err != nil || a.Run(context.Background()) != nil {
		t.Errorf("true: %v", err)
	}
}

func processGone(pid int) bool {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	end := strings.LastIndexByte(string(raw), ')')
	return end > 0 && strings.HasPrefix(strings.TrimSpace(string(raw[end+1:])), "Z")
}

// On timeout the whole process group goes: a shell's child does not outlive the action.
func TestExecActionKillsItsProcessGroup(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "child.pid")
	a, err := NewExecAction([]string{"/bin/sh", "-c", "sleep 77 & echo $! > " + pidFile + "; wait"})
	if err != nil {
		t.Fatal(err)
	}
	a.Stdout, a.Stderr = io.Discard, io.Discard // pipes: Wait must still return
	// The context ends once the shell has started its child, not at a fixed time: on a busy
	// machine a timeout could end the shell before it wrote the child's pid.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cancelledAt := make(chan time.Time, 1)
	go func() {
		for ctx.Err() == nil {
			if raw, _ := os.ReadFile(pidFile); strings.HasSuffix(string(raw), "\n") {
				cancelledAt <- time.Now()
				cancel()
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	err = a.Run(ctx)
	returned := time.Now()
	// A guard, not a figure: the child sleeps 77 s holding the output pipes, so a Run that
	// waited for them, or for the child, would run far past it.
	select {
	case at := <-cancelledAt:
		if took := returned.Sub(at); took > 20*time.Second {
			t.Errorf("Run returned %v after its context ended", took)
		}
	default:
		t.Errorf("Run returned before its context ended: %v", err)
	}
	if err == nil || !strings.Contains(err.Error(), "process group") || !errors.Is(err, context.Canceled) {
		t.Errorf("err = %v", err)
	}
	raw, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	child, _ := strconv.Atoi(strings.TrimSpace(string(raw)))
	deadline := time.Now().Add(20 * time.Second) // well before the child's own end at 77 s
	for !processGone(child) {
		if time.Now().After(deadline) {
			syscall.Kill(child, syscall.SIGKILL)
			t.Fatalf("the shell's child %d outlived the action", child)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestShutdownURLAction(t *testing.T) {
	if _, err := NewShutdownURLAction("http://10.0.0.1:8080/actuator/shutdown", false); err == nil {
		t.Error("remote shutdown url accepted")
	}
	var method string
	ok := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		method = r.Method
		io.WriteString(w, `{"message":"Shutting down, bye..."}`)
	}))
	defer ok.Close()
	u := strings.Replace(ok.URL, "http://", "http://user:secret@", 1) + "/actuator/shutdown"
	a, err := NewShutdownURLAction(u, false)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Run(context.Background()); err != nil || method != http.MethodPost {
		t.Errorf("err %v method %s", err, method)
	}
	if strings.Contains(a.String(), "secret") {
		t.Errorf("String() leaks the password: %s", a)
	}

	// An app that answers 200 and then never stops sending, or never answers: bounded by ctx.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				buf := make([]byte, 4096)
				conn.Read(buf)
				if strings.Contains(string(buf), "/hang") {
					time.Sleep(time.Minute)
					return
				}
				io.WriteString(conn, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
				for {
					if _, err := io.WriteString(conn, "400\r\n"+strings.Repeat("z", 1024)+"\r\n"); err != nil {
						return
					}
				}
			}()
		}
	}()
	// What ends each call is asserted by its outcome, not by a wall-clock bound a busy
	// machine could break: an endless body is not read to its end (the call succeeds well
	// within a context it would otherwise run out), and a server that never answers is left
	// when the context ends (long before the minute it hangs).
	for _, c := range []struct {
		path    string
		timeout time.Duration
		wantErr bool
	}{{"/endless", 20 * time.Second, false}, {"/hang", 300 * time.Millisecond, true}} {
		a, err := NewShutdownURLAction("http://"+ln.Addr().String()+c.path, false)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
		start := time.Now()
		err = a.Run(ctx)
		cancel()
		if took := time.Since(start); took > 20*time.Second {
			t.Errorf("%s: took %v: the call outlived its context", c.path, took)
		}
		if (err != nil) != c.wantErr || (c.wantErr && !errors.Is(err, context.DeadlineExceeded)) {
			t.Errorf("%s: err %v", c.path, err)
		}
	}
}
