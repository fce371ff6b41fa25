package linkerdsim

import (
	"fmt"
	"net"
	"net/http"
	"time"

	"go.uber.org/zap"

	"github.com/meshdrain/meshdrain/pkg/sim/httpwire"
)

// adminServer is the proxy's admin port (linkerd/app/admin/src/server.rs). The proxy serves
// it through its inbound stack, so every admin request and connection is counted as inbound
// traffic on the admin address: meshdrain's own polls show up there (linkerd2-proxy
// tests/telemetry admin_request_count).
type adminServer struct {
	s        *Sidecar
	addr     string
	ip       string
	port     int
	srv      *httpwire.Server
	connLbls string
}

func startAdmin(s *Sidecar) (*adminServer, error) {
	ln, err := net.Listen("tcp", s.cfg.AdminAddr)
	if err != nil {
		return nil, fmt.Errorf("admin: listen on %s: %w", s.cfg.AdminAddr, err)
	}
	a := &adminServer{s: s, addr: ln.Addr().String()}
	a.ip, a.port = portOf(a.addr)
	a.connLbls = s.labels.clientConn(a.ip, a.port)
	a.srv = &httpwire.Server{Handler: a, OnPanic: func(r any) { s.log.Error("admin handler panic", zap.String("panic", fmt.Sprint(r))) }}
	go func() { _ = a.srv.Serve(&countingListener{Listener: ln, reg: s.metrics, labels: a.connLbls}) }()
	return a, nil
}

func (a *adminServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	route := "default"
	if r.URL.Path == "/ready" || r.URL.Path == "/live" {
		route = "probe"
	}
	reg := a.s.metrics
	endpoint := a.s.labels.endpoint(a.ip, a.port, route)
	reg.add(reg.requests, endpoint, 1)
	reg.add(reg.routeRequests, routeRequest(a.port, route), 1)
	code := a.serve(w, r)
	reg.observe(reg.latency, latency(endpoint, code), float64(time.Since(start).Milliseconds()))
	reg.add(reg.responses, response(endpoint, code, false, ""), 1)
}

// serve answers one admin request and returns its status.
func (a *adminServer) serve(w http.ResponseWriter, r *http.Request) int {
	text := func(code int, body string) int {
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(code)
		_, _ = w.Write([]byte(body))
		return code
	}
	switch r.URL.Path {
	case "/metrics":
		w.Header().Set("Content-Type", "text/plain")
		if err := a.s.metrics.write(w); err != nil {
			return text(http.StatusInternalServerError, err.Error())
		}
		return http.StatusOK
	case "/ready":
		// Ready from start to exit: after SIGTERM the admin port refuses connections, so
		// nobody sees it turn not ready.
		return text(http.StatusOK, "ready\n")
	case "/live":
		return text(http.StatusOK, "live\n")
	case "/shutdown":
		if !a.s.cfg.ShutdownEndpoint {
			w.WriteHeader(http.StatusNotFound)
			return http.StatusNotFound
		}
		if r.Method != http.MethodPost {
			w.WriteHeader(http.StatusMethodNotAllowed)
			return http.StatusMethodNotAllowed
		}
		if !remoteIsLoopback(r.RemoteAddr) {
			return text(http.StatusForbidden, "Requests are only permitted from localhost.")
		}
		httpwire.AfterResponse(w, func() { a.s.signalTerm("shutdown via admin interface") })
		return text(http.StatusOK, "shutdown\n")
	}
	w.WriteHeader(http.StatusNotFound)
	return http.StatusNotFound
}

func remoteIsLoopback(remote string) bool {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
