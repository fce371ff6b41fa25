// Package status answers the operator's two questions about a live sidecar: "what is its
// inbound side doing right now?" (meshdrain status) and "will meshdrain prestop find a
// usable signal here?" (meshdrain check, for CI and readiness smoke tests). It reads the
// same filtered admin endpoints as prestop, through the same normalisation, so what it shows
// is exactly what the drain logic would see: a check that passes here means prestop will
// not fall back to a fixed wait.
package status

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/meshdrain/meshdrain/pkg/hook/drain"
	"github.com/meshdrain/meshdrain/pkg/hook/evidence"
	"github.com/meshdrain/meshdrain/pkg/hook/regime"
	"github.com/meshdrain/meshdrain/pkg/mesh"
	"github.com/meshdrain/meshdrain/pkg/mesh/envoy"
	dto "github.com/prometheus/client_model/go"
)

// Admin is the part of Envoy's admin API that status and check read; *envoy.Client is
// one. It is an interface so the rules can be tested on scripted snapshots.
type Admin interface {
	Inbound(ctx context.Context, sel mesh.Selector) (mesh.Snapshot, error)
	ServerInfo(ctx context.Context) (envoy.ServerInfo, error)
	Stats(ctx context.Context, filter string) (map[string]*dto.MetricFamily, error)
}

// Server states as Envoy names them in /server_info, indexed by the server.state gauge.
const (
	StateLive            = "LIVE"
	StateDraining        = "DRAINING"
	StatePreInitializing = "PRE_INITIALIZING"
	StateInitializing    = "INITIALIZING"
	StateUnknown         = "unknown"
)

var gaugeStates = [...]string{StateLive, StateDraining, StatePreInitializing, StateInitializing}

// istioProbeFilter matches a stat every Istio sidecar has even with its default inclusion
// list (docs/facts.md §3: prefix cluster.xds-grpc), and no plain Envoy has: the xds-grpc
// bootstrap cluster pilot-agent serves. It tells "Istio without inbound stats" from "plain
// Envoy whose inbound names were not given" with one tiny request.
const istioProbeFilter = `^cluster\.xds-grpc;?\.upstream_cx_active$`

// Report is the inbound side of one sidecar at one moment, as status prints it.
type Report struct {
	Admin        string `json:"admin"`
	ServerState  string `json:"server_state"`
	EnvoyVersion string `json:"envoy_version,omitempty"`
	// ProxyVersion and LabelScheme are a Linkerd proxy's (proxy_build_info; how its series
	// name the target port, see linkerd.LabelScheme).
	ProxyVersion string `json:"proxy_version,omitempty"`
	LabelScheme  string `json:"label_scheme,omitempty"`
	// DrainTime and DrainStrategy are Envoy's --drain-time-s and --drain-strategy (Istio's
	// drainDuration), not pilot-agent's terminationDrainDuration, which no admin endpoint shows.
	DrainTime     string      `json:"drain_time,omitempty"`
	DrainStrategy string      `json:"drain_strategy,omitempty"`
	Mesh          mesh.Mesh   `json:"mesh"`
	Naming        mesh.Naming `json:"naming"`
	Signal        mesh.Signal `json:"signal"`
	Inbound       []Port      `json:"inbound"`
	// Listener is Istio's virtualInbound listener (every inbound connection passes it).
	Listener *mesh.Listener `json:"listener"`
	// CompletedRequestsTotal is istio_requests_total{reporter="destination"} over every series.
	CompletedRequestsTotal *float64 `json:"completed_requests_total"`
	// CompletedServerErrors is istio_requests_total{reporter="destination"} with a 5xx
	// response_code per response flag ("-": Envoy set none, the app answered the 5xx itself),
	// when the sidecar has such series: the one failure count Istio's default stats keep. It
	// cannot be tied to a port. CompletedServerErrorsTotal sums it; its rate is
	// CompletedServerErrorsRate (--watch).
	CompletedServerErrors      map[string]float64 `json:"completed_server_errors,omitempty"`
	CompletedServerErrorsTotal *float64           `json:"completed_server_errors_total,omitempty"`
	CompletedServerErrorsRate  *float64           `json:"completed_server_errors_rate,omitempty"`
	// ListenerManager is Envoy's listener_manager counts: a drained sidecar has stopped
	// listeners while its server state is still LIVE.
	ListenerManager *ListenerManager `json:"listener_manager"`
	// Drain says whether the sidecar drains (its own drain, or meshdrain's with --drain-at
	// end): its server state stays LIVE and its listeners active while it does. nil when its
	// stats cannot tell (no HTTP connection manager stats: http.<prefix>.*).
	Drain *Drain `json:"drain"`
	// DrainRegime is the drain regime from what the samples so far show, judged as prestop's
	// final event judges it (regime.Seen.Judge: a rise of the drain closes before
	// meshdrain's drain call is the sidecar draining on its own), and DrainRegimeWhy why,
	// unless it is (b). Empty for a Linkerd proxy, which gets no drain call.
	DrainRegime    regime.Regime `json:"drain_regime,omitempty"`
	DrainRegimeWhy string        `json:"drain_regime_why,omitempty"`
	// UnknownPorts are --port values the sidecar has no inbound endpoint for, when it has
	// stats for others (InboundPorts): a typo would otherwise look like a quiet port.
	UnknownPorts []int `json:"unknown_ports,omitempty"`
	// InboundPorts are the inbound ports the sidecar has any stat for; filled when a --port
	// had none, so the operator sees the right ones.
	InboundPorts []int `json:"inbound_ports,omitempty"`
	// SilentPorts are --port values a Linkerd proxy has no series for. Unlike Envoy, whose
	// stats exist from the start, a Linkerd proxy writes a label set only once traffic has
	// used it and drops it after 10 minutes idle: such a port is either quiet or wrong, and
	// the proxy cannot tell which.
	SilentPorts []int    `json:"silent_ports,omitempty"`
	Hints       []string `json:"hints"`
	// SampledAt is when the sample was taken, on the injected clock: rates divide by it.
	SampledAt time.Time `json:"sampled_at"`
	// CountedSince is when the counts start, for a sampler whose counts run from its first
	// sample (the kernel's, --mesh none); nil where they run since the sidecar started.
	CountedSince *time.Time `json:"counted_since,omitempty"`
	// Clients are the inbound listener's clients (Options.Clients), or ClientsError why they
	// could not be read.
	Clients      []Client `json:"clients,omitempty"`
	ClientsError string   `json:"clients_error,omitempty"`
	// Risk is the figure prestop --lag-dist would state (status --lag-dist); nil without.
	Risk *Risk `json:"risk,omitempty"`

	// traffic and drainSeen are what the stats say for the clients' judgement.
	traffic   drain.Traffic
	drainSeen evidence.DrainSeen
	// counts are the clients as the hook's rule counts them, nil when none were read.
	counts *drain.ClientCounts
	// regimeSeen is what DrainRegime was judged from.
	regimeSeen regime.Seen
	// generic records that --cluster/--http-prefix were given, for the hints and the check.
	generic bool
	// portsAsked are the --port values, for the check.
	portsAsked []int
	// otherPorts are inbound ports with request stats that --port did not name, looked up
	// only when the named ones have none: a wrong --port then gets the right hint.
	otherPorts []int
}

// ListenerManager is what Envoy's listener manager says about its listeners. Stopping the
// inbound listeners (the end of a graceful drain without skip_exit, or /drain_listeners
// without graceful) closes their sockets, so new connections are refused, and counts
// listener_stopped; it does not remove them from total_listeners_active
// (listener_manager_impl.cc stopListeners), nor change the server state.
type ListenerManager struct {
	Stopped *float64 `json:"listeners_stopped"`
	Active  *float64 `json:"listeners_active"`
}

// Drain is the sidecar's drain as its stats show it: a draining Envoy tells each connection
// that carries a request to close (Connection: close, GOAWAY) and counts it in
// http.<prefix>.downstream_cx_drain_close; nothing else in its admin API says it drains
// (regime.SidecarDrains is the one definition, which prestop's --drain-at end guard uses too).
// A drain that has answered no request yet does not show.
type Drain struct {
	Draining bool `json:"draining"`
	// ConnectionsToldToClose is downstream_cx_drain_close summed over the inbound ports.
	ConnectionsToldToClose float64 `json:"connections_told_to_close"`
	// Since is the sample that first showed it draining (--watch); BeforeFirstSample says
	// that was status's first sample, so the drain began before it.
	Since             *time.Time `json:"since,omitempty"`
	BeforeFirstSample bool       `json:"before_first_sample,omitempty"`
}

// InboundStopped reports whether some listener was stopped: on a sidecar only a drain does
// that, and Istio drains only inbound listeners (inboundonly).
func (l *ListenerManager) InboundStopped() bool {
	return l != nil && l.Stopped != nil && *l.Stopped > 0
}

// listenerManagerFilter selects the two listener_manager stats, which Istio's default
// inclusion list keeps (prefix listener_manager).
const listenerManagerFilter = `^listener_manager\.(listener_stopped|total_listeners_active)$`

// Port is one inbound port (Istio) or one named cluster / HTTP prefix (plain Envoy). A nil
// value is a stat the sidecar does not expose: unknown, never zero.
type Port struct {
	Port *int   `json:"port"`
	Name string `json:"name"`
	// Signal is this endpoint's own best request-level signal, or none.
	Signal            mesh.Signal `json:"signal"`
	RequestsTotal     *float64    `json:"requests_total"`
	RequestsRate      *float64    `json:"requests_rate"`
	RequestsActive    *float64    `json:"requests_active"`
	ConnectionsActive *float64    `json:"connections_active"`
	// ResponsesTotal and ProbeRequestsTotal are a Linkerd proxy's: response_total (the
	// in-flight estimate is RequestsTotal − ResponsesTotal) and the kubelet's probe route,
	// which RequestsTotal leaves out.
	ResponsesTotal     *float64 `json:"responses_total,omitempty"`
	ProbeRequestsTotal *float64 `json:"probe_requests_total,omitempty"`
	// ServerErrorsTotal counts the 5xx responses this endpoint's clients got, the app's own and
	// those the sidecar answered for an app it could not reach: Envoy's
	// http.<prefix>.downstream_rq_5xx (the inbound cluster's upstream_rq_5xx when the HTTP
	// stats are hidden), Linkerd's response_total with a 5xx status_code.
	ServerErrorsTotal *float64 `json:"server_errors_total"`
	// ServerErrorsRate is its change per second since the previous sample (--watch).
	ServerErrorsRate *float64 `json:"server_errors_rate"`
	// Failures are an Envoy sidecar's own failures to reach the app, keyed by the response flag
	// they are answered with (FlagUF, FlagUC, FlagUT, FlagUR); only the counters the sidecar
	// exposes are listed.
	Failures map[string]float64 `json:"failures,omitempty"`
	// ServerErrorsByCode splits a Linkerd proxy's ServerErrorsTotal by status code. The proxy
	// answers 502 itself for an app that refused or reset the connection and 504 for a connect
	// timeout, counted like the app's own answers: the codes are all it tells.
	ServerErrorsByCode map[string]float64 `json:"server_errors_by_code,omitempty"`
}

// key identifies the endpoint across two samples, for the rate.
func (p Port) key() string {
	if p.Port != nil {
		return fmt.Sprintf("port:%d", *p.Port)
	}
	return "name:" + p.Name
}

// requestSignal is the endpoint's best request-level signal: a counter and its gauge
// together, as the drain rule needs both.
func requestSignal(e mesh.Endpoint) mesh.Signal {
	switch {
	case e.HTTPRequestsTotal != nil && e.HTTPRequestsActive != nil:
		return mesh.SignalHTTPRequests
	case e.ClusterRequestsTotal != nil && e.ClusterRequestsActive != nil:
		return mesh.SignalClusterRequests
	}
	return mesh.SignalNone
}

// UnreachableError means nothing answered on the admin address: there is no sidecar there,
// or the address is wrong. The command layer turns it into a clear exit-1 message.
type UnreachableError struct {
	URL string
	Err error
	// Mesh is the sidecar looked for: Envoy's (the zero value, istio or envoy), Linkerd's,
	// or meshAny when detection found nothing at any candidate.
	Mesh mesh.Mesh
}

func (e *UnreachableError) Error() string {
	switch e.Mesh {
	case mesh.Linkerd:
		return fmt.Sprintf("admin port at %s not reachable: is this a pod with a Linkerd proxy? is its admin port 4191 (set --admin)? (%v)", e.URL, e.Err)
	case mesh.Auto:
		return fmt.Sprintf("no sidecar admin port reachable at %s: is this a pod with a Linkerd proxy or an Envoy sidecar (set --mesh and --admin)? (%v)", e.URL, e.Err)
	}
	return fmt.Sprintf("admin API at %s not reachable: is this a pod with an Envoy sidecar? is the admin port 15000 (set --admin)? (%v)", e.URL, e.Err)
}

func (e *UnreachableError) Unwrap() error { return e.Err }

// Gather takes one sample of the sidecar at adminURL. It asks for istio_requests_total only
// when no request-level stat exists, as prestop does: that family has one series per caller
// and would make every poll of a busy service grow.
func Gather(ctx context.Context, admin Admin, adminURL string, sel mesh.Selector, now time.Time) (Report, error) {
	r := Report{
		Admin:       adminURL,
		ServerState: StateUnknown,
		Mesh:        mesh.Envoy,
		Naming:      mesh.NamingUnknown,
		Signal:      mesh.SignalNone,
		Inbound:     []Port{},
		Hints:       []string{},
		SampledAt:   now,
		generic:     len(sel.Clusters) > 0 || len(sel.HTTPPrefixes) > 0,
		portsAsked:  sel.Ports,
	}
	info, infoErr := admin.ServerInfo(ctx)
	if infoErr != nil && envoy.IsUnreachable(infoErr) {
		return r, &UnreachableError{URL: adminURL, Err: infoErr}
	}
	snap, err := admin.Inbound(ctx, sel)
	if err != nil {
		if envoy.IsUnreachable(err) {
			return r, &UnreachableError{URL: adminURL, Err: err}
		}
		return r, fmt.Errorf("read inbound stats from %s: %w", adminURL, err)
	}
	if !r.generic && !sel.Completions && snap.Read().Signal.Rank() > mesh.SignalClusterRequests.Rank() {
		wider := sel
		wider.Completions = true
		if s, err := admin.Inbound(ctx, wider); err == nil {
			snap = s
		}
	}
	r.Naming = snap.Naming
	r.Signal = snap.Read().Signal
	r.Listener = snap.Listener
	r.traffic, r.drainSeen = drain.TrafficOf(snap, snap.Read()), evidence.DrainOf(snap)
	if r.drainSeen.Known {
		r.Drain = &Drain{Draining: r.drainSeen.Draining(), ConnectionsToldToClose: r.drainSeen.Closes}
	}
	r.CompletedRequestsTotal = snap.CompletedRequestsTotal
	for _, e := range snap.Endpoints {
		r.Inbound = append(r.Inbound, Port{
			Port:              e.Port,
			Name:              e.Name,
			Signal:            requestSignal(e),
			RequestsTotal:     e.RequestsTotal(),
			RequestsActive:    e.RequestsActive(),
			ConnectionsActive: e.ConnectionsActive(),
		})
	}

	r.serverState(info, infoErr, snap)

	r.Mesh = detectMesh(ctx, admin, snap)
	r.ListenerManager = listenerManager(ctx, admin)
	addEnvoyFailures(ctx, admin, sel, &r)
	if len(sel.Ports) > 0 && !r.generic {
		r.askedPortsUnknown(ctx, admin, snap)
	}
	r.Hints = append(r.Hints, hints(r)...)
	r.Hints = append(r.Hints, failureHints(r)...)
	return r, nil
}

// serverState is Envoy's state and drain settings from /server_info, or, when that failed,
// the state from the server.state gauge.
func (r *Report) serverState(info envoy.ServerInfo, infoErr error, snap mesh.Snapshot) {
	switch {
	case infoErr == nil && info.State != "":
		r.ServerState = info.State
		r.EnvoyVersion = info.Version
		r.DrainTime = info.CommandLineOptions.DrainTime
		r.DrainStrategy = info.CommandLineOptions.DrainStrategy
	case snap.ServerState != nil && int(*snap.ServerState) >= 0 && int(*snap.ServerState) < len(gaugeStates):
		r.ServerState = gaugeStates[int(*snap.ServerState)]
	}
	if infoErr != nil {
		r.Hints = append(r.Hints, fmt.Sprintf("/server_info failed (%v): server state read from the server.state gauge", infoErr))
	}
}

// askedPortsUnknown looks the sidecar's inbound ports up, once, when a --port shows no stats
// or the signal is coarser than requests: it names the --ports the sidecar has no inbound
// endpoint for (UnknownPorts, with the ones it has: a typo, not a missing annotation), and,
// for a coarse signal, the other ports that count requests.
func (r *Report) askedPortsUnknown(ctx context.Context, admin Admin, snap mesh.Snapshot) {
	missing := portsWithoutStats(snap)
	coarse := r.Signal.Rank() > mesh.SignalClusterRequests.Rank()
	if len(missing) == 0 && !coarse {
		return
	}
	known, withRequests := inboundPorts(ctx, admin)
	if coarse {
		r.otherPorts = withRequests
	}
	if len(known) == 0 {
		return
	}
	for _, p := range missing {
		if !slices.Contains(known, p) {
			r.UnknownPorts = append(r.UnknownPorts, p)
		}
	}
	if len(r.UnknownPorts) > 0 {
		r.InboundPorts = known
	}
}

// detectMesh tells Istio from plain Envoy. Istio naming or completions settle it; otherwise
// one probe for the xds-grpc cluster, which Istio's default inclusion list keeps.
func detectMesh(ctx context.Context, admin Admin, snap mesh.Snapshot) mesh.Mesh {
	switch snap.Naming {
	case mesh.NamingIstio, mesh.NamingIstioLegacy:
		return mesh.Istio
	case mesh.NamingEnvoy:
		return mesh.Envoy
	}
	if snap.CompletedRequestsTotal != nil {
		return mesh.Istio
	}
	families, err := admin.Stats(ctx, istioProbeFilter)
	if err != nil {
		return mesh.Envoy
	}
	for _, f := range families {
		if len(f.GetMetric()) > 0 {
			return mesh.Istio
		}
	}
	return mesh.Envoy
}

// Hint texts shared by status and check, so both give the operator the same fix.
const (
	hintPlainEnvoy = "no Istio inbound stats (inbound|PORT|| cluster, inbound_…_PORT HTTP prefix) on this Envoy: " +
		"for a plain Envoy or another mesh pass --cluster NAME and/or --http-prefix PREFIX naming the inbound cluster and " +
		"HTTP connection manager stat prefix (Consul: --cluster local_app --http-prefix public_listener); " +
		"list candidates with: curl -s localhost:15000/stats?filter=downstream_rq_total"
	hintConnectionsOnly = "only connection-level stats exist (listener 0.0.0.0_15006 downstream_cx_active): idle keep-alive " +
		"connections keep it above zero and it does not move when a new request arrives on an open connection, so " +
		"prestop can only wait for connections to close; request-level stats are better: "
	hintCompletionsOnly = "only istio_requests_total (counted when a request completes, so it lags arrivals by the request " +
		"latency) exists: prestop then extends its quiet window by --latency-allowance; request-level stats are better: "
	hintDraining = "the server is DRAINING (POST /healthcheck/fail was called, or the pod is terminating): /ready answers 503 " +
		"and new requests may already be steered away; POST /healthcheck/ok makes it LIVE again"
	hintStarting = "the server is still starting (%s): inbound stats appear once it is LIVE"
	// hintListenersStopped: a drained sidecar still says LIVE; only the listener manager shows it.
	hintListenersStopped = "%s listener(s) stopped (listener_manager.listener_stopped): the inbound listeners refuse new connections " +
		"although the server is LIVE; a drain's time ended (graceful, without skip_exit) or /drain_listeners was called without graceful. " +
		"Only a restart makes this Envoy accept again"
)

// hints explains what the operator should change for prestop to see a request-level signal.
func hints(r Report) []string {
	var out []string
	switch r.ServerState {
	case StateDraining:
		out = append(out, hintDraining)
	case StatePreInitializing, StateInitializing:
		out = append(out, fmt.Sprintf(hintStarting, r.ServerState))
	}
	if r.ListenerManager.InboundStopped() {
		out = append(out, fmt.Sprintf(hintListenersStopped, num(r.ListenerManager.Stopped)))
	}
	if r.generic {
		for _, p := range r.Inbound {
			if p.Signal == mesh.SignalNone {
				out = append(out, fmt.Sprintf("%s: no upstream_rq_total/upstream_rq_active (cluster) nor downstream_rq_total/downstream_rq_active "+
					"(HTTP prefix) stats under this name: check it against curl -s localhost:15000/stats?filter=rq_total", p.Name))
			}
		}
		return out
	}
	if len(r.UnknownPorts) > 0 {
		return append(out, fmt.Sprintf("--port %v: this sidecar has no inbound endpoint for it; its inbound ports are %v "+
			"(Istio names inbound stats by the target port the pod receives on)", r.UnknownPorts, r.InboundPorts))
	}
	if len(r.otherPorts) > 0 {
		return append(out, fmt.Sprintf("no inbound request stats for --port %v, but the sidecar has them for port(s) %v: "+
			"Istio names inbound stats by the target port the pod receives on; check --port against the container's ports",
			r.portsAsked, r.otherPorts))
	}
	switch r.Signal {
	case mesh.SignalNone:
		if r.Mesh == mesh.Istio {
			out = append(out, "this Istio sidecar exposes no inbound request stats (Istio's default stats inclusion list "+
				"leaves them out): "+envoy.MissingStatsHint)
		} else {
			out = append(out, hintPlainEnvoy)
		}
	case mesh.SignalConnections:
		out = append(out, hintConnectionsOnly+envoy.MissingStatsHint)
	case mesh.SignalCompletedRequests:
		out = append(out, hintCompletionsOnly+envoy.MissingStatsHint)
	default:
		if missing, found := portsWithoutRequests(r); len(missing) > 0 && len(found) > 0 {
			out = append(out, fmt.Sprintf("port(s) %v have no inbound request stats while %v do: Istio names inbound stats by "+
				"the target port the pod receives on; check --port against the container's ports", missing, found))
		}
	}
	return out
}

// listenerManager reads the listener manager's counts; nil when the sidecar does not answer
// them (the check then cannot tell, and says nothing).
func listenerManager(ctx context.Context, admin Admin) *ListenerManager {
	families, err := admin.Stats(ctx, listenerManagerFilter)
	if err != nil {
		return nil
	}
	var lm ListenerManager
	for name, fam := range families {
		var v float64
		for _, m := range fam.GetMetric() {
			v += m.GetCounter().GetValue() + m.GetGauge().GetValue() + m.GetUntyped().GetValue()
		}
		switch name {
		case "envoy_listener_manager_listener_stopped", "listener_manager_listener_stopped":
			lm.Stopped = &v
		case "envoy_listener_manager_total_listeners_active", "listener_manager_total_listeners_active":
			lm.Active = &v
		}
	}
	if lm.Stopped == nil && lm.Active == nil {
		return nil
	}
	return &lm
}

// inboundPorts lists every inbound port the sidecar has any stat for, and those with a
// request-level signal.
func inboundPorts(ctx context.Context, admin Admin) (known, withRequests []int) {
	snap, err := admin.Inbound(ctx, mesh.Selector{})
	if err != nil {
		return nil, nil
	}
	for _, e := range snap.Endpoints {
		if e.Port == nil || !hasAnyStat(e) {
			continue
		}
		known = append(known, *e.Port)
		if requestSignal(e) != mesh.SignalNone {
			withRequests = append(withRequests, *e.Port)
		}
	}
	sort.Ints(known)
	sort.Ints(withRequests)
	return known, withRequests
}

// portsWithoutStats are the selected ports for which the sidecar exposes nothing at all.
func portsWithoutStats(snap mesh.Snapshot) []int {
	var out []int
	for _, e := range snap.Endpoints {
		if e.Port != nil && !hasAnyStat(e) {
			out = append(out, *e.Port)
		}
	}
	return out
}

func hasAnyStat(e mesh.Endpoint) bool {
	for _, v := range []*float64{e.HTTPRequestsTotal, e.HTTPRequestsActive, e.HTTPConnectionsActive,
		e.ClusterRequestsTotal, e.ClusterRequestsActive, e.ClusterConnsActive, e.CompletedRequests} {
		if v != nil {
			return true
		}
	}
	return false
}

func portsWithoutRequests(r Report) (missing, found []string) {
	for _, p := range r.Inbound {
		label := p.Name
		if p.Port != nil {
			label = fmt.Sprint(*p.Port)
		}
		if p.Signal == mesh.SignalNone {
			missing = append(missing, label)
		} else {
			found = append(found, label)
		}
	}
	return missing, found
}

// withRates fills each endpoint's requests_rate from the previous sample: the counter's
// delta over the elapsed time. A counter that went down (a restarted Envoy) has no rate.
func withRates(prev *Report, cur Report) Report {
	if prev == nil {
		return cur
	}
	elapsed := cur.SampledAt.Sub(prev.SampledAt).Seconds()
	if elapsed <= 0 {
		return cur
	}
	before := map[string]*float64{}
	for _, p := range prev.Inbound {
		before[p.key()] = p.RequestsTotal
	}
	for i, p := range cur.Inbound {
		cur.Inbound[i].RequestsRate = counterRate(before[p.key()], p.RequestsTotal, elapsed)
	}
	return withFailureRates(prev, cur, elapsed)
}

// counterRate is a counter's change per second; nil when either reading is unknown or the
// counter went down (a restarted sidecar).
func counterRate(before, after *float64, elapsed float64) *float64 {
	if before == nil || after == nil || *after < *before {
		return nil
	}
	rate := (*after - *before) / elapsed
	return &rate
}

// IsUnreachable reports whether err means no sidecar answered at all.
func IsUnreachable(err error) bool {
	var u *UnreachableError
	return errors.As(err, &u)
}
