package podsim

import (
	"fmt"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/meshdrain/meshdrain/pkg/sim/httpwire"
)

// workHeader carries a request's service time in pod time. The client draws it, not the app,
// so that every strategy replays the very same requests with the very same latencies and
// differences between rows come from the strategy alone.
const workHeader = "X-Podsim-Work"

// app is the user's Spring Boot service on Tomcat: a bounded worker pool (a request waits
// for a free thread, as in Tomcat's accept queue) and a per-request service time. SIGTERM
// either stops it gracefully (stop accepting, close idle keep-alives, answer what is in hand
// with Connection: close, exit when nothing is left) or at once.
type app struct {
	scale    float64
	shutdown AppShutdown
	// idleGrace, when set, is how long a graceful shutdown leaves the connections idle at
	// SIGTERM open for their client's next request (answered with Connection: close) before
	// it closes those still idle: clients that reach the app directly may be sending on them
	// right then (docs/facts.md §7). Zero closes them at SIGTERM.
	idleGrace time.Duration
	workers   chan struct{}
	ln        net.Listener
	srv       *httpwire.Server

	mu         sync.Mutex
	inFlight   int                         // requests in the handler
	connState  map[net.Conn]http.ConnState // to know when the last response is written
	active     int                         // connections in StateActive
	stopping   bool
	idleClosed bool // the idle connections have been closed (at SIGTERM or after idleGrace)
	exited     bool
	exitedAt   time.Time
	done       chan struct{}
	killed     chan struct{} // closed on SIGKILL or immediate stop: handlers give up at once
	killOnce   sync.Once
	closing    chan struct{} // closed on SIGTERM: the app closes its long-lived streams
	servedOnce sync.Once

	// metrics: the app serves its request counter at /metrics on its own port, as a Go
	// service with Prometheus middleware does; requests counts every request it answered, by
	// path, /metrics and the probes' /ready included (MeshlessClients.AppMetrics).
	metrics  bool
	requests map[string]float64
}

// startApp listens on a loopback port and serves.
func startApp(threads int, scale float64, shutdown AppShutdown) (*app, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	a := &app{
		scale:    scale,
		shutdown: shutdown,
		workers:  make(chan struct{}, threads),
		ln:       ln,
		done:     make(chan struct{}),
		killed:   make(chan struct{}),
		closing:  make(chan struct{}),

		connState: map[net.Conn]http.ConnState{},
		requests:  map[string]float64{},
	}
	a.srv = &httpwire.Server{Handler: http.HandlerFunc(a.serve), ConnState: a.trackConn}
	go func() { _ = a.srv.Serve(ln) }()
	return a, nil
}

// Addr is where the sidecar forwards to.
func (a *app) Addr() string { return a.ln.Addr().String() }

func (a *app) serve(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	a.inFlight++
	a.mu.Unlock()
	defer a.requestDone()
	if a.metrics {
		// Counted once answered, as Prometheus's middleware counts.
		defer a.counted(r.URL.Path)
		if r.URL.Path == appMetricsPath {
			a.writeMetrics(w)
			return
		}
	}

	work := workOf(r, a.scale)
	// Wait for a worker thread.
	select {
	case a.workers <- struct{}{}:
	case <-a.killed:
		panic(http.ErrAbortHandler) // the process is gone: no response, the connection drops
	}
	defer func() { <-a.workers }()
	t := time.NewTimer(work)
	defer t.Stop()
	// A long-lived stream ends when the app shuts down: the server closes it (a WebSocket
	// close frame, a gRPC GOAWAY) and the client reconnects elsewhere.
	var closing <-chan struct{}
	if r.Header.Get(streamHeader) != "" {
		closing = a.closing
	}
	select {
	case <-t.C:
	case <-closing:
	case <-a.killed:
		// The process is gone: the connection drops under the request, nothing is written.
		panic(http.ErrAbortHandler)
	}
	w.Header().Set("Content-Type", "text/plain")
	_, _ = w.Write([]byte("ok\n"))
}

// appMetricsPath is where the app serves its metrics, and appRequestsCounter its request
// counter there.
const (
	appMetricsPath      = "/metrics"
	appRequestsCounter  = "http_requests_total"
	appRequestsSelector = appRequestsCounter + `{path!~"/metrics|/ready"}`
)

// counted adds an answered request to the counter.
func (a *app) counted(path string) {
	a.mu.Lock()
	a.requests[path]++
	a.mu.Unlock()
}

// writeMetrics answers /metrics in Prometheus's text format.
func (a *app) writeMetrics(w http.ResponseWriter) {
	a.mu.Lock()
	paths := make([]string, 0, len(a.requests))
	for p := range a.requests {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	var b strings.Builder
	fmt.Fprintf(&b, "# HELP %s Requests answered, by path.\n# TYPE %s counter\n", appRequestsCounter, appRequestsCounter)
	for _, p := range paths {
		fmt.Fprintf(&b, "%s{path=%q} %g\n", appRequestsCounter, p, a.requests[p])
	}
	a.mu.Unlock()
	w.Header().Set("Content-Type", "text/plain; version=0.0.4")
	_, _ = w.Write([]byte(b.String()))
}

func (a *app) requestDone() {
	a.mu.Lock()
	a.inFlight--
	a.mu.Unlock()
}

// trackConn counts connections with a request in progress. A connection leaves StateActive
// only once its response has been written, so a graceful stop exits when the count reaches
// zero without cutting the last response (the handler returning is too early: the response
// is flushed after it).
func (a *app) trackConn(c net.Conn, state http.ConnState) {
	a.mu.Lock()
	prev := a.connState[c]
	switch {
	case state == http.StateActive && prev != http.StateActive:
		a.active++
	case state != http.StateActive && prev == http.StateActive:
		a.active--
	}
	if state == http.StateClosed || state == http.StateHijacked {
		delete(a.connState, c)
	} else {
		a.connState[c] = state
	}
	last := a.stopping && a.active == 0 && (a.idleClosed || len(a.connState) == 0)
	a.mu.Unlock()
	if last {
		// Not from inside the hook: exit closes the server, which tracks this connection.
		go a.exit()
	}
}

// workOf reads the request's service time, scaled to real time.
func workOf(r *http.Request, scale float64) time.Duration {
	d, err := time.ParseDuration(r.Header.Get(workHeader))
	if err != nil || d < 0 {
		d = 0
	}
	return time.Duration(float64(d) * scale)
}

// Terminate is the kubelet's SIGTERM to the app container.
func (a *app) Terminate() {
	a.mu.Lock()
	if a.stopping || a.exited {
		a.mu.Unlock()
		return
	}
	a.stopping = true
	a.idleClosed = a.idleGrace <= 0
	idle := a.active == 0 && (a.idleClosed || len(a.connState) == 0)
	a.mu.Unlock()
	close(a.closing)

	_ = a.ln.Close() // new connections are refused from now on
	if a.shutdown == AppImmediate {
		a.Kill()
		return
	}
	if a.idleGrace > 0 {
		// No more keep-alive: every connection closes after its next response; those still
		// idle after idleGrace are closed then.
		a.srv.StopKeepAlives()
		time.AfterFunc(a.idleGrace, a.closeIdle)
	} else {
		// No more keep-alive: idle connections are closed now, busy ones after their response.
		a.srv.SetKeepAlivesEnabled(false)
	}
	if idle {
		a.exit()
	}
}

// closeIdle ends a graceful shutdown's idle grace: the connections still idle are closed,
// and the app exits if nothing is in progress.
func (a *app) closeIdle() {
	a.srv.CloseIdle()
	a.mu.Lock()
	a.idleClosed = true
	last := a.active == 0
	a.mu.Unlock()
	if last {
		a.exit()
	}
}

// Kill is SIGKILL: every connection closes, requests in flight are cut.
func (a *app) Kill() {
	_ = a.srv.Close()
	a.killOnce.Do(func() { close(a.killed) })
	a.exit()
}

// exit marks the process as gone, once; the listener and connections are closed.
func (a *app) exit() {
	a.servedOnce.Do(func() {
		_ = a.srv.Close()
		a.mu.Lock()
		a.exited = true
		a.exitedAt = time.Now()
		a.mu.Unlock()
		close(a.done)
	})
}

// Done is closed when the app process has exited.
func (a *app) Done() <-chan struct{} { return a.done }

// ExitedAt is when the process exited (zero before).
func (a *app) ExitedAt() time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.exitedAt
}

// otherReplicas stands for the service's other pods, where a client's retries and its
// traffic after it has learned the pod is gone go. It is always healthy and never counted
// as this pod's traffic.
type otherReplicas struct {
	ln     net.Listener
	srv    *httpwire.Server
	scale  float64
	closed chan struct{}
}

func startOtherReplicas(scale float64) (*otherReplicas, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	o := &otherReplicas{ln: ln, scale: scale, closed: make(chan struct{})}
	o.srv = &httpwire.Server{Handler: http.HandlerFunc(o.serve)}
	go func() { _ = o.srv.Serve(ln) }()
	return o, nil
}

func (o *otherReplicas) serve(w http.ResponseWriter, r *http.Request) {
	t := time.NewTimer(workOf(r, o.scale))
	defer t.Stop()
	select {
	case <-t.C:
	case <-o.closed:
		return
	}
	_, _ = w.Write([]byte("ok\n"))
}

func (o *otherReplicas) Addr() string { return o.ln.Addr().String() }

// Close stops the replicas at once: by then no request of the run is left.
func (o *otherReplicas) Close() {
	close(o.closed)
	_ = o.srv.Close()
}
