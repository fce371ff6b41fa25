package mesh

// Signal names the stat family used as the inbound arrival signal, best first.
type Signal string

// Signals, in order of preference (docs/facts.md §3).
const (
	// SignalHTTPRequests is the inbound HTTP connection manager's downstream_rq_total and
	// downstream_rq_active: requests counted as they arrive at the sidecar.
	SignalHTTPRequests Signal = "http-requests"
	// SignalClusterRequests is the inbound cluster's upstream_rq_total and upstream_rq_active:
	// requests counted as the sidecar forwards them to the app (retries included).
	SignalClusterRequests Signal = "cluster-requests"
	// SignalTCPConnections is a TCP proxy port's tcp.<prefix>.downstream_cx_total: new
	// connections, the requests of a port Envoy does not parse. Its in-flight gauge is the
	// inbound listener's open connections when the sidecar exposes them, unknown otherwise.
	SignalTCPConnections Signal = "tcp-connections"
	// SignalCompletedRequests is istio_requests_total{reporter="destination"}: counted when a
	// request completes, so it lags arrivals by the request latency.
	SignalCompletedRequests Signal = "completed-requests"
	// SignalConnections is the virtualInbound listener's connection stats: no request level.
	SignalConnections Signal = "connections"
	// SignalKernel is the pod's own kernel, with no sidecar (--mesh none): the connections
	// accepted on the app's ports and the data received on open ones, per client, from the
	// socket table and /proc/net/snmp (mesh/kernel, docs/facts.md §7).
	SignalKernel Signal = "kernel"
	// SignalNone means the sidecar exposes nothing usable about its inbound side.
	SignalNone Signal = "none"
)

// Rank orders signals: a lower rank is a better signal.
func (s Signal) Rank() int {
	switch s {
	case SignalHTTPRequests:
		return 0
	case SignalClusterRequests, SignalKernel:
		return 1
	case SignalTCPConnections:
		return 2
	case SignalCompletedRequests:
		return 3
	case SignalConnections:
		return 4
	default:
		return 5
	}
}

// Naming is the stat naming variant the sidecar was found to use.
type Naming string

// Naming variants (docs/facts.md §3).
const (
	NamingEnvoy       Naming = "envoy"        // default tag extraction: envoy_cluster_name, ...
	NamingIstio       Naming = "istio"        // Istio >= 1.23: cluster_name, http_conn_manager_prefix, ...
	NamingIstioLegacy Naming = "istio-legacy" // Istio < 1.23: inbound HTTP prefix left in the metric name
	NamingUnknown     Naming = "unknown"      // nothing inbound seen
	// NamingLinkerd marks a snapshot read from a Linkerd proxy (mesh/linkerd maps its
	// request_total series onto the HTTP pair of each endpoint).
	NamingLinkerd Naming = "linkerd"
	// NamingKernel marks a snapshot read from the pod's own kernel (--mesh none, mesh/kernel).
	NamingKernel Naming = "kernel"
)

// Endpoint is one inbound port (Istio) or one named cluster / HTTP prefix (generic Envoy).
// A nil pointer is a stat the sidecar does not expose: unknown, never zero.
type Endpoint struct {
	// Port is the inbound target port, when the names carry one (Istio).
	Port *int `json:"port"`
	// Name is the HTTP stat prefix or cluster name the values come from.
	Name string `json:"name"`

	HTTPRequestsTotal     *float64 `json:"-"` // http.<prefix>.downstream_rq_total
	HTTPRequestsActive    *float64 `json:"-"` // http.<prefix>.downstream_rq_active
	HTTPConnectionsActive *float64 `json:"-"` // http.<prefix>.downstream_cx_active
	// HTTPDrainCloses is http.<prefix>.downstream_cx_drain_close: connections the sidecar told
	// to close (Connection: close, GOAWAY) because it drains.
	HTTPDrainCloses       *float64 `json:"-"`
	ClusterRequestsTotal  *float64 `json:"-"` // cluster.<name>.upstream_rq_total
	ClusterRequestsActive *float64 `json:"-"` // cluster.<name>.upstream_rq_active
	ClusterConnsActive    *float64 `json:"-"` // cluster.<name>.upstream_cx_active
	CompletedRequests     *float64 `json:"-"` // istio_requests_total{reporter="destination"} for this port
	// TCPConnectionsTotal is tcp.<prefix>.downstream_cx_total of a TCP proxy port (Istio's
	// prefix is the inbound cluster's name): connections, Envoy's only unit of a TCP port.
	TCPConnectionsTotal *float64 `json:"-"`
	// ClientActivityTotal is what the kernel shows of clients on one of the app's own ports
	// (--mesh none): each connection accepted from a client that counts, and each read that
	// found new data from one on an open connection (mesh/kernel says which count).
	ClientActivityTotal *float64 `json:"-"`
	// ClientRequestsActive is the port's connections whose last data came after the app's
	// last answer (tcp_info): requests in flight; nil where tcp_info cannot be read.
	ClientRequestsActive *float64 `json:"-"`

	// The sidecar's failures on this endpoint. Only status and check ask for them, with their
	// own filter (envoy.FailuresFilter): the drain's poll never carries them, so they are nil
	// there. Each upstream counter is the one Envoy counts for the response flag named
	// (envoyproxy/envoy source/common/conn_pool/conn_pool_base.cc, source/common/router/router.cc).
	HTTPServerErrorsTotal    *float64 `json:"-"` // http.<prefix>.downstream_rq_5xx: 5xx sent to clients
	ClusterServerErrorsTotal *float64 `json:"-"` // cluster.<name>.upstream_rq_5xx: 5xx from or for the app
	ConnectFailuresTotal     *float64 `json:"-"` // cluster.<name>.upstream_cx_connect_fail: UF
	// ConnectionTerminationsTotal is cluster.<name>.upstream_cx_destroy_remote_with_active_rq:
	// the app closed a connection with a request on it, UC (HTTP/1.1 upstreams).
	ConnectionTerminationsTotal *float64 `json:"-"`
	RequestTimeoutsTotal        *float64 `json:"-"` // cluster.<name>.upstream_rq_timeout: UT
	RemoteResetsTotal           *float64 `json:"-"` // cluster.<name>.upstream_rq_rx_reset: UR (HTTP/2 upstreams)
}

// Listener is the inbound listener's connection stats (Istio's virtualInbound on 15006, or a
// listener named by the user). Per-worker copies are never part of it.
type Listener struct {
	Address           string   `json:"address"`
	ConnectionsTotal  *float64 `json:"connections_total"`
	ConnectionsActive *float64 `json:"connections_active"`
}

// Snapshot is the inbound side of one sidecar at one moment.
type Snapshot struct {
	Naming    Naming
	Endpoints []Endpoint
	Listener  *Listener
	// CompletedRequestsTotal is istio_requests_total{reporter="destination"} summed over
	// every series, when the sidecar exposes it (it cannot always be tied to a port).
	CompletedRequestsTotal *float64
	// ServerState is Envoy's server.state gauge (0 LIVE, 1 DRAINING, 2 PRE_INITIALIZING,
	// 3 INITIALIZING), when present.
	ServerState *float64
	// AdminRequestsTotal is Envoy's own admin request counter (AdminRequestsStat), when the
	// sidecar exposes it (Istio's default stats do not): it moves at every poll of a live admin.
	AdminRequestsTotal *float64
	// ServerUptime is Envoy's server.uptime gauge, in seconds since Envoy started (all hot
	// restart epochs). Envoy refreshes it at each stats flush (5 s by default), so it lags.
	ServerUptime *float64
	// CompletedServerErrors is istio_requests_total{reporter="destination"} with a 5xx
	// response_code, summed per response_flags value ("-": Envoy set no flag, the app's own
	// 5xx), when the sidecar exposes it. Like the endpoints' failure counters, only status and
	// check ask for it. Istio creates a series at its first request, so no 5xx series is no 5xx
	// completed since the sidecar started (or no Istio telemetry at all): nil then.
	CompletedServerErrors map[string]float64
}
