package envoysim

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/meshdrain/meshdrain/pkg/sim/httpwire"
)

// Terminate is what the kubelet does to the istio-proxy container at pod deletion: SIGTERM
// for a classic sidecar (pilot-agent then acts per Config.Agent), the preStop hook for a
// native one. It returns at once; Done tells when Envoy has exited. Calling it again does
// nothing.
func (s *Sidecar) Terminate() {
	s.mu.Lock()
	if s.terminating || s.exited {
		s.mu.Unlock()
		return
	}
	s.terminating = true
	s.mu.Unlock()
	s.log.Info("terminate", zap.String("agent", string(s.cfg.Agent)))
	switch s.cfg.Agent {
	case AgentNone:
		// Envoy's own SIGTERM handling: shut down at once, no drain.
		s.exit("SIGTERM")
	case AgentClassic:
		go s.runClassic()
	case AgentExitOnZero:
		go s.runExitOnZero()
	case AgentNative:
		go s.runNative()
	}
}

// agentClient is pilot-agent's HTTP client for Envoy's admin API: one connection a call.
func (s *Sidecar) agentClient() *httpwire.Client {
	return &httpwire.Client{MaxIdlePerHost: -1}
}

// agentDrain is pilot-agent's Drain: POST /drain_listeners?inboundonly&graceful[&skip_exit].
// A failure is logged and ignored, as pilot-agent does; AgentDrain tells it.
func (s *Sidecar) agentDrain(skipExit bool) {
	url := s.AdminURL() + "/drain_listeners?inboundonly&graceful"
	if skipExit {
		url += "&skip_exit"
	}
	err := s.postAgentDrain(url)
	s.mu.Lock()
	s.agentDrainedAt, s.agentDrainErr = time.Now(), err
	if err != nil {
		s.agentDrainedAt = time.Time{}
	}
	s.mu.Unlock()
	if err != nil {
		s.log.Warn("pilot-agent: drain listeners failed", zap.String("url", url), zap.Error(err))
	}
}

// postAgentDrain makes pilot-agent's drain call, within its request timeout.
func (s *Sidecar) postAgentDrain(url string) error {
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.AgentRequestTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, nil)
	if err != nil {
		return err
	}
	resp, err := s.agentClient().Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("POST %s: %s", url, resp.Status)
	}
	return nil
}

// AgentDrain says when pilot-agent's drain call at termination (Terminate) was answered, or
// why it failed: zero and nil while none has ended. pilot-agent goes on without its drain
// when the call fails, and so does the emulator; a simulator that runs a scenario in which the
// sidecar drains at the deletion learns here whether, and when, it did (on a loaded machine
// the call can time out, or be answered late).
func (s *Sidecar) AgentDrain() (answered time.Time, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.agentDrainedAt, s.agentDrainErr
}

// wait waits d, or less if Envoy exits first; false when Envoy exited.
func (s *Sidecar) wait(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-s.closing:
		return false
	}
}

// ExitTerminationDrainDuration is the exit reason of pilot-agent's kill of Envoy at the end
// of terminationDrainDuration.
const ExitTerminationDrainDuration = "terminationDrainDuration elapsed"

// runClassic is pilot-agent's default termination: drain, sleep terminationDrainDuration,
// kill Envoy whatever is in flight; after a /drain (DrainNow), exit at once.
func (s *Sidecar) runClassic() {
	if s.exitIfDrainedNow() {
		return
	}
	s.agentDrain(false)
	s.log.Info("pilot-agent: graceful termination period starting", zap.Duration("termination_drain_duration", s.cfg.TerminationDrainDuration))
	if s.wait(s.cfg.TerminationDrainDuration) {
		s.exit(ExitTerminationDrainDuration)
	}
}

// runExitOnZero is EXIT_ON_ZERO_ACTIVE_CONNECTIONS: drain, sleep MINIMUM_DRAIN_DURATION, then
// poll the listeners' active connections every ExitOnZeroPoll and exit at zero, when the stat
// is absent, or after five failed polls in a row (istio/istio pkg/envoy/agent.go).
func (s *Sidecar) runExitOnZero() {
	if s.exitIfDrainedNow() {
		return
	}
	s.agentDrain(false)
	var deadline <-chan time.Time
	if s.cfg.ExitOnZeroDeadline > 0 {
		t := time.NewTimer(s.cfg.ExitOnZeroDeadline)
		defer t.Stop()
		deadline = t.C
	}
	minimum := time.NewTimer(s.cfg.MinimumDrainDuration)
	defer minimum.Stop()
	select {
	case <-minimum.C:
	case <-deadline:
		s.exit("exit-on-zero deadline")
		return
	case <-s.closing:
		return
	}
	poll := time.NewTimer(s.cfg.ExitOnZeroPoll)
	defer poll.Stop()
	failures := 0
	for {
		select {
		case <-poll.C:
		case <-deadline:
			s.exit("exit-on-zero deadline")
			return
		case <-s.closing:
			return
		}
		active, err := s.activeProxyConnections()
		switch {
		case err != nil:
			failures++
			s.log.Warn("pilot-agent: active connections poll failed", zap.Int("attempt", failures), zap.Error(err))
			if failures > 4 {
				s.exit("exit-on-zero: stats unavailable")
				return
			}
		case active < 0:
			s.exit("exit-on-zero: downstream_cx_active not available")
			return
		case active == 0:
			s.exit("exit-on-zero: no active connections")
			return
		default:
			failures = 0
			s.log.Debug("pilot-agent: active connections remain", zap.Int("active", active))
		}
		poll.Reset(s.cfg.ExitOnZeroPoll)
	}
}

// agentInternalListeners are skipped by pilot-agent's sum: admin, readiness and Prometheus.
var agentInternalListeners = map[string]bool{
	"listener.admin.downstream_cx_active":             true,
	"listener.admin.main_thread.downstream_cx_active": true,
	"listener.0.0.0.0_15021.downstream_cx_active":     true,
	"listener.0.0.0.0_15090.downstream_cx_active":     true,
	"listener.[__]_15021.downstream_cx_active":        true,
	"listener.[__]_15090.downstream_cx_active":        true,
}

// activeProxyConnections is pilot-agent's poll: -1 when the answer is empty.
func (s *Sidecar) activeProxyConnections() (int, error) {
	url := s.AdminURL() + "/stats?usedonly&filter=downstream_cx_active$"
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.AgentRequestTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return -1, err
	}
	resp, err := s.agentClient().Do(req)
	if err != nil {
		return -1, fmt.Errorf("get %s: %w", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return -1, fmt.Errorf("get %s: read body: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return -1, fmt.Errorf("get %s: status %d", url, resp.StatusCode)
	}
	if len(body) == 0 {
		return -1, nil
	}
	active := 0
	for _, line := range strings.Split(string(bytes.TrimSuffix(body, []byte("\n"))), "\n") {
		name, value, ok := strings.Cut(strings.TrimSpace(line), ": ")
		if !ok || !strings.HasPrefix(name, "listener.") || strings.Contains(name, "worker_") || agentInternalListeners[name] {
			continue
		}
		n, err := strconv.ParseUint(strings.TrimSpace(value), 10, 64)
		if err != nil {
			continue
		}
		active += int(n)
	}
	return active, nil
}

// runNative is a native sidecar's preStop (pilot-agent /drain: drain with skip_exit), then
// waiting for the kubelet's SIGTERM once every app container has exited, on which pilot-agent
// exits at once because it has already drained.
func (s *Sidecar) runNative() {
	s.agentDrain(true)
	select {
	case <-s.appExited:
		s.exit("SIGTERM after app exit")
	case <-s.closing:
	}
}
