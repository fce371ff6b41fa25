package hold

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
)

// DefaultChannel is where hold listens and prestop reports: an abstract unix socket. The
// abstract namespace belongs to the network namespace, which every container of a pod shares,
// so the channel needs no volume, no file, no port and no permission: the app container keeps
// its meshdrain volume read-only, the proxy keeps its read-only root file system, and nothing
// listens on a TCP port the app could also want. A process can hold it only while it lives,
// so a prestop killed with its container closes its end and hold knows at once.
const DefaultChannel = "@meshdrain-hold"

// ProtocolVersion is the "v" of every report; hold refuses other versions (the two ends run
// the same binary, from the same volume, so a mismatch is a misconfiguration).
const ProtocolVersion = 1

// The states a report gives.
const (
	// StateRunning: prestop has started; DeadlineInMs says how long until it decides at the
	// latest.
	StateRunning = "running"
	// StateDone: prestop has decided and is returning (its actions, if any, are done): the
	// kubelet sends the app its SIGTERM next.
	StateDone = "done"
)

// Report is one line prestop writes to the channel, as JSON: {"v":1,"state":"running",
// "pid":7,"deadline_in_ms":45980} when it starts, {"v":1,"state":"done","reason":"quiet",
// "exit_code":0} when it ends; then it closes the connection. A connection that closes
// without "done" is a prestop that was killed (its container stopped) or crashed.
type Report struct {
	V     int    `json:"v"`
	State string `json:"state"`
	PID   int    `json:"pid,omitempty"`
	// DeadlineInMs (running) is how long, from when the report was written, until prestop's
	// deadline: relative, so that the two ends need no shared clock.
	DeadlineInMs *int64 `json:"deadline_in_ms,omitempty"`
	// Reason and ExitCode (done) are prestop's final event's.
	Reason   string `json:"reason,omitempty"`
	ExitCode *int   `json:"exit_code,omitempty"`
}

func (r Report) check() error {
	if r.V != ProtocolVersion {
		return fmt.Errorf("protocol version %d, want %d", r.V, ProtocolVersion)
	}
	switch r.State {
	case StateRunning:
		if r.DeadlineInMs == nil || *r.DeadlineInMs < 0 {
			return errors.New(`"running" without a deadline_in_ms`)
		}
	case StateDone:
	default:
		return fmt.Errorf("state %q: want %s or %s", r.State, StateRunning, StateDone)
	}
	return nil
}

// Limits of what a peer can make hold keep: a prestop sends two short lines.
const (
	maxLine              = 1024
	maxSessions          = 8
	maxReportsPerSession = 4
	// maxSocketPath is sun_path's 108 bytes less the terminating NUL (or the abstract
	// socket's leading NUL).
	maxSocketPath = 107
)

// CheckChannel checks a channel address: "@NAME", an abstract unix socket in the pod's network
// namespace, or "/PATH", a socket file in a volume both containers mount.
func CheckChannel(addr string) error {
	switch {
	case addr == "":
		return errors.New("no channel address")
	case !strings.HasPrefix(addr, "@") && !strings.HasPrefix(addr, "/"):
		return fmt.Errorf("channel %q: want @NAME (an abstract unix socket, shared by the pod's containers) or /PATH (a unix socket file on a shared volume)", addr)
	case len(addr) > maxSocketPath:
		return fmt.Errorf("channel %q: %d bytes, a unix socket address holds at most %d", addr, len(addr), maxSocketPath)
	case len(addr) == 1:
		return fmt.Errorf("channel %q: no name", addr)
	}
	return nil
}

// Event is what a channel saw of one connection (a session).
type Event struct {
	Session int
	// Report is a line received; nil for the session's end.
	Report *Report
	// Closed: the peer closed the connection, or hold did after Err.
	Closed bool
	// Err is why hold dropped the session (a bad line), nil for a clean close.
	Err error
}

// Channel is hold's side of the channel as the hold loop reads it: the events since the last
// Take, without waiting, and a signal when new ones arrive.
type Channel interface {
	Take() []Event
	// Wake receives when an event arrives; nil for a channel that is only polled.
	Wake() <-chan struct{}
}

// Listener is the channel hold listens on. Every connection is a session whose lines are
// parsed into Events; a session that sends something else is dropped.
type Listener struct {
	ln   net.Listener
	wake chan struct{}

	mu      sync.Mutex
	pending []Event
	conns   map[int]net.Conn
	next    int
	closed  bool
	wg      sync.WaitGroup
}

var _ Channel = (*Listener)(nil)

// Listen opens the channel. A socket file is made connectable by every user: prestop runs as
// the app's user, hold as the proxy's.
func Listen(addr string) (*Listener, error) {
	if err := CheckChannel(addr); err != nil {
		return nil, err
	}
	ln, err := net.Listen("unix", addr)
	if err != nil {
		return nil, err
	}
	if !strings.HasPrefix(addr, "@") {
		if err := os.Chmod(addr, 0o666); err != nil {
			ln.Close()
			return nil, fmt.Errorf("channel %s: letting the app's user connect: %w", addr, err)
		}
	}
	l := &Listener{ln: ln, wake: make(chan struct{}, 1), conns: map[int]net.Conn{}}
	l.wg.Add(1)
	go l.accept()
	return l, nil
}

// Addr is where the listener listens.
func (l *Listener) Addr() string { return l.ln.Addr().String() }

// Take returns the events since the last call.
func (l *Listener) Take() []Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	events := l.pending
	l.pending = nil
	return events
}

// Wake receives when an event arrives.
func (l *Listener) Wake() <-chan struct{} { return l.wake }

// Close stops listening and ends every session.
func (l *Listener) Close() error {
	l.mu.Lock()
	l.closed = true
	err := l.ln.Close()
	for _, c := range l.conns {
		c.Close()
	}
	l.mu.Unlock()
	l.wg.Wait()
	return err
}

func (l *Listener) emit(e Event) {
	l.mu.Lock()
	l.pending = append(l.pending, e)
	l.mu.Unlock()
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

func (l *Listener) accept() {
	defer l.wg.Done()
	for {
		conn, err := l.ln.Accept()
		if err != nil {
			return
		}
		l.mu.Lock()
		if l.closed || len(l.conns) >= maxSessions {
			l.mu.Unlock()
			conn.Close()
			continue
		}
		id := l.next
		l.next++
		l.conns[id] = conn
		l.wg.Add(1)
		l.mu.Unlock()
		go l.read(id, conn)
	}
}

// read turns a session's lines into events and ends it with exactly one closing event.
func (l *Listener) read(id int, conn net.Conn) {
	defer l.wg.Done()
	end := func(err error) {
		conn.Close()
		l.mu.Lock()
		delete(l.conns, id)
		l.mu.Unlock()
		l.emit(Event{Session: id, Closed: true, Err: err})
	}
	br := bufio.NewReaderSize(conn, maxLine)
	for reports := 0; ; {
		line, err := br.ReadSlice('\n')
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			end(fmt.Errorf("a line longer than %d bytes", maxLine))
			return
		case err != nil:
			// A last line without its newline is a peer that died mid-write: not a report.
			if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) {
				err = nil
			}
			end(err)
			return
		}
		var r Report
		if err := json.Unmarshal(line, &r); err != nil {
			end(fmt.Errorf("not a report: %w", err))
			return
		}
		if err := r.check(); err != nil {
			end(fmt.Errorf("not a report: %w", err))
			return
		}
		if reports++; reports > maxReportsPerSession {
			end(fmt.Errorf("more than %d reports", maxReportsPerSession))
			return
		}
		l.emit(Event{Session: id, Report: &r})
	}
}
