package hold

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/meshdrain/meshdrain/pkg/clock"
	"github.com/meshdrain/meshdrain/pkg/sockets"
)

// The hold's faults and its ordinary path, on pod time: a fake clock that jumps to each
// timer, a channel and a socket table scripted by that time, a drain call that records when
// it was made. Nothing here waits real seconds.

var t0 = time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)

const (
	appUID   = 1000
	proxyUID = 1337
	appPort  = 8080
)

// The reference timing: grace 52 s, app drain 5 s: the hook deadline is 46 s, the bound 51 s.
func testConfig(clk clock.Clock) Config {
	return Config{GracePeriod: 52 * time.Second, AppDrain: 5 * time.Second, PrestopWait: DefaultPrestopWait,
		Poll: 200 * time.Millisecond, Clock: clk}
}

// scriptChannel delivers each event once the pod's time has reached it.
type scriptChannel struct {
	clock  clock.Clock
	events []timedEvent
}

type timedEvent struct {
	at time.Duration
	ev Event
}

func (c *scriptChannel) Take() []Event {
	var due []Event
	for len(c.events) > 0 && !c.clock.Now().Before(t0.Add(c.events[0].at)) {
		due = append(due, c.events[0].ev)
		c.events = c.events[1:]
	}
	return due
}

func (c *scriptChannel) Wake() <-chan struct{} { return nil }

func running(at time.Duration, session int, deadlineIn time.Duration) timedEvent {
	ms := deadlineIn.Milliseconds()
	return timedEvent{at, Event{Session: session, Report: &Report{V: 1, State: StateRunning, PID: 40 + session, DeadlineInMs: &ms}}}
}

func done(at time.Duration, session int, reason string, code int) timedEvent {
	return timedEvent{at, Event{Session: session, Report: &Report{V: 1, State: StateDone, Reason: reason, ExitCode: &code}}}
}

func closed(at time.Duration, session int) timedEvent {
	return timedEvent{at, Event{Session: session, Closed: true}}
}

// podTable is the pod's socket table as a function of the pod's time: the app listens on
// 8080 until listenUntil, holds one connection from its proxy until connUntil, and one
// outbound connection through the proxy until outUntil (zero: never had it).
type podTable struct {
	clock                            clock.Clock
	listenUntil, connUntil, outUntil time.Duration
	// proxyConns are the proxy's own connections on the app's port (TPROXY): never the app's.
	proxyConns bool
	// brokenAt: every read from then on fails as a table that cannot be read.
	brokenAt time.Duration
	reads    int
	// slowListing, when set, makes each listing of the listeners take that long on the fake
	// clock: a busy machine's late timer.
	slowListing time.Duration
}

func (p *podTable) at() time.Duration { return p.clock.Now().Sub(t0) }

func (p *podTable) broken() error {
	if p.brokenAt > 0 && p.at() >= p.brokenAt {
		return fmt.Errorf("%w: inet_diag: refused; /proc: refused", sockets.ErrUnavailable)
	}
	return nil
}

func sock(local, remote string, state sockets.State, uid uint32, inode uint64) sockets.Socket {
	return sockets.Socket{Local: netip.MustParseAddrPort(local), Remote: netip.MustParseAddrPort(remote), State: state, UID: uid, Inode: inode}
}

func (p *podTable) Listeners(ports []uint16) ([]sockets.Socket, error) {
	if err := p.broken(); err != nil {
		return nil, err
	}
	if p.slowListing > 0 {
		p.clock.(*clock.Fake).Advance(p.slowListing)
	}
	// The proxy's own listener on the app's port never counts (it is not the app's).
	socks := []sockets.Socket{sock("0.0.0.0:15006", "0.0.0.0:0", sockets.Listen, proxyUID, 7)}
	if p.at() < p.listenUntil {
		socks = append(socks, sock("0.0.0.0:8080", "0.0.0.0:0", sockets.Listen, appUID, 8))
	}
	return keepPorts(socks, ports), nil
}

func (p *podTable) Read(ports []uint16) ([]sockets.Socket, error) {
	if err := p.broken(); err != nil {
		return nil, err
	}
	p.reads++
	var socks []sockets.Socket
	if p.at() < p.connUntil {
		socks = append(socks, sock("10.0.0.5:8080", "127.0.0.6:40000", sockets.Established, appUID, 9))
	} else if p.connUntil > 0 {
		// What a closed connection leaves: no owner.
		socks = append(socks, sock("10.0.0.5:8080", "127.0.0.6:40000", sockets.TimeWait, 0, 0))
	}
	if p.at() < p.outUntil {
		socks = append(socks, sock("127.0.0.1:15001", "10.0.0.5:50000", sockets.Established, proxyUID, 10))
	} else if p.outUntil > 0 {
		socks = append(socks, sock("127.0.0.1:15001", "10.0.0.5:50000", sockets.CloseWait, proxyUID, 10))
	}
	if p.proxyConns {
		socks = append(socks, sock("10.0.0.5:8080", "10.1.0.9:51000", sockets.Established, proxyUID, 11))
	}
	return keepPorts(socks, ports), nil
}

func keepPorts(socks []sockets.Socket, ports []uint16) []sockets.Socket {
	var kept []sockets.Socket
	for _, s := range socks {
		for _, p := range ports {
			if s.Local.Port() == p {
				kept = append(kept, s)
			}
		}
	}
	return kept
}

// drainCall records when pilot-agent was asked to drain.
type drainCall struct {
	clock clock.Clock
	at    []time.Duration
	err   error
}

func (d *drainCall) Run(context.Context) error {
	d.at = append(d.at, d.clock.Now().Sub(t0))
	return d.err
}

func (d *drainCall) String() string { return "POST http://127.0.0.1:15020/drain" }

type holdCase struct {
	cfg    Config
	drain  *drainCall
	logs   *observer.ObservedLogs
	result Result
}

// runHold runs one hold on an auto-advancing clock from t0.
func runHold(t *testing.T, events []timedEvent, table *podTable, edit func(*Config)) holdCase {
	t.Helper()
	clk := clock.NewAutoFake(t0)
	cfg := testConfig(clk)
	cfg.Channel = &scriptChannel{clock: clk, events: events}
	d := &drainCall{clock: clk}
	cfg.Drain = d
	if table != nil {
		table.clock = clk
		cfg.App = App{Ports: []uint16{appPort}, OutboundPort: DefaultOutboundPort, ProxyUID: proxyUID, Table: table}
	}
	core, logs := observer.New(zap.DebugLevel)
	cfg.Logger = zap.New(core)
	if edit != nil {
		edit(&cfg)
	}
	res := Run(context.Background(), cfg)
	final := logs.FilterMessage(FinalMessage).All()
	if len(final) != 1 || logs.All()[logs.Len()-1].Message != FinalMessage {
		t.Fatalf("the final event %q must be the one last line; got %d of them", FinalMessage, len(final))
	}
	if got := final[0].ContextMap()["reason"]; got != string(res.Reason) {
		t.Errorf("final event reason %v, result %v", got, res.Reason)
	}
	return holdCase{cfg: cfg, drain: d, logs: logs, result: res}
}

// within checks a pod time against an interval of polls: the hold acts at the first poll at
// or after the moment it can know.
func within(t *testing.T, what string, got, from, to time.Duration) {
	t.Helper()
	if got < from || got > to {
		t.Errorf("%s at %v, want within [%v, %v]", what, got, from, to)
	}
}

func (c holdCase) drainedAt(t *testing.T) time.Duration {
	t.Helper()
	if len(c.drain.at) != 1 {
		t.Fatalf("drain calls at %v, want exactly one", c.drain.at)
	}
	return c.drain.at[0]
}

func (c holdCase) want(t *testing.T, reason Reason, prestop Prestop, code int) {
	t.Helper()
	if c.result.Reason != reason || c.result.Prestop != prestop || c.result.ExitCode() != code {
		t.Errorf("reason %s prestop %s exit %d, want %s %s %d", c.result.Reason, c.result.Prestop, c.result.ExitCode(), reason, prestop, code)
	}
}

const poll = 200 * time.Millisecond

// The ordinary path: prestop decides at 12 s; the app stops listening, finishes its last
// request at 14 s and closes its outbound connection at 14.1 s. The proxy is drained at
// prestop's end, never before, and released two reads after the app let go.
func TestHoldReleasesOnceTheAppLetsGo(t *testing.T) {
	c := runHold(t, []timedEvent{running(50*time.Millisecond, 0, 46*time.Second), done(12*time.Second, 0, "quiet", 0), closed(12*time.Second, 0)},
		&podTable{listenUntil: 12300 * time.Millisecond, connUntil: 14 * time.Second, outUntil: 14100 * time.Millisecond}, nil)
	c.want(t, ReasonReleased, PrestopDone, 0)
	within(t, "drain call", c.drainedAt(t), 12*time.Second, 12*time.Second+poll)
	within(t, "release", c.result.Elapsed, 14100*time.Millisecond+poll, 14100*time.Millisecond+3*poll)
	if c.result.PrestopReason != "quiet" || *c.result.PrestopExitCode != 0 || c.result.Sessions != 1 {
		t.Errorf("prestop reason %q code %v sessions %d", c.result.PrestopReason, c.result.PrestopExitCode, c.result.Sessions)
	}
}

// Without the app's outbound connection closing, the app has not let go: its last calls
// through the proxy would fail. An app that never lets go is kept to the bound (51 s).
func TestHoldWaitsForTheAppsOutboundCalls(t *testing.T) {
	c := runHold(t, []timedEvent{running(0, 0, 46*time.Second), done(12*time.Second, 0, "quiet", 0)},
		&podTable{listenUntil: 12300 * time.Millisecond, connUntil: 13 * time.Second, outUntil: time.Hour}, nil)
	c.want(t, ReasonDeadline, PrestopDone, 3)
	within(t, "release", c.result.Elapsed, 51*time.Second, 51*time.Second)
}

// The app serves requests that outlast its --app-drain (5 s): told to stop at 12 s, it
// answers its last one at 30 s. The proxy is kept until then: releasing it at 17 s would cut
// them (the simulator's long-requests shape lost one so in regime b), and the pod is not gone
// before the app exits anyway.
func TestHoldKeepsTheProxyWhileTheAppStillServes(t *testing.T) {
	c := runHold(t, []timedEvent{running(0, 0, 46*time.Second), done(12*time.Second, 0, "quiet", 0)},
		&podTable{listenUntil: 12300 * time.Millisecond, connUntil: 30 * time.Second}, nil)
	c.want(t, ReasonReleased, PrestopDone, 0)
	within(t, "release", c.result.Elapsed, 30*time.Second+poll, 30*time.Second+3*poll)
}

// Fault: no prestop ever reports and the app's port never had a listener: the app
// container is gone. The hold ends promptly after --prestop-wait, and drains.
func TestHoldNoPrestopAppGone(t *testing.T) {
	c := runHold(t, nil, &podTable{}, nil)
	c.want(t, ReasonAppGone, PrestopAbsent, 0)
	within(t, "drain call", c.drainedAt(t), DefaultPrestopWait, DefaultPrestopWait+poll)
	within(t, "release", c.result.Elapsed, DefaultPrestopWait, DefaultPrestopWait+3*poll)
}

// The same with an app drain shorter than --prestop-wait: the app's drain from the start is
// over when hold decides, but the reads that show the app gone come first, and say so.
func TestHoldNoPrestopAppGoneShortAppDrain(t *testing.T) {
	c := runHold(t, nil, &podTable{}, func(cfg *Config) { cfg.AppDrain = time.Second })
	c.want(t, ReasonAppGone, PrestopAbsent, 0)
	within(t, "release", c.result.Elapsed, DefaultPrestopWait, DefaultPrestopWait+3*poll)
}

// The same on a busy machine, where each read of the table ends more than two polls after it
// began: the reason is still taken from the reads that show the app gone, not from the clock
// that ran past the app's drain meanwhile.
func TestHoldNoPrestopAppGoneSlowReads(t *testing.T) {
	c := runHold(t, nil, &podTable{slowListing: 3 * poll}, func(cfg *Config) { cfg.AppDrain = time.Second })
	c.want(t, ReasonAppGone, PrestopAbsent, 0)
}

// Fault: no hook is configured in the app container: the app got its SIGTERM at the
// deletion, stopped listening at once and finished its work at 1.5 s.
func TestHoldNoPrestopAppStoppedByItsSIGTERM(t *testing.T) {
	c := runHold(t, nil, &podTable{listenUntil: 300 * time.Millisecond, connUntil: 1500 * time.Millisecond}, nil)
	c.want(t, ReasonReleased, PrestopAbsent, 0)
	within(t, "drain call", c.drainedAt(t), DefaultPrestopWait, DefaultPrestopWait+poll)
	within(t, "release", c.result.Elapsed, DefaultPrestopWait, DefaultPrestopWait+3*poll)
}

// Fault: a prestop that hangs. It reported, and never says done; the app keeps serving. The
// hold drains at prestop's deadline (46 s) and returns at the bound, 51 s = 52 s − 1 s.
func TestHoldPrestopHangs(t *testing.T) {
	c := runHold(t, []timedEvent{running(100*time.Millisecond, 0, 46*time.Second)},
		&podTable{listenUntil: time.Hour, connUntil: time.Hour}, nil)
	c.want(t, ReasonDeadline, PrestopOverdue, 3)
	within(t, "drain call", c.drainedAt(t), 46100*time.Millisecond, 46100*time.Millisecond+poll)
	within(t, "release", c.result.Elapsed, 51*time.Second, 51*time.Second)
}

// A prestop whose own deadline is past hold's bound (misconfigured: a longer grace period)
// is waited for only within hold's bound.
func TestHoldBoundsAPrestopThatReportsALaterDeadline(t *testing.T) {
	c := runHold(t, []timedEvent{running(0, 0, 120*time.Second)}, &podTable{listenUntil: time.Hour}, nil)
	c.want(t, ReasonDeadline, PrestopOverdue, 3)
	within(t, "release", c.result.Elapsed, 51*time.Second, 51*time.Second)
	if warned := c.logs.FilterMessageSnippet("prestop's deadline is not hold's").Len(); warned != 1 {
		t.Errorf("%d warnings about the differing deadline, want 1", warned)
	}
}

// Fault: the app container is gone mid-hook: prestop was killed with it, its connection
// closed without "done". Nothing of the app's is left: released at once, warned.
func TestHoldPrestopKilledWithItsContainer(t *testing.T) {
	c := runHold(t, []timedEvent{running(0, 0, 46*time.Second), closed(10*time.Second, 0)},
		&podTable{listenUntil: 10 * time.Second, connUntil: 10 * time.Second}, nil)
	c.want(t, ReasonReleased, PrestopGone, 0)
	within(t, "drain call", c.drainedAt(t), 10*time.Second, 10*time.Second+poll)
	within(t, "release", c.result.Elapsed, 10*time.Second, 10*time.Second+3*poll)
	if c.logs.FilterMessageSnippet("closed before it said done").Len() != 1 {
		t.Error("no warning that prestop's connection closed before done")
	}
}

// Fault: prestop crashed but the app lives on (the kubelet sends it SIGTERM then), and
// never lets go: the proxy is kept while the app serves, to the bound, not longer.
func TestHoldPrestopCrashedAppStillServes(t *testing.T) {
	c := runHold(t, []timedEvent{running(0, 0, 46*time.Second), closed(10*time.Second, 0)},
		&podTable{listenUntil: time.Hour, connUntil: time.Hour}, nil)
	c.want(t, ReasonDeadline, PrestopGone, 3)
	within(t, "release", c.result.Elapsed, 51*time.Second, 51*time.Second)
}

// Fault: the channel cannot be opened. No prestop can report, so the hold cannot know when
// it decides: it drains only once the app stops listening (which follows the hook), and
// releases when the app has let go. Exit 2 says the channel failed.
func TestHoldChannelCannotBeOpened(t *testing.T) {
	c := runHold(t, nil, &podTable{listenUntil: 20 * time.Second, connUntil: 22 * time.Second}, func(cfg *Config) {
		cfg.Channel, cfg.ChannelErr = nil, errors.New("listen unix @meshdrain-hold: bind: address already in use")
	})
	c.want(t, ReasonReleased, PrestopAbsent, ExitChannelError)
	within(t, "drain call", c.drainedAt(t), 20*time.Second, 20*time.Second+poll)
	within(t, "release", c.result.Elapsed, 22*time.Second, 22*time.Second+3*poll)
}

// Fault: nothing reports and the app never stops listening (a hook that does not report,
// or an app that ignores SIGTERM): drained at the hook deadline, released at the bound.
func TestHoldUnreportedHookHoldsTheApp(t *testing.T) {
	c := runHold(t, nil, &podTable{listenUntil: time.Hour}, nil)
	c.want(t, ReasonDeadline, PrestopUnreported, 3)
	within(t, "drain call", c.drainedAt(t), 46*time.Second, 46*time.Second+poll)
	within(t, "release", c.result.Elapsed, 51*time.Second, 51*time.Second)
}

// A declared port on which the app never listened (it serves elsewhere) says nothing: its
// silence is not the app letting go, so the proxy is kept for the app's drain.
func TestHoldDoesNotTrustAPortTheAppNeverListenedOn(t *testing.T) {
	c := runHold(t, []timedEvent{running(0, 0, 46*time.Second), done(6*time.Second, 0, "quiet", 0)}, &podTable{}, nil)
	c.want(t, ReasonAppDrain, PrestopDone, 0)
	within(t, "release", c.result.Elapsed, 11*time.Second, 11*time.Second+poll)
}

// The app cannot be seen (no port known): the proxy is kept --app-drain after prestop's end.
func TestHoldAppUnseenWaitsTheAppDrain(t *testing.T) {
	c := runHold(t, []timedEvent{running(0, 0, 46*time.Second), done(12*time.Second, 0, "quiet", 0)}, nil, nil)
	c.want(t, ReasonAppDrain, PrestopDone, 0)
	within(t, "release", c.result.Elapsed, 17*time.Second, 17*time.Second+poll)
	if c.result.AppUnseen == "" {
		t.Error("the final event does not say why the app could not be seen")
	}
}

// No prestop and no port known: the app got its SIGTERM at the deletion, so the hold is
// its drain from the start.
func TestHoldNoPrestopAppUnseen(t *testing.T) {
	c := runHold(t, nil, nil, nil)
	c.want(t, ReasonAppDrain, PrestopAbsent, 0)
	within(t, "drain call", c.drainedAt(t), DefaultPrestopWait, DefaultPrestopWait+poll)
	within(t, "release", c.result.Elapsed, 5*time.Second, 5*time.Second+poll)
}

// The socket table becomes unreadable: the app cannot be seen from then on, the bound is
// its drain.
func TestHoldSocketTableLost(t *testing.T) {
	c := runHold(t, []timedEvent{running(0, 0, 46*time.Second), done(12*time.Second, 0, "quiet", 0)},
		&podTable{listenUntil: 12300 * time.Millisecond, connUntil: time.Hour, brokenAt: 13 * time.Second}, nil)
	c.want(t, ReasonAppDrain, PrestopDone, 0)
	within(t, "release", c.result.Elapsed, 17*time.Second, 17*time.Second+poll)
}

// A prestop that reports after --prestop-wait (a loaded node): the hold took the app as
// having none (the app could not be seen) and drained, but still returns no earlier than
// that prestop's end.
func TestHoldLatePrestopIsStillWaitedFor(t *testing.T) {
	c := runHold(t, []timedEvent{running(3*time.Second, 0, 43*time.Second), done(10*time.Second, 0, "quiet", 0)}, nil, nil)
	c.want(t, ReasonAppDrain, PrestopAbsent, 0)
	within(t, "release", c.result.Elapsed, 15*time.Second, 15*time.Second+poll)
}

// While the app still listens, no prestop reporting late is taken as absent: the drain
// waits for it.
func TestHoldLatePrestopWithTheAppListening(t *testing.T) {
	c := runHold(t, []timedEvent{running(3*time.Second, 0, 43*time.Second), done(10*time.Second, 0, "quiet", 0)},
		&podTable{listenUntil: 10200 * time.Millisecond, connUntil: 11 * time.Second}, nil)
	c.want(t, ReasonReleased, PrestopDone, 0)
	within(t, "drain call", c.drainedAt(t), 10*time.Second, 10*time.Second+poll)
}

// Two app containers with a prestop each: the proxy waits for both.
func TestHoldWaitsForEveryPrestop(t *testing.T) {
	c := runHold(t, []timedEvent{running(0, 0, 46*time.Second), running(0, 1, 46*time.Second),
		done(5*time.Second, 0, "quiet", 0), done(9*time.Second, 1, "deadline", 3)}, &podTable{listenUntil: 9 * time.Second}, nil)
	c.want(t, ReasonReleased, PrestopDone, 0)
	within(t, "drain call", c.drainedAt(t), 9*time.Second, 9*time.Second+poll)
	if c.result.Sessions != 2 || c.result.PrestopReason != "deadline" {
		t.Errorf("sessions %d, last prestop reason %q", c.result.Sessions, c.result.PrestopReason)
	}
}

// Under TPROXY the clients' connections sit on the app's port too, owned by the proxy: they
// are not the app's, and do not keep the proxy.
func TestHoldIgnoresTheProxysOwnSockets(t *testing.T) {
	c := runHold(t, []timedEvent{running(0, 0, 46*time.Second), done(6*time.Second, 0, "quiet", 0)},
		&podTable{listenUntil: 6 * time.Second, proxyConns: true}, nil)
	c.want(t, ReasonReleased, PrestopDone, 0)
	within(t, "release", c.result.Elapsed, 6*time.Second, 6*time.Second+3*poll)
}

// A drain call that fails (no pilot-agent /drain, as before Istio 1.21) is said: exit 1.
func TestHoldDrainCallFails(t *testing.T) {
	c := runHold(t, []timedEvent{running(0, 0, 46*time.Second), done(6*time.Second, 0, "quiet", 0)}, &podTable{listenUntil: 6 * time.Second},
		func(cfg *Config) { cfg.Drain.(*drainCall).err = errors.New("status 404: page not found") })
	c.want(t, ReasonReleased, PrestopDone, ExitDrainFailed)
	if c.result.DrainCalled || c.result.DrainErr == nil {
		t.Errorf("drain called %v error %v", c.result.DrainCalled, c.result.DrainErr)
	}
}

// Interrupted before the hook decided: no drain call.
func TestHoldInterrupted(t *testing.T) {
	clk := clock.NewAutoFake(t0)
	cfg := testConfig(clk)
	d := &drainCall{clock: clk}
	cfg.Drain = d
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	res := Run(ctx, cfg)
	if res.Reason != ReasonInterrupted || res.ExitCode() != 130 || len(d.at) != 0 {
		t.Errorf("reason %s exit %d drain calls %v", res.Reason, res.ExitCode(), d.at)
	}
}

// Every way of waiting ends by the bound, whatever the hook and the app do.
func TestHoldNeverPastItsBound(t *testing.T) {
	for _, grace := range []time.Duration{3 * time.Second, 10 * time.Second, 52 * time.Second} {
		for _, deadline := range []time.Duration{0, time.Second, grace} {
			c := runHold(t, []timedEvent{running(0, 0, time.Hour)}, &podTable{listenUntil: time.Hour, connUntil: time.Hour}, func(cfg *Config) {
				cfg.GracePeriod, cfg.AppDrain, cfg.Deadline = grace, time.Second, deadline
			})
			bound := Bound(grace, time.Second, deadline)
			if c.result.Elapsed > bound || bound > grace-time.Second {
				t.Errorf("grace %v deadline %v: returned at %v, bound %v", grace, deadline, c.result.Elapsed, bound)
			}
		}
	}
}

func TestBound(t *testing.T) {
	for _, tc := range []struct {
		grace, appDrain, deadline, want time.Duration
	}{
		{52 * time.Second, 5 * time.Second, 0, 51 * time.Second},
		{30 * time.Second, 5 * time.Second, 10 * time.Second, 15 * time.Second},
		{30 * time.Second, 5 * time.Second, 30 * time.Second, 29 * time.Second},
		{time.Second, 5 * time.Second, 0, 0},
	} {
		if got := Bound(tc.grace, tc.appDrain, tc.deadline); got != tc.want {
			t.Errorf("Bound(%v, %v, %v) = %v, want %v", tc.grace, tc.appDrain, tc.deadline, got, tc.want)
		}
	}
}

// A configuration hold cannot use keeps the proxy until the bound, makes no drain call, and
// says why in its final event (exit 2).
func TestFailSafeKeepsTheProxyUntilTheBound(t *testing.T) {
	clk := clock.NewAutoFake(t0)
	core, logs := observer.New(zap.DebugLevel)
	res := FailSafe(context.Background(), FailSafeConfig{Problems: []error{errors.New("--poll: bad")}, Hold: 51 * time.Second,
		Clock: clk, Logger: zap.New(core)})
	if res.Reason != ReasonConfigError || res.ExitCode() != 2 || res.Elapsed != 51*time.Second || res.DrainCalled {
		t.Errorf("result %+v", res)
	}
	final := logs.All()[logs.Len()-1]
	if final.Message != FinalMessage || final.ContextMap()["reason"] != string(ReasonConfigError) {
		t.Errorf("last event %v %v", final.Message, final.ContextMap())
	}
}
