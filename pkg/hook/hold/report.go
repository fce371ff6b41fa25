package hold

import (
	"encoding/json"
	"net"
	"os"
	"sync"
	"time"

	"github.com/meshdrain/meshdrain/pkg/clock"
)

// Bounds of the reporter's socket calls: a local unix socket answers in microseconds, so
// these only keep a wedged peer from holding prestop.
const (
	reportDialTimeout  = 200 * time.Millisecond
	reportWriteTimeout = time.Second
)

// Reporter is prestop's end of the channel. Prestop and hold start together at the
// deletion, in either order, so the reporter tries to connect every retry interval until it
// has, in the background: the drain never waits for it. A hold that is not there (the proxy
// has no hold, the opt-out) costs one refused connect per interval and nothing else.
type Reporter struct {
	addr     string
	clock    clock.Clock
	retry    time.Duration
	deadline time.Time
	pid      int

	stop     chan struct{}
	loopDone chan struct{}
	once     sync.Once
	conn     net.Conn // set by the loop, read after it ended
}

// StartReporting starts reporting to the hold listening on addr: "running" with the time
// left until deadline (on clk) as soon as it connects. It returns nil when addr is "" (no
// hold to report to); a nil Reporter's Done does nothing.
func StartReporting(addr string, deadline time.Time, retry time.Duration, clk clock.Clock) *Reporter {
	if addr == "" {
		return nil
	}
	r := &Reporter{addr: addr, clock: clk, retry: retry, deadline: deadline, pid: os.Getpid(),
		stop: make(chan struct{}), loopDone: make(chan struct{})}
	go r.loop()
	return r
}

func (r *Reporter) loop() {
	defer close(r.loopDone)
	for {
		if conn := r.dial(); conn != nil {
			left := max(r.deadline.Sub(r.clock.Now()), 0).Milliseconds()
			if send(conn, Report{V: ProtocolVersion, State: StateRunning, PID: r.pid, DeadlineInMs: &left}) == nil {
				r.conn = conn
				return
			}
			conn.Close()
		}
		timer := r.clock.NewTimer(r.retry)
		select {
		case <-timer.C():
		case <-r.stop:
			timer.Stop()
			return
		}
	}
}

func (r *Reporter) dial() net.Conn {
	conn, err := net.DialTimeout("unix", r.addr, reportDialTimeout)
	if err != nil {
		return nil
	}
	return conn
}

func send(conn net.Conn, report Report) error {
	line, err := json.Marshal(report)
	if err != nil {
		return err
	}
	if err := conn.SetWriteDeadline(time.Now().Add(reportWriteTimeout)); err != nil {
		return err
	}
	_, err = conn.Write(append(line, '\n'))
	return err
}

// Done tells hold that prestop has ended, with its final event's reason and exit code, and
// closes the connection. A hold that started since the last attempt still hears it: Done
// connects once more if it must. It reports whether hold got the report.
func (r *Reporter) Done(reason string, exitCode int) bool {
	if r == nil {
		return false
	}
	delivered := false
	r.once.Do(func() {
		close(r.stop)
		<-r.loopDone
		conn := r.conn
		if conn == nil {
			if conn = r.dial(); conn == nil {
				return
			}
		}
		defer conn.Close()
		delivered = send(conn, Report{V: ProtocolVersion, State: StateDone, PID: r.pid, Reason: reason, ExitCode: &exitCode}) == nil
	})
	return delivered
}
