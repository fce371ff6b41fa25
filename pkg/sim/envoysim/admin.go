package envoysim

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"

	"go.uber.org/zap"

	"github.com/meshdrain/meshdrain/pkg/sim/httpwire"
)

// adminServer is Envoy's admin API. Envoy runs admin handlers one at a time on its main
// thread, so handlers here are serialised too: a slow /stats delays /ready, as in
// envoyproxy/envoy#16425.
type adminServer struct {
	s    *Sidecar
	addr string

	mu  sync.Mutex // guards ln and srv across refuse/restore
	ln  net.Listener
	srv *httpwire.Server

	mainThread sync.Mutex

	// http.admin.* and listener.admin.*
	rqTotal, rqActive, rqCompleted *stat
	rqClass                        [6]*stat
	cxTotal, cxActive              stats
	lnTotal, lnActive              stats
}

// adminCommand is one admin endpoint; mutating ones answer 405 to anything but POST.
type adminCommand struct {
	path, help string
	mutates    bool
	handle     func(a *adminServer, params map[string]string) adminResponse
}

type adminResponse struct {
	code        int
	contentType string
	body        []byte
	after       func() // runs once the response is written (quitquitquit)
}

func textResponse(code int, body string) adminResponse {
	return adminResponse{code: code, contentType: "text/plain; charset=UTF-8", body: []byte(body)}
}

var adminCommands []adminCommand

func init() {
	adminCommands = []adminCommand{
		{"/drain_listeners", "drain listeners", true, (*adminServer).handleDrainListeners},
		{"/healthcheck/fail", "cause the server to fail health checks", true, func(a *adminServer, _ map[string]string) adminResponse {
			a.s.setHealthFailed(true)
			a.s.log.Info("health check failed by admin")
			return textResponse(200, "OK\n")
		}},
		{"/healthcheck/ok", "cause the server to pass health checks", true, func(a *adminServer, _ map[string]string) adminResponse {
			a.s.setHealthFailed(false)
			return textResponse(200, "OK\n")
		}},
		{"/quitquitquit", "exit the server", true, func(a *adminServer, _ map[string]string) adminResponse {
			r := textResponse(200, "OK\n")
			r.after = func() { go a.s.exit("quitquitquit") }
			return r
		}},
		{"/ready", "print server state, return 200 if LIVE, otherwise return 503", false, func(a *adminServer, _ map[string]string) adminResponse {
			state := a.s.state()
			code := 200
			if state != stateLive {
				code = 503
			}
			return textResponse(code, state.String()+"\n")
		}},
		{"/reset_counters", "reset all counters to zero", true, func(a *adminServer, _ map[string]string) adminResponse {
			a.s.store.resetCounters()
			return textResponse(200, "OK\n")
		}},
		{"/server_info", "print server version/status information", false, func(a *adminServer, _ map[string]string) adminResponse {
			body, _ := json.MarshalIndent(a.s.serverInfo(), "", " ")
			return adminResponse{code: 200, contentType: "application/json", body: append(body, '\n')}
		}},
		{"/stats", "print server stats", false, func(a *adminServer, params map[string]string) adminResponse {
			return a.handleStats(params, formatText)
		}},
		{"/stats/prometheus", "print server stats in prometheus format", false, func(a *adminServer, params map[string]string) adminResponse {
			return a.handleStats(params, formatPrometheus)
		}},
	}
}

func startAdmin(s *Sidecar) (*adminServer, error) {
	ln, err := listenAddr(s.cfg.AdminAddr)
	if err != nil {
		return nil, fmt.Errorf("admin: %w", err)
	}
	st := s.store
	a := &adminServer{s: s, addr: ln.Addr().String()}
	a.rqTotal = st.counter("http.admin.downstream_rq_total")
	a.rqActive = st.gauge("http.admin.downstream_rq_active")
	a.rqCompleted = st.counter("http.admin.downstream_rq_completed")
	for class := 1; class <= 5; class++ {
		a.rqClass[class] = st.counter(fmt.Sprintf("http.admin.downstream_rq_%dxx", class))
	}
	a.cxTotal = stats{st.counter("http.admin.downstream_cx_total"), st.counter("listener.admin.downstream_cx_total"), st.counter("listener.admin.main_thread.downstream_cx_total")}
	a.cxActive = stats{st.gauge("http.admin.downstream_cx_active"), st.gauge("listener.admin.downstream_cx_active"), st.gauge("listener.admin.main_thread.downstream_cx_active")}
	a.serve(ln)
	return a, nil
}

// serve starts an HTTP server on ln.
func (a *adminServer) serve(ln net.Listener) {
	srv := &httpwire.Server{Handler: a, OnPanic: func(r any) { a.s.log.Error("admin handler panic", zap.String("panic", fmt.Sprint(r))) }}
	counted := &adminListener{Listener: ln, a: a}
	a.mu.Lock()
	a.ln, a.srv = counted, srv
	a.mu.Unlock()
	go func() { _ = srv.Serve(counted) }()
}

// refuse closes the admin socket and every admin connection: the port refuses connections.
func (a *adminServer) refuse() {
	a.mu.Lock()
	srv, ln := a.srv, a.ln
	a.srv, a.ln = nil, nil
	a.mu.Unlock()
	if ln != nil {
		// Closed here too: Serve may not have registered it with srv yet.
		_ = ln.Close()
	}
	if srv != nil {
		_ = srv.Close()
	}
}

// restore listens again on the same address after refuse.
func (a *adminServer) restore() error {
	a.mu.Lock()
	open := a.srv != nil
	a.mu.Unlock()
	if open {
		return nil
	}
	select {
	case <-a.s.closing:
		return nil
	default:
	}
	ln, err := listenAddr(a.addr)
	if err != nil {
		return fmt.Errorf("admin: reopen: %w", err)
	}
	a.serve(ln)
	return nil
}

func (a *adminServer) close() { a.refuse() }

// adminListener counts admin connections in http.admin.* and listener.admin.*.
type adminListener struct {
	net.Listener
	a *adminServer
}

func (al *adminListener) Accept() (net.Conn, error) {
	conn, err := al.Listener.Accept()
	if err != nil {
		return nil, err
	}
	al.a.cxTotal.inc()
	al.a.cxActive.inc()
	return &countedConn{Conn: conn, onClose: al.a.cxActive.dec}, nil
}

// ServeHTTP applies the injected faults, then dispatches as Envoy's AdminImpl::runCallback:
// exact path match, POST required for mutating commands, 404 with the help text otherwise.
func (a *adminServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if resp, ok := a.s.faults.frozenAnswer(r); ok {
		a.writeFrozen(w, resp)
		return
	}
	a.rqTotal.inc()
	a.rqActive.inc()
	defer a.rqActive.dec()

	fault := a.s.faults.current()
	if !a.s.faults.delay(r, fault) {
		return
	}
	switch fault.mode {
	case FaultError:
		a.write(w, textResponse(500, "envoysim: injected admin error\n"))
		return
	case FaultGarbage:
		a.write(w, adminResponse{code: 200, contentType: "text/plain; charset=UTF-8", body: garbage})
		return
	}

	a.mainThread.Lock()
	resp := a.dispatch(r)
	a.mainThread.Unlock()

	if fault.mode == FaultTruncate {
		a.writeTruncated(w, resp)
		return
	}
	a.write(w, resp)
	a.s.faults.remember(r, resp)
	if resp.after != nil {
		httpwire.AfterResponse(w, resp.after)
	}
}

func (a *adminServer) dispatch(r *http.Request) adminResponse {
	for _, c := range adminCommands {
		if r.URL.Path != c.path {
			continue
		}
		if c.mutates && r.Method != http.MethodPost {
			return textResponse(405, fmt.Sprintf("Method %s not allowed, POST required.", r.Method))
		}
		return c.handle(a, queryParams(r.URL.RawQuery))
	}
	body := "invalid path. admin commands are:\n"
	for _, c := range adminCommands {
		method := ""
		if c.mutates {
			method = " (POST)"
		}
		body += fmt.Sprintf("  %s%s: %s\n", c.path, method, c.help)
	}
	return textResponse(404, body)
}

// write sends resp with Envoy's admin headers and counts its code.
func (a *adminServer) write(w http.ResponseWriter, resp adminResponse) {
	h := w.Header()
	h.Set("Content-Type", resp.contentType)
	h.Set("Cache-Control", "no-cache, max-age=0")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Server", "envoy")
	h.Set("Content-Length", strconv.Itoa(len(resp.body)))
	w.WriteHeader(resp.code)
	_, _ = w.Write(resp.body)
	a.charge(resp.code)
}

func (a *adminServer) charge(code int) {
	a.rqCompleted.inc()
	if class := code / 100; class >= 1 && class <= 5 {
		a.rqClass[class].inc()
	}
}

// writeTruncated announces the whole body but sends only half of it, then closes the
// connection: the client sees an unexpected EOF.
func (a *adminServer) writeTruncated(w http.ResponseWriter, resp adminResponse) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		a.write(w, resp)
		return
	}
	conn, buf, err := hj.Hijack()
	if err != nil {
		return
	}
	defer conn.Close()
	writeRawTruncated(buf.Writer, resp)
	a.charge(resp.code)
}

func writeRawTruncated(bw *bufio.Writer, resp adminResponse) {
	fmt.Fprintf(bw, "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %d\r\nServer: envoy\r\n\r\n",
		resp.code, http.StatusText(resp.code), resp.contentType, len(resp.body)+1)
	_, _ = bw.Write(resp.body[:len(resp.body)/2])
	_ = bw.Flush()
}

// garbage is what a broken admin answers under FaultGarbage: not stats in any format.
var garbage = []byte("\x00\x17\xfe<html>garbage: {not-a-stat\nstat.without.value:\n: 12\n}}}\n")

func (a *adminServer) handleDrainListeners(params map[string]string) adminResponse {
	_, inboundOnly := params["inboundonly"]
	_, graceful := params["graceful"]
	_, skipExit := params["skip_exit"]
	code, body := a.s.drainListeners(inboundOnly, graceful, skipExit)
	return textResponse(code, body)
}

func (a *adminServer) handleStats(params map[string]string, format statsFormat) adminResponse {
	p, bad := parseStatsParams(params, format)
	if bad != "" {
		return textResponse(400, bad)
	}
	if p.usedOnly && a.s.hideUsed.Load() {
		p.types = map[statType]bool{} // no type: nothing is selected
	}
	a.s.server.uptime.set(a.s.flushedUptime())
	body, contentType := renderStats(a.s.store.all(), p)
	return adminResponse{code: 200, contentType: contentType, body: body}
}
