package envoysim

import (
	"net/http"
	"time"

	"go.uber.org/zap"
)

// statusServer is pilot-agent's status port (Istio's 15020, status.sidecar.istio.io/port):
// only its POST /drain is emulated, which is what `meshdrain hold` calls
// (pilot/cmd/pilot-agent/status/server.go handleDrain).
type statusServer struct {
	addr string
	srv  *http.Server
}

// startStatus listens on Config.StatusAddr and serves /drain.
func startStatus(s *Sidecar) (*statusServer, error) {
	ln, err := listenAddr(s.cfg.StatusAddr)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/drain", func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.WriteHeader(http.StatusMethodNotAllowed)
			return
		}
		s.DrainNow()
		w.WriteHeader(http.StatusOK)
	})
	st := &statusServer{addr: ln.Addr().String(), srv: &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}}
	go func() { _ = st.srv.Serve(ln) }()
	return st, nil
}

func (st *statusServer) close() {
	if st != nil {
		_ = st.srv.Close()
	}
}

// StatusURL is pilot-agent's status port, "http://127.0.0.1:NNNN"; "" when Config.StatusAddr
// was not given.
func (s *Sidecar) StatusURL() string {
	if s.status == nil {
		return ""
	}
	return "http://" + s.status.addr
}

// DrainNow is pilot-agent's /drain (pkg/envoy/agent.go DrainNow): Envoy's inbound listeners
// drain (inboundonly&graceful&skip_exit), and pilot-agent's next SIGTERM ends the proxy at
// once instead of draining and waiting terminationDrainDuration. pilot-agent records that
// even when its call to Envoy fails, and so does the emulator. It is not the drain at the
// termination that AgentDrain reports.
func (s *Sidecar) DrainNow() {
	url := s.AdminURL() + "/drain_listeners?inboundonly&graceful&skip_exit"
	if err := s.postAgentDrain(url); err != nil {
		s.log.Warn("pilot-agent /drain: drain listeners failed", zap.String("url", url), zap.Error(err))
	}
	s.mu.Lock()
	s.drainedNow, s.drainedNowAt = true, time.Now()
	s.mu.Unlock()
}

// DrainedNow says when pilot-agent's /drain was called (DrainNow); zero if it was not.
func (s *Sidecar) DrainedNow() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.drainedNowAt
}

// exitIfDrainedNow is pilot-agent's terminate after a /drain: it exits at once ("Agent
// already drained, exiting immediately"), and reports true.
func (s *Sidecar) exitIfDrainedNow() bool {
	s.mu.Lock()
	drained := s.drainedNow
	s.mu.Unlock()
	if drained {
		s.exit(ExitAfterDrainNow)
	}
	return drained
}

// ExitAfterDrainNow is the exit reason of a SIGTERM that came after /drain.
const ExitAfterDrainNow = "SIGTERM after /drain: exited at once"
