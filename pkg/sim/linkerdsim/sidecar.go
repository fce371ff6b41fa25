package linkerdsim

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/meshdrain/meshdrain/pkg/clock"
	"github.com/meshdrain/meshdrain/pkg/sim/httpwire"
)

// State is where the proxy is in its termination.
type State string

// States, in order.
const (
	// StateRunning serves inbound traffic and the admin port.
	StateRunning State = "running"
	// StatePreStop is a classic proxy's preStop sleep (proxy-wait-before-exit-seconds): it
	// still serves everything; SIGTERM comes when the sleep ends.
	StatePreStop State = "prestop"
	// StateDraining follows SIGTERM: every listener refuses new connections (inbound and
	// admin alike), idle connections are closed, and each open one closes after the
	// response in hand. The proxy exits when none is left or the grace period ends.
	StateDraining State = "draining"
	// StateExited: every socket is closed.
	StateExited State = "exited"
)

// Sidecar is one running emulated linkerd-proxy container.
type Sidecar struct {
	cfg     Config
	log     *zap.Logger
	clock   clock.Clock
	labels  labels
	metrics *registry
	start   time.Time

	admin   *adminServer
	inbound []*inboundListener

	mu         sync.Mutex
	state      State
	exitReason string
	exitedAt   time.Time
	accessLog  []AccessLogEntry

	done    chan struct{}
	closing chan struct{} // closed as the exit starts, before sockets close
}

// Start starts the proxy: its admin port, then every inbound listener. It is ready when
// Start returns.
func Start(cfg Config) (*Sidecar, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("linkerdsim config: %w", err)
	}
	s := &Sidecar{
		cfg:     cfg,
		log:     cfg.Logger,
		clock:   cfg.Clock,
		labels:  labels{clientID: cfg.ClientID},
		metrics: newRegistry(),
		start:   time.Now(),
		state:   StateRunning,
		done:    make(chan struct{}),
		closing: make(chan struct{}),
	}
	s.metrics.set(s.metrics.buildInfo, fmt.Sprintf(`date="",git_sha="",profile="release",vendor="linkerdsim",version=%q`, cfg.ProxyVersion), 1)
	if s.admin, err = startAdmin(s); err != nil {
		return nil, err
	}
	for _, in := range cfg.Inbound {
		l, err := startInbound(s, in)
		if err != nil {
			s.exit("start failed")
			return nil, err
		}
		s.inbound = append(s.inbound, l)
	}
	s.log.Info("linkerd proxy started", zap.String("admin", s.AdminURL()), zap.String("injection", string(cfg.Injection)),
		zap.Int("inbound_ports", len(s.inbound)))
	return s, nil
}

// AdminURL is the admin port's base URL, "http://127.0.0.1:NNNN".
func (s *Sidecar) AdminURL() string { return "http://" + s.admin.addr }

// InboundAddr is the loopback host:port of the listener for a target port, or "" when the
// proxy has no such port.
func (s *Sidecar) InboundAddr(port int) string {
	for _, l := range s.inbound {
		if l.port.Port == port {
			return l.addr
		}
	}
	return ""
}

// Terminate is the kubelet's action on this container at the pod's deletion (t0): a classic
// proxy runs its preStop sleep, if any, then gets SIGTERM; a native sidecar has no preStop
// and is left alone until the app containers have exited (AppExited).
func (s *Sidecar) Terminate() {
	if s.cfg.Injection == InjectionNative {
		s.log.Info("pod deleted: native sidecar keeps serving until the app containers exit")
		return
	}
	if s.cfg.WaitBeforeExit <= 0 {
		s.signalTerm("SIGTERM")
		return
	}
	if s.transition(StatePreStop, "preStop: sleep proxy-wait-before-exit-seconds", StateRunning) {
		go s.after(s.cfg.WaitBeforeExit, func() { s.signalTerm("SIGTERM after the preStop sleep") })
	}
}

// AppExited tells the proxy that every app container has exited: the kubelet then sends a
// native sidecar SIGTERM. A classic proxy is not told.
func (s *Sidecar) AppExited() {
	if s.cfg.Injection == InjectionNative {
		s.signalTerm("SIGTERM: the app containers have exited")
	}
}

// SignalTerm is SIGTERM to the proxy, whatever its injection (tests, and a kubelet that
// finds a native sidecar's app already gone).
func (s *Sidecar) SignalTerm() { s.signalTerm("SIGTERM") }

// signalTerm starts the graceful shutdown (linkerd2-proxy main.rs: drain on the shutdown
// signal or /shutdown; linkerd/app/core/src/serve.rs: the accept loop ends at once;
// linkerd/proxy/http/src/server.rs: each HTTP connection shuts down gracefully and holds the
// drain until it closes; linkerd2-proxy#1815: the grace period bounds the wait).
func (s *Sidecar) signalTerm(why string) {
	if !s.transition(StateDraining, why, StateRunning, StatePreStop) {
		return
	}
	go s.after(s.cfg.ShutdownGracePeriod, func() { s.exit("shutdown grace period over") })
	ctx, cancel := context.WithCancel(context.Background())
	servers := []*httpwire.Server{s.admin.srv}
	for _, l := range s.inbound {
		servers = append(servers, l.srv)
	}
	go func() {
		defer cancel()
		select {
		case <-s.closing:
		case <-ctx.Done():
		}
	}()
	go func() {
		var wg sync.WaitGroup
		for _, srv := range servers {
			wg.Add(1)
			go func(srv *httpwire.Server) {
				defer wg.Done()
				_ = srv.Shutdown(ctx)
			}(srv)
		}
		wg.Wait()
		s.exit("terminated")
	}()
}

// Kill is SIGKILL: every socket is closed at once and requests in flight are cut.
func (s *Sidecar) Kill() { s.exit("killed") }

// Close kills the proxy and waits until it has exited.
func (s *Sidecar) Close() error {
	s.Kill()
	<-s.done
	return nil
}

// Done is closed once the proxy has exited; by then every port refuses connections.
func (s *Sidecar) Done() <-chan struct{} { return s.done }

// State is where the proxy is in its termination.
func (s *Sidecar) State() State {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state
}

// ExitReason says why the proxy exited ("terminated", "shutdown grace period over",
// "killed", ...); "" while it runs.
func (s *Sidecar) ExitReason() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.exitReason
}

// ExitedAt is when the proxy exited; zero while it runs.
func (s *Sidecar) ExitedAt() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.exitedAt
}

// AccessLog returns every request through the inbound ports so far.
func (s *Sidecar) AccessLog() []AccessLogEntry {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]AccessLogEntry(nil), s.accessLog...)
}

func (s *Sidecar) logRequest(e AccessLogEntry) {
	s.mu.Lock()
	s.accessLog = append(s.accessLog, e)
	s.mu.Unlock()
}

// transition is the one place the state changes: to `to`, if the state is one of from.
func (s *Sidecar) transition(to State, why string, from ...State) bool {
	s.mu.Lock()
	prev := s.state
	if !slices.Contains(from, prev) {
		s.mu.Unlock()
		return false
	}
	s.state = to
	if to == StateExited {
		s.exitReason = why
		close(s.closing)
	}
	s.mu.Unlock()
	s.log.Info("linkerd proxy state", zap.String("from", string(prev)), zap.String("to", string(to)),
		zap.String("why", why), zap.Duration("uptime", time.Since(s.start)))
	return true
}

// exit closes every socket (the inbound and admin listeners and connections, the idle
// connections to the app) and then Done.
func (s *Sidecar) exit(reason string) {
	if !s.transition(StateExited, reason, StateRunning, StatePreStop, StateDraining) {
		return
	}
	if s.admin != nil {
		_ = s.admin.srv.Abort()
	}
	for _, l := range s.inbound {
		_ = l.srv.Abort()
		l.upstream.CloseIdle()
	}
	s.mu.Lock()
	s.exitedAt = time.Now()
	s.mu.Unlock()
	close(s.done)
}

// after runs f after d on the proxy's clock, unless the proxy exits first.
func (s *Sidecar) after(d time.Duration, f func()) {
	timer := s.clock.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C():
		f()
	case <-s.closing:
	}
}
