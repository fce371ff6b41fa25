package drain

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"

	"github.com/meshdrain/meshdrain/pkg/httpwire"
)

// Action lets the app stop once the wait is over. Without one, meshdrain simply exits and
// the kubelet sends the container's SIGTERM itself.
type Action interface {
	Run(ctx context.Context) error
	String() string
}

// SignalAction signals the app's process: for apps whose preStop cannot simply return, or
// that must be told before the kubelet's SIGTERM (e.g. a supervisor as PID 1).
type SignalAction struct {
	Signal  syscall.Signal
	PID     int
	PIDFile string
}

// Run sends the signal, reading the PID file at that moment so a restarted app is found.
func (a SignalAction) Run(context.Context) error {
	pid := a.PID
	if a.PIDFile != "" {
		raw, err := os.ReadFile(a.PIDFile)
		if err != nil {
			return fmt.Errorf("read pid file: %w", err)
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(raw)))
		if err != nil || pid <= 0 {
			return fmt.Errorf("pid file %s: no valid pid in %q", a.PIDFile, strings.TrimSpace(string(raw)))
		}
	}
	if err := syscall.Kill(pid, a.Signal); err != nil {
		return fmt.Errorf("kill -%d %d: %w", int(a.Signal), pid, err)
	}
	return nil
}

func (a SignalAction) String() string {
	target := strconv.Itoa(a.PID)
	if a.PIDFile != "" {
		target = "pid in " + a.PIDFile
	}
	return fmt.Sprintf("signal %s to %s", signalName(a.Signal), target)
}

// ShutdownURLAction POSTs to the app's own shutdown endpoint (e.g. Spring Boot's
// /actuator/shutdown).
type ShutdownURLAction struct {
	URL string
}

// Run posts and checks for a 2xx answer.
func (a ShutdownURLAction) Run(ctx context.Context) error {
	client := &httpwire.Client{MaxIdlePerHost: -1}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, a.URL, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	return nil
}

func (a ShutdownURLAction) String() string { return "POST " + a.URL }

// Validate rejects a URL the action could not call.
func (a ShutdownURLAction) Validate() error {
	u, err := url.Parse(a.URL)
	if err != nil || u.Scheme != "http" || u.Host == "" {
		return fmt.Errorf("shutdown url %q: want http://host:port/path", a.URL)
	}
	return nil
}

// ExecAction runs a command directly (no shell) and waits for it.
type ExecAction struct {
	Argv           []string
	Stdout, Stderr io.Writer
}

// Run executes the command.
func (a ExecAction) Run(ctx context.Context) error {
	cmd := exec.CommandContext(ctx, a.Argv[0], a.Argv[1:]...)
	cmd.Stdout, cmd.Stderr = a.Stdout, a.Stderr
	// The caller names the action (String) in front of the error.
	return cmd.Run()
}

func (a ExecAction) String() string { return "exec " + strings.Join(a.Argv, " ") }

// ParseSignal accepts "TERM", "SIGTERM" or "15".
func ParseSignal(s string) (syscall.Signal, error) {
	if n, err := strconv.Atoi(s); err == nil {
		if n <= 0 || n > 64 {
			return 0, fmt.Errorf("signal %q: number out of range", s)
		}
		return syscall.Signal(n), nil
	}
	name := strings.TrimPrefix(strings.ToUpper(strings.TrimSpace(s)), "SIG")
	if sig, ok := signalsByName[name]; ok {
		return sig, nil
	}
	return 0, fmt.Errorf("signal %q: want a name like TERM or SIGTERM, or a number", s)
}

var signalsByName = map[string]syscall.Signal{
	"HUP": syscall.SIGHUP, "INT": syscall.SIGINT, "QUIT": syscall.SIGQUIT, "KILL": syscall.SIGKILL,
	"USR1": syscall.SIGUSR1, "USR2": syscall.SIGUSR2, "TERM": syscall.SIGTERM, "CONT": syscall.SIGCONT,
	"STOP": syscall.SIGSTOP, "WINCH": syscall.SIGWINCH,
}

func signalName(sig syscall.Signal) string {
	for name, s := range signalsByName {
		if s == sig {
			return "SIG" + name
		}
	}
	return strconv.Itoa(int(sig))
}
