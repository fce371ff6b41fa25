package drain

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/meshdrain/meshdrain/pkg/localhttp"
)

// Action lets the app stop once the wait is over. Without one, meshdrain simply exits and
// the kubelet sends the container's SIGTERM itself.
type Action interface {
	Run(ctx context.Context) error
	String() string
}

// SignalAction signals the app's process: for apps whose preStop cannot simply return, or
// that must be told before the kubelet's SIGTERM (e.g. a supervisor as PID 1). The process is
// identified when the action is built, at start, and only that process is ever signalled.
type SignalAction struct {
	Signal  syscall.Signal
	PID     int
	PIDFile string
	target  *identifiedProcess
}

// NewSignalAction checks everything a signal needs at start: a signal that lets the app
// finish its work, exactly one of pid and pidFile, a pid that is neither 0, negative nor
// meshdrain's own, a pid file that is a small regular file, and a live process meshdrain may
// signal, whose identity (pid and start time) it records.
func NewSignalAction(ctx context.Context, sig syscall.Signal, pid int, pidFile string) (*SignalAction, error) {
	if err := CheckSignal(sig); err != nil {
		return nil, err
	}
	if (pid != 0) == (pidFile != "") {
		return nil, fmt.Errorf("a signal needs exactly one of a pid and a pid file")
	}
	if pidFile != "" {
		ctx, cancel := context.WithTimeout(ctx, PIDFileReadTimeout)
		defer cancel()
		read, err := ReadPIDFile(ctx, pidFile)
		if err != nil {
			return nil, err
		}
		pid = read
	}
	target, err := identify(pid)
	if err != nil {
		if pidFile != "" {
			return nil, fmt.Errorf("pid file %s: %w", pidFile, err)
		}
		return nil, err
	}
	return &SignalAction{Signal: sig, PID: pid, PIDFile: pidFile, target: target}, nil
}

// CheckSignal refuses the signals that do not let the app finish its work. It needs nothing
// of the pod, so plan checks a preStop's --signal with it too.
func CheckSignal(sig syscall.Signal) error {
	switch sig {
	case syscall.SIGKILL:
		return fmt.Errorf("signal SIGKILL refused: it cuts the app's in-flight requests, which is what the drain was for; use TERM")
	case syscall.SIGSTOP:
		return fmt.Errorf("signal SIGSTOP refused: it freezes the app with requests in flight and never lets it stop")
	}
	return nil
}

// Run signals the process identified at start. A pid file that now names another process, or
// a pid that now belongs to another process, is refused: meshdrain never signals a process it
// cannot identify.
func (a *SignalAction) Run(ctx context.Context) error {
	if a.target == nil {
		return fmt.Errorf("no process identified at start")
	}
	if a.PIDFile != "" {
		pid, err := ReadPIDFile(ctx, a.PIDFile)
		if err != nil {
			return err
		}
		if pid != a.target.pid {
			return fmt.Errorf("pid file %s now names pid %d, not pid %d identified at start: refusing to signal either", a.PIDFile, pid, a.target.pid)
		}
	}
	return a.target.signal(a.Signal)
}

func (a *SignalAction) String() string {
	target := fmt.Sprintf("pid %d", a.PID)
	if a.PIDFile != "" {
		target = fmt.Sprintf("pid %d (from %s)", a.PID, a.PIDFile)
	}
	return fmt.Sprintf("signal %s to %s", signalName(a.Signal), target)
}

// maxShutdownBody is how much of the app's answer to a shutdown call is read; the rest is
// not waited for (the connection is closed).
const maxShutdownBody = 64 << 10

// ShutdownURLAction POSTs to the app's own shutdown endpoint (e.g. Spring Boot's
// /actuator/shutdown), on the pod's loopback or a unix socket.
type ShutdownURLAction struct {
	Target      localhttp.Target
	AllowRemote bool
}

// NewShutdownURLAction parses and checks the URL at start.
func NewShutdownURLAction(raw string, allowRemote bool) (ShutdownURLAction, error) {
	target, err := localhttp.Parse(raw, allowRemote)
	if err != nil {
		return ShutdownURLAction{}, err
	}
	return ShutdownURLAction{Target: target, AllowRemote: allowRemote}, nil
}

// Run posts and checks for a 2xx answer, all within ctx: an app that answers slowly, or
// with an endless body, costs no more than the action's timeout.
func (a ShutdownURLAction) Run(ctx context.Context) error {
	client := localhttp.NewClient(a.Target, localhttp.Options{AllowRemote: a.AllowRemote})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, a.Target.URL.String(), nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		var urlErr *url.Error
		if errors.As(err, &urlErr) {
			err = urlErr.Err // it repeats the URL, credentials included
		}
		return err
	}
	defer resp.Body.Close()
	body, readErr := localhttp.ReadBody(resp.Body, maxShutdownBody)
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("status %d: %s", resp.StatusCode, strings.TrimSpace(string(body[:min(len(body), 200)])))
	}
	var tooLarge *localhttp.BodyTooLargeError
	if readErr != nil && !errors.As(readErr, &tooLarge) {
		// The app said 2xx; a body cut by the timeout still means the call was made.
		return fmt.Errorf("status %d, then reading the answer: %w", resp.StatusCode, readErr)
	}
	return nil
}

func (a ShutdownURLAction) String() string { return "POST " + a.Target.String() }

// ExecWaitDelay is how long an exec action's output is still collected once its process
// group has been killed.
const ExecWaitDelay = 200 * time.Millisecond

// ExecAction runs a command directly (no shell) in a process group of its own, so that on
// timeout the whole group is killed, not only the program meshdrain started (a shell's
// children would otherwise outlive it).
type ExecAction struct {
	Argv           []string
	Stdout, Stderr io.Writer
	path           string
}

// NewExecAction resolves the program at start: a missing or non-executable program is found
// now, not after the whole wait.
func NewExecAction(argv []string) (ExecAction, error) {
	if len(argv) == 0 || argv[0] == "" {
		return ExecAction{}, errors.New("no program to run")
	}
	path, err := exec.LookPath(argv[0])
	if err != nil {
		return ExecAction{}, fmt.Errorf("program %q: %w", argv[0], stripExecError(err))
	}
	info, err := os.Stat(path)
	if err != nil {
		return ExecAction{}, fmt.Errorf("program %q: %w", argv[0], err)
	}
	if !info.Mode().IsRegular() {
		return ExecAction{}, fmt.Errorf("program %q: not a regular file", path)
	}
	return ExecAction{Argv: argv, path: path}, nil
}

// Run executes the command and waits for it, killing its whole process group when ctx ends.
func (a ExecAction) Run(ctx context.Context) error {
	path := a.path
	if path == "" {
		path = a.Argv[0]
	}
	cmd := exec.CommandContext(ctx, path, a.Argv[1:]...)
	cmd.Args[0] = a.Argv[0]
	cmd.Stdout, cmd.Stderr = a.Stdout, a.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error {
		// The group's id is the leader's pid (Setpgid with Pgid 0).
		return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	cmd.WaitDelay = ExecWaitDelay
	err := cmd.Run()
	if err != nil && ctx.Err() != nil {
		return fmt.Errorf("killed with its process group: %w (%v)", ctx.Err(), err)
	}
	// The caller names the action (String) in front of the error.
	return err
}

func (a ExecAction) String() string { return "exec " + strings.Join(a.Argv, " ") }

func stripExecError(err error) error {
	var execErr *exec.Error
	if errors.As(err, &execErr) {
		return execErr.Err
	}
	return err
}

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
