package envoysim

import (
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// serverState is Envoy's server.state: it only moves between LIVE and DRAINING here
// (/healthcheck/fail and /healthcheck/ok); initialisation is instantaneous.
type serverState int

const (
	stateLive serverState = iota
	stateDraining
	statePreInitializing
	stateInitializing
)

func (s serverState) String() string {
	return [...]string{"LIVE", "DRAINING", "PRE_INITIALIZING", "INITIALIZING"}[s]
}

// drainDirection mirrors Envoy's Network::DrainDirection: an "all" drain covers inbound.
type drainDirection int

const (
	drainInboundOnly drainDirection = iota + 1
	drainAll
)

// Sidecar is one running emulated istio-proxy container: Envoy plus, per Config.Agent, the
// pilot-agent in front of it.
type Sidecar struct {
	cfg   Config
	log   *zap.Logger
	store *store
	names namer
	start time.Time

	admin     *adminServer
	status    *statusServer // pilot-agent's status port; nil without Config.StatusAddr
	inbound   []inboundSocket
	listeners map[string]*listenerStats
	server    serverStats
	faults    *Faults
	hideUsed  atomic.Bool // HideFromUsedOnly

	mu               sync.Mutex
	healthFailed     bool
	drainStarted     map[drainDirection]time.Time
	timers           []*time.Timer
	listenersStopped bool
	exited           bool
	exitedAt         time.Time
	exitReason       string
	accessLog        []AccessLogEntry
	terminating      bool
	// agentDrainedAt is when pilot-agent's drain call at termination was answered OK, and
	// agentDrainErr why it failed (AgentDrain).
	agentDrainedAt time.Time
	agentDrainErr  error
	// drainedNow is pilot-agent's skipDrain: /drain was called (DrainNow), so its SIGTERM
	// ends the proxy at once; drainedNowAt is when.
	drainedNow   bool
	drainedNowAt time.Time

	appExited     chan struct{}
	appExitedOnce sync.Once
	done          chan struct{}
	closing       chan struct{} // closed as the exit starts, before sockets close
}

// serverStats are the server-wide stats every Envoy has.
type serverStats struct {
	state, live, uptime, concurrency, totalConnections stats
	listenerStopped                                    *stat
	listenersActive                                    *stat
}

// listenerStats are one Envoy listener's connection stats, shared by every inbound port that
// the listener serves (Istio's virtualInbound serves them all).
type listenerStats struct {
	address      string
	cxTotal      *stat
	cxActive     *stat
	cxDestroy    *stat
	workerTotal  []*stat
	workerActive []*stat
	mu           sync.Mutex
	next         int
}

// Start starts the sidecar: the admin API, then every inbound listener. Envoy is LIVE when it
// returns.
func Start(cfg Config) (*Sidecar, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("envoysim config: %w", err)
	}
	s := &Sidecar{
		cfg:          cfg,
		log:          cfg.Logger,
		store:        newStore(newTagExtractor(cfg.Profile), inclusionFunc(cfg)),
		names:        namer{profile: cfg.Profile, bind: cfg.BindAddress},
		start:        time.Now(),
		listeners:    map[string]*listenerStats{},
		drainStarted: map[drainDirection]time.Time{},
		appExited:    make(chan struct{}),
		done:         make(chan struct{}),
		closing:      make(chan struct{}),
	}
	s.faults = &Faults{s: s}
	s.createStaticStats()

	s.admin, err = startAdmin(s)
	if err != nil {
		return nil, err
	}
	if cfg.StatusAddr != "" {
		if s.status, err = startStatus(s); err != nil {
			s.exit("start failed")
			return nil, fmt.Errorf("status port: %w", err)
		}
	}
	for i, in := range cfg.Inbound {
		var l inboundSocket
		var err error
		if in.Protocol == ProtocolTCP {
			l, err = startTCP(s, s.names.inboundNames(in, i))
		} else {
			l, err = startInbound(s, s.names.inboundNames(in, i))
		}
		if err != nil {
			s.exit("start failed")
			return nil, err
		}
		s.inbound = append(s.inbound, l)
	}
	s.server.listenersActive.set(uint64(len(s.inbound)))
	if cfg.Agent == AgentNative {
		go s.nativeAppExitWithoutPreStop()
	}
	s.log.Info("envoy started", zap.String("admin", s.AdminURL()), zap.String("profile", string(cfg.Profile)),
		zap.String("agent", string(cfg.Agent)), zap.Int("inbound_ports", len(s.inbound)))
	return s, nil
}

// createStaticStats creates the stats that exist from startup on.
func (s *Sidecar) createStaticStats() {
	st := s.store
	s.server = serverStats{
		state:            stats{st.gauge("server.state")},
		live:             stats{st.gauge("server.live")},
		uptime:           stats{st.gauge("server.uptime")},
		concurrency:      stats{st.gauge("server.concurrency")},
		totalConnections: stats{st.gauge("server.total_connections")},
		listenerStopped:  st.counter("listener_manager.listener_stopped"),
		listenersActive:  st.gauge("listener_manager.total_listeners_active"),
	}
	s.server.state[0].set(uint64(stateLive))
	s.server.live[0].set(1)
	s.server.concurrency[0].set(uint64(s.cfg.Workers))
	s.server.totalConnections[0].set(0)
	st.gauge("server.hot_restart_epoch").set(0)
	st.gauge("server.days_until_first_cert_expiring").set(0)
	st.counter("listener_manager.listener_added").add(uint64(len(s.cfg.Inbound)))
	st.gauge("listener_manager.workers_started").set(1)
	st.gauge("cluster_manager.active_clusters").set(uint64(len(s.cfg.Inbound) + s.cfg.ExtraClusters + 1))
	st.gauge("cluster_manager.warming_clusters").set(0)
	st.counter("cluster_manager.cluster_added").add(uint64(len(s.cfg.Inbound) + s.cfg.ExtraClusters + 1))
	st.histogram("server.initialization_time_ms").record(120)

	if s.cfg.Profile.istio() {
		st.customGauge("istiocustom", "istio_build", []label{{"component", "proxy"}, {"tag", "1.24.0"}}).set(1)
		// The xds-grpc cluster is a bootstrap cluster: its name is never delimited.
		st.gauge("cluster.xds-grpc.upstream_cx_active").set(1)
		st.counter("cluster.xds-grpc.upstream_cx_total").add(1)
		st.counter("cluster.xds-grpc.upstream_rq_total").add(1)
		st.gauge("cluster.xds-grpc.upstream_rq_active").set(1)
		// Istio's other listeners: virtualOutbound, the health port kubelet probes and the
		// Prometheus port. pilot-agent's exit-on-zero poll skips 15021 and 15090.
		for _, addr := range []string{"0.0.0.0_15001", "0.0.0.0_15021", "0.0.0.0_15090"} {
			l := s.listenerStats(addr)
			if addr != "0.0.0.0_15001" {
				l.cxTotal.add(0)
				l.cxActive.set(0)
			}
		}
	}
	for i := 0; i < s.cfg.ExtraClusters; i++ {
		name := s.names.extraClusterName(i)
		for _, es := range extraClusterStats {
			full := s.names.cluster(name, es.name)
			var created *stat
			if es.typ == typeGauge {
				created = st.gauge(full)
			} else {
				created = st.counter(full)
			}
			if es.used {
				created.set(es.value)
			}
		}
	}
}

// listenerStats returns the stats of the listener at address, creating them once.
func (s *Sidecar) listenerStats(address string) *listenerStats {
	if l, ok := s.listeners[address]; ok {
		return l
	}
	st := s.store
	prefix := "listener." + address + "."
	l := &listenerStats{
		address:   address,
		cxTotal:   st.counter(prefix + "downstream_cx_total"),
		cxActive:  st.gauge(prefix + "downstream_cx_active"),
		cxDestroy: st.counter(prefix + "downstream_cx_destroy"),
	}
	for w := 0; w < s.cfg.Workers; w++ {
		wp := fmt.Sprintf("%sworker_%d.", prefix, w)
		l.workerTotal = append(l.workerTotal, st.counter(wp+"downstream_cx_total"))
		l.workerActive = append(l.workerActive, st.gauge(wp+"downstream_cx_active"))
	}
	s.listeners[address] = l
	return l
}

// accepted counts a new connection on a worker, round robin as Envoy's connection balancing
// roughly does, and returns the stats to decrement when it closes.
func (l *listenerStats) accepted() stats {
	l.mu.Lock()
	w := l.next % len(l.workerTotal)
	l.next++
	l.mu.Unlock()
	stats{l.cxTotal, l.workerTotal[w]}.inc()
	active := stats{l.cxActive, l.workerActive[w]}
	active.inc()
	return active
}

// AdminURL is the admin API's base URL, "http://127.0.0.1:NNNN".
func (s *Sidecar) AdminURL() string { return "http://" + s.admin.addr }

// InboundAddr is the loopback host:port of the listener for a target port, or "" when the
// sidecar has no such port.
func (s *Sidecar) InboundAddr(port int) string {
	for _, l := range s.inbound {
		if l.target().Port == port {
			return l.address()
		}
	}
	return ""
}

// Done is closed once Envoy has exited for any reason; by then its admin port and inbound
// listeners refuse connections.
func (s *Sidecar) Done() <-chan struct{} { return s.done }

// ExitedAt is when Envoy exited; zero while it runs.
func (s *Sidecar) ExitedAt() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.exitedAt
}

// ExitReason says why Envoy exited ("terminated", "killed", "quitquitquit", ...); "" while it
// runs.
func (s *Sidecar) ExitReason() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.exitReason
}

// Faults is the runtime fault injection of this sidecar.
func (s *Sidecar) Faults() *Faults { return s.faults }

// HideFromUsedOnly makes /stats?usedonly answer no stat at all, as if Envoy had cleared every
// used flag just before the answer: the worst a usedonly poll can show. Envoy can clear the
// flag (Metric::markUnused in source/common/stats/allocator.cc; a hot restart's NeverImport
// gauge merge clears it too); which of its code paths do so, and when, was not confirmed
// here, so the emulator never clears it by itself: tests turn this on to check that no
// decision rests on a usedonly answer.
func (s *Sidecar) HideFromUsedOnly(on bool) { s.hideUsed.Store(on) }

// Kill is SIGKILL: every socket is closed at once and in-flight requests are cut.
func (s *Sidecar) Kill() { s.exit("killed") }

// Close kills the sidecar and waits until it has exited.
func (s *Sidecar) Close() error {
	s.Kill()
	<-s.done
	return nil
}

// AppExited tells the sidecar that every app container has exited. For a native sidecar the
// kubelet then sends SIGTERM and Envoy exits at once; other modes do not learn of it.
func (s *Sidecar) AppExited() {
	s.appExitedOnce.Do(func() { close(s.appExited) })
}

// exit is the one place where Envoy stops: listeners and connections close, then Done closes.
// Envoy exiting (SIGTERM, quitquitquit, pilot-agent's kill) does not drain, so it is the same
// as a kill from a client's point of view.
func (s *Sidecar) exit(reason string) {
	s.mu.Lock()
	if s.exited {
		s.mu.Unlock()
		return
	}
	s.exited = true
	s.exitReason = reason
	for _, t := range s.timers {
		t.Stop()
	}
	close(s.closing)
	s.mu.Unlock()

	for _, l := range s.inbound {
		l.close()
	}
	if s.admin != nil {
		s.admin.close()
	}
	s.status.close()
	s.mu.Lock()
	s.exitedAt = time.Now()
	s.mu.Unlock()
	s.log.Info("envoy exited", zap.String("reason", reason), zap.Duration("uptime", time.Since(s.start)))
	close(s.done)
}

// afterFunc runs f after d unless Envoy has exited by then.
func (s *Sidecar) afterFunc(d time.Duration, f func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.exited {
		return
	}
	s.timers = append(s.timers, time.AfterFunc(d, f))
}

// state is Envoy's server state.
func (s *Sidecar) state() serverState {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.healthFailed {
		return stateDraining
	}
	return stateLive
}

// setHealthFailed is /healthcheck/fail (true) and /healthcheck/ok (false).
func (s *Sidecar) setHealthFailed(failed bool) {
	s.mu.Lock()
	s.healthFailed = failed
	s.mu.Unlock()
	if failed {
		s.server.state.set(uint64(stateDraining))
	} else {
		s.server.state.set(uint64(stateLive))
	}
}

func (ss stats) set(v uint64) {
	for _, s := range ss {
		s.set(v)
	}
}

// drainListeners is /drain_listeners. It returns the status code and body Envoy answers with
// (source/server/admin/listeners_handler.cc).
func (s *Sidecar) drainListeners(inboundOnly, graceful, skipExit bool) (int, string) {
	if skipExit && !graceful && !s.cfg.NonGracefulDrainNotifies {
		return 400, "skip_exit requires graceful\n"
	}
	direction := drainAll
	if inboundOnly {
		direction = drainInboundOnly
	}
	if graceful {
		started, end := s.startDrainSequence(direction)
		if !started {
			// Already draining in that direction: Envoy's DrainManagerImpl::startDrainSequence
			// queues this call's completion for the end of the running drain, or runs it now
			// if that drain time is over. So a call without skip_exit still stops the
			// listeners then, even when the first drain had skip_exit (native sidecars).
			if !skipExit {
				s.afterFunc(max(time.Until(end), 0), func() { s.stopListeners("drain time over") })
			}
			return 200, "OK\n"
		}
		s.log.Info("graceful drain started", zap.Bool("inbound_only", inboundOnly), zap.Bool("skip_exit", skipExit),
			zap.Duration("drain_time", s.cfg.DrainTime), zap.String("strategy", s.cfg.DrainStrategy))
		s.afterFunc(s.cfg.DrainTime, func() {
			if !skipExit {
				s.stopListeners("drain time over")
			}
		})
		s.faults.drainStarted()
		return 200, "OK\n"
	}
	if s.cfg.NonGracefulDrainNotifies {
		if started, _ := s.startDrainSequence(direction); started {
			s.faults.drainStarted()
		}
	}
	if !skipExit {
		s.stopListeners("non-graceful drain")
	}
	return 200, "OK\n"
}

// startDrainSequence records that a drain covering direction started; false, with the end of
// the drain time of the one that already covers it, when there is one.
func (s *Sidecar) startDrainSequence(direction drainDirection) (bool, time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for d, started := range s.drainStarted {
		if d >= direction {
			return false, started.Add(s.cfg.DrainTime)
		}
	}
	s.drainStarted[direction] = time.Now()
	return true, time.Time{}
}

// drainClose is Envoy's DrainManager::drainClose for an inbound listener: whether the
// response being written must close its connection.
func (s *Sidecar) drainClose() bool {
	s.mu.Lock()
	healthFailed := s.healthFailed
	var started time.Time
	for _, t := range s.drainStarted {
		if started.IsZero() || t.Before(started) {
			started = t
		}
	}
	s.mu.Unlock()
	if healthFailed {
		return true
	}
	if started.IsZero() {
		return false
	}
	if s.cfg.DrainStrategy == DrainImmediate {
		return true
	}
	elapsed := time.Since(started)
	if elapsed >= s.cfg.DrainTime || s.cfg.DrainTime == 0 {
		return true
	}
	return randFloat() < float64(elapsed)/float64(s.cfg.DrainTime)
}

// draining reports whether any drain sequence has started.
func (s *Sidecar) draining() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.drainStarted) > 0
}

// stopListeners closes every inbound listener: new connections are refused, connections
// already accepted go on untouched.
func (s *Sidecar) stopListeners(why string) {
	s.mu.Lock()
	if s.listenersStopped || s.exited {
		s.mu.Unlock()
		return
	}
	s.listenersStopped = true
	s.mu.Unlock()
	for _, l := range s.inbound {
		l.stopListening()
		s.server.listenerStopped.inc()
	}
	// Envoy's stopListeners only counts listener_stopped: the stopped listeners stay in
	// active_listeners_, so total_listeners_active does not change
	// (source/common/listener_manager/listener_manager_impl.cc).
	s.log.Info("inbound listeners stopped", zap.String("why", why))
}

// serverInfo is /server_info's document.
func (s *Sidecar) serverInfo() map[string]any {
	uptime := fmt.Sprintf("%ds", uptimeSeconds(time.Now(), s.start))
	strategy := "Immediate"
	if s.cfg.DrainStrategy == DrainGradual {
		strategy = "Gradual"
	}
	return map[string]any{
		"version":             "envoysim/" + s.cfg.EnvoyVersion + "/Clean/RELEASE/BoringSSL",
		"state":               s.state().String(),
		"hot_restart_version": "disabled",
		"command_line_options": map[string]any{
			"base_id":              "0",
			"concurrency":          s.cfg.Workers,
			"config_path":          "/etc/istio/proxy/envoy-rev.json",
			"drain_time":           durationJSON(s.cfg.DrainTime),
			"drain_strategy":       strategy,
			"parent_shutdown_time": "60s",
			"mode":                 "Serve",
			"restart_epoch":        0,
			"disable_hot_restart":  true,
		},
		"uptime_current_epoch": uptime,
		"uptime_all_epochs":    uptime,
		"node":                 map[string]any{"id": "sidecar~127.0.0.1~app.default~default.svc.cluster.local", "cluster": "app.default"},
	}
}

// uptimeSeconds is /server_info's uptime as Envoy computes it: the wall clock's whole
// seconds now minus those at start, both as time_t (source/server/admin/server_info_handler.cc:
// to_time_t(systemTime()) - startTimeCurrentEpoch()). It steps when the wall clock crosses a
// second boundary, not one second after the start: two readings a second apart always differ.
func uptimeSeconds(now, start time.Time) int64 { return now.Unix() - start.Unix() }

// flushedUptime is server.uptime as Envoy shows it: whole seconds since the start, as of the
// last stats flush (Envoy refreshes the gauge only there; 0 before the first flush).
func (s *Sidecar) flushedUptime() uint64 {
	flush := s.cfg.StatsFlushInterval
	flushed := time.Since(s.start) / flush * flush
	return uint64(flushed / time.Second)
}

// durationJSON writes a duration as protobuf JSON does ("45s", "0.500s").
func durationJSON(d time.Duration) string {
	if d%time.Second == 0 {
		return fmt.Sprintf("%ds", int64(d/time.Second))
	}
	for _, digits := range []int{3, 6, 9} {
		if text := strconv.FormatFloat(d.Seconds(), 'f', digits, 64); mustParse(text) == d.Seconds() {
			return text + "s"
		}
	}
	return strconv.FormatFloat(d.Seconds(), 'f', 9, 64) + "s"
}

// listenAddr opens a TCP listener, insisting on a loopback or explicit address.
func listenAddr(addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", addr, err)
	}
	return ln, nil
}

// nativeAppExitWithoutPreStop covers a native sidecar whose app exits before the proxy's
// preStop ran: the kubelet's SIGTERM then finds pilot-agent undrained, and it terminates as a
// classic sidecar does.
func (s *Sidecar) nativeAppExitWithoutPreStop() {
	select {
	case <-s.appExited:
	case <-s.closing:
		return
	}
	s.mu.Lock()
	already := s.terminating
	s.terminating = true
	s.mu.Unlock()
	if !already {
		s.runClassic()
	}
}

func mustParse(text string) float64 {
	v, _ := strconv.ParseFloat(text, 64)
	return v
}
