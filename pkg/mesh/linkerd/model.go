// Package linkerd reads a Linkerd proxy's admin port (linkerd2-proxy, :4191) the way package
// mesh/envoy reads an Envoy sidecar: it turns the proxy's Prometheus
// /metrics into one model of its inbound side, per target port, so that meshdrain's drain
// logic can wait for a Linkerd pod's clients exactly as it waits for an Istio pod's.
//
// Linkerd differs from Envoy in three ways that shape this package (FIDELITY.md has the
// sources): the proxy has no drain endpoint (it drains only on SIGTERM, in both directions at
// once), every inbound series carries a direction label and a target port instead of a
// per-port stat name, and there is no in-flight request gauge: only a request counter
// (counted as a request starts) and a response counter (counted as a response ends).
package linkerd

import "github.com/meshdrain/meshdrain/pkg/mesh"

// NamingLinkerd marks a snapshot read from a Linkerd proxy.
const NamingLinkerd = mesh.NamingLinkerd

// DefaultAdminURL is the admin address of a Linkerd proxy: the injector binds it on every
// address of the pod at port 4191 (charts/partials/templates/_proxy.tpl), so the app
// container reaches it on loopback.
const DefaultAdminURL = "http://127.0.0.1:4191"

// The proxy's own ports (linkerd/app/src/env.rs defaults, charts values): never an app's
// target port, so never watched unless named explicitly.
const (
	OutboundPort = 4140
	InboundPort  = 4143
	ControlPort  = 4190
	AdminPort    = 4191
)

// Metric family names as the proxy writes them on /metrics.
const (
	// FamilyRequests is the legacy HTTP request counter, incremented as a request starts
	// (linkerd/http/metrics/src/requests/service.rs: on dispatch for a body-less request,
	// on the first body frame otherwise).
	FamilyRequests = "request_total"
	// FamilyResponses is the legacy HTTP response counter, incremented as a response ends
	// (end of stream, trailers, body error, or the body being dropped), or when the request
	// fails without a response.
	FamilyResponses = "response_total"
	// FamilyTCPOpened, FamilyTCPClosed and FamilyTCPOpen are the transport metrics; inbound
	// connections accepted from clients carry peer="src", the proxy's own connections to the
	// app peer="dst".
	FamilyTCPOpened = "tcp_open_total"
	FamilyTCPClosed = "tcp_close_total"
	FamilyTCPOpen   = "tcp_open_connections"
	// FamilyHTTPRouteRequests and FamilyGRPCRouteRequests are the newer per-route request
	// counters of the inbound router (prometheus-client registry "inbound" → "http"/"grpc" →
	// "requests", linkerd/app/inbound/src/http/router/metrics.rs), labelled with the server's
	// parent_port. FamilyRequestsV0 is the name shown in linkerd2-proxy#4127's description
	// before the http/grpc split. All three are read only where request_total is absent.
	FamilyHTTPRouteRequests = "inbound_http_requests_total"
	FamilyGRPCRouteRequests = "inbound_grpc_requests_total"
	FamilyRequestsV0        = "inbound_requests_total"
	// FamilyBuildInfo is a constant gauge present in every proxy's output: its presence is
	// how a Linkerd proxy is told apart from anything else serving /metrics.
	FamilyBuildInfo = "proxy_build_info"
)

// Selector says which inbound target ports to watch.
type Selector struct {
	// Ports are the app's target ports. Empty means every inbound port the metrics name,
	// except the proxy's own ports and ExcludePorts.
	Ports []int
	// ExcludePorts are never watched unless listed in Ports. The client adds the port of its
	// admin URL: the proxy counts its own admin traffic, meshdrain's polls included, as
	// inbound requests (linkerd2-proxy tests/telemetry admin_request_count; linkerd2#7861).
	ExcludePorts []int
	// IncludeProbes counts the kubelet's probe route (route_name="probe") as traffic. Off by
	// default: probes keep arriving while the pod terminates, whatever the clients do.
	IncludeProbes bool
	// AdminPort is the proxy's admin port as its metrics name it (0: AdminPort, 4191). Its
	// inbound requests, of every route, are read into Snapshot.AdminRequestsTotal: every poll
	// of meshdrain's moves that counter, which is how a frozen answer is caught.
	AdminPort int
}

// LabelScheme says how the proxy's inbound series identify their target port, which decides
// whether per-port endpoints are possible at all.
type LabelScheme string

// Label schemes found across releases (FIDELITY.md §2).
const (
	// SchemeTargetPort: target_addr, target_ip and target_port (2.11 onwards).
	SchemeTargetPort LabelScheme = "target_port"
	// SchemeTargetAddr: target_addr="ip:port" only (2.9/2.10 era).
	SchemeTargetAddr LabelScheme = "target_addr"
	// SchemeParentPort: only the newer route counters, labelled parent_port.
	SchemeParentPort LabelScheme = "parent_port"
	// SchemeNone: no target at all (2019 proxies, linkerd2#2224): whole-proxy sums only.
	SchemeNone LabelScheme = "none"
	// SchemeUnknown: no inbound series seen.
	SchemeUnknown LabelScheme = "unknown"
)

// Endpoint is one inbound target port, or (Port nil) the whole proxy when the series name no
// port. A nil value is a series the proxy does not expose: unknown, never zero.
type Endpoint struct {
	Port *int
	// RequestsTotal counts requests as they start, probes excluded unless selected.
	RequestsTotal *float64
	// RequestsSource is the family RequestsTotal was read from.
	RequestsSource string
	// ResponsesTotal counts responses as they end (and failed requests), from
	// response_total; nil when RequestsTotal came from a route counter, which has no
	// response counterpart read here.
	ResponsesTotal *float64
	// ProbeRequestsTotal is what the probe route received, kept apart for display.
	ProbeRequestsTotal *float64
	// ConnectionsOpen, ConnectionsOpened and ConnectionsClosed are the client connections
	// (peer="src") of this port.
	ConnectionsOpen   *float64
	ConnectionsOpened *float64
	ConnectionsClosed *float64
	// ServerErrorsTotal counts the responses with a 5xx status_code in response_total (probes
	// excluded unless selected): the app's own, and the 502 or 504 the proxy answers for an app
	// it could not reach, which it records like any response (FIDELITY.md §3). Only status and
	// check read it. Nil when no such series: none since the proxy started, or none in the last
	// 10 minutes.
	ServerErrorsTotal *float64
	// ServerErrorsByCode splits ServerErrorsTotal by status code.
	ServerErrorsByCode map[int]float64
}

// InFlight estimates the requests in flight as requests started minus responses ended,
// clamped at zero; nil when either counter is unknown. It is exact for every request the
// proxy saw to its end. It drifts up by one for a request the client abandons before the
// response headers (neither a response nor an error is recorded), and down by one for a
// request with a body that fails before its body is read (an error is recorded, the request
// never counted): see FIDELITY.md §3. Upward drift holds the drain until its deadline, the
// safe direction; the final event's active_at_end shows it.
func (e Endpoint) InFlight() *float64 {
	if e.RequestsTotal == nil || e.ResponsesTotal == nil {
		return nil
	}
	v := *e.RequestsTotal - *e.ResponsesTotal
	if v < 0 {
		v = 0
	}
	return &v
}

// Snapshot is the inbound side of one Linkerd proxy at one moment.
type Snapshot struct {
	Scheme    LabelScheme
	Endpoints []Endpoint
	// ConnectionsOpen, ConnectionsOpened and ConnectionsClosed sum the client connections of
	// every watched port (or the whole proxy when no series names a port).
	ConnectionsOpen   *float64
	ConnectionsOpened *float64
	ConnectionsClosed *float64
	// UnattributedSeries counts inbound series left out because they name no port while
	// specific ports were selected.
	UnattributedSeries int
	// ProxyVersion is proxy_build_info's version label (git_version on older proxies).
	ProxyVersion string
	// IsLinkerd reports whether proxy_build_info was present.
	IsLinkerd bool
	// AdminRequestsTotal is request_total of the admin port (Selector.AdminPort, else 4191),
	// every route: the proxy counts the requests to its own admin server, meshdrain's polls
	// included, so a live answer shows it larger at every poll. Nil when no series names
	// the admin port (an old proxy without target labels, or a port-forwarded URL whose
	// port the metrics do not name).
	AdminRequestsTotal *float64
	// RequestsPerPort, ResponsesPerPort and RouteRequestsPerPort report whether the scrape
	// holds inbound request_total, response_total or route request series that name a port
	// (any port, the admin port included). Only then can a port without such a series be
	// read as having had none (Inbound).
	RequestsPerPort, ResponsesPerPort, RouteRequestsPerPort bool
}

// Silent reports an endpoint the proxy wrote no series for at all: no request, probe or
// connection since it started or in the last 10 minutes (the proxy drops idle label sets).
// A quiet port and a port the pod does not receive on look the same.
func (e Endpoint) Silent() bool {
	for _, v := range []*float64{e.RequestsTotal, e.ResponsesTotal, e.ProbeRequestsTotal, e.ConnectionsOpen, e.ConnectionsOpened, e.ConnectionsClosed} {
		if v != nil {
			return false
		}
	}
	return true
}
