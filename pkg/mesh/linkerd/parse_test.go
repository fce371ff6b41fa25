package linkerd

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/meshdrain/meshdrain/pkg/mesh"
)

func f(v float64) *float64 { return &v }

func show(p *float64) string {
	if p == nil {
		return "nil"
	}
	return strconv.FormatFloat(*p, 'g', -1, 64)
}

func eqPtr(a, b *float64) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return *a == *b
}

func load(t *testing.T, fixture string, sel Selector) Snapshot {
	t.Helper()
	file, err := os.Open(filepath.Join("testdata", fixture))
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	snap, err := Parse(file, sel)
	if err != nil {
		t.Fatalf("parse %s: %v", fixture, err)
	}
	return snap
}

func parseText(t *testing.T, text string, sel Selector) Snapshot {
	t.Helper()
	snap, err := Parse(strings.NewReader(text), sel)
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	return snap
}

// want is one endpoint's expected values; nil fields must be nil.
type want struct {
	port                           int // 0: the whole-proxy endpoint
	requests, responses, probes    *float64
	open, opened, closed, inFlight *float64
	source                         string
}

func checkEndpoints(t *testing.T, snap Snapshot, wants []want) {
	t.Helper()
	if len(snap.Endpoints) != len(wants) {
		var ports []string
		for _, e := range snap.Endpoints {
			ports = append(ports, portText(e))
		}
		t.Fatalf("endpoints %v, want %d", ports, len(wants))
	}
	for i, w := range wants {
		e := snap.Endpoints[i]
		if (w.port == 0) != (e.Port == nil) || (e.Port != nil && *e.Port != w.port) {
			t.Errorf("endpoint %d is port %s, want %d", i, portText(e), w.port)
			continue
		}
		for _, c := range []struct {
			name      string
			got, want *float64
		}{
			{"requests", e.RequestsTotal, w.requests},
			{"responses", e.ResponsesTotal, w.responses},
			{"probes", e.ProbeRequestsTotal, w.probes},
			{"connections open", e.ConnectionsOpen, w.open},
			{"connections opened", e.ConnectionsOpened, w.opened},
			{"connections closed", e.ConnectionsClosed, w.closed},
			{"in flight", e.InFlight(), w.inFlight},
		} {
			if !eqPtr(c.got, c.want) {
				t.Errorf("port %s %s = %s, want %s", portText(e), c.name, show(c.got), show(c.want))
			}
		}
		if e.RequestsSource != w.source {
			t.Errorf("port %s requests source %q, want %q", portText(e), e.RequestsSource, w.source)
		}
	}
}

func portText(e Endpoint) string {
	if e.Port == nil {
		return "all"
	}
	return strconv.Itoa(*e.Port)
}

// TestRealDumps pins the parser with output of real proxies found in public issues and
// pull requests; each fixture names its source in its header.
func TestRealDumps(t *testing.T) {
	tests := []struct {
		name    string
		fixture string
		sel     Selector
		scheme  LabelScheme
		wants   []want
		conns   *float64 // snapshot's client connections open
		unattr  int
	}{
		{
			// 2019: no target labels. The proxy's connections to MySQL (peer="dst") are
			// the same size as the clients' here and must not be added to them.
			name: "2019 transport metrics, no target port", fixture: "linkerd2-issue-2224-tcp.prom",
			scheme: SchemeNone,
			wants:  []want{{port: 0, open: f(21), opened: f(24)}},
			conns:  f(21),
		},
		{
			name: "2019 series cannot serve a selected port", fixture: "linkerd2-issue-2224-tcp.prom",
			sel:    Selector{Ports: []int{3306}},
			scheme: SchemeNone,
			wants:  []want{{port: 3306}},
			unattr: 2,
		},
		{
			name: "2020 client identities, label order peer first", fixture: "linkerd2-proxy-pr-687-tcp.prom",
			scheme: SchemeNone,
			wants:  []want{{port: 0, opened: f(45)}},
		},
		{
			// The admin port's 1391 scrapes are the proxy's own traffic.
			name: "2.11 responses per target port, admin port left out", fixture: "linkerd2-issue-7861-response.prom",
			scheme: SchemeTargetPort,
			wants:  []want{{port: 8086, responses: f(7)}, {port: 9990, responses: f(6861)}},
		},
		{
			name: "2.11 selected port", fixture: "linkerd2-issue-7861-response.prom",
			sel:    Selector{Ports: []int{9990}},
			scheme: SchemeTargetPort,
			wants:  []want{{port: 9990, responses: f(6861)}},
		},
		{
			name: "current label set from the proxy's own test", fixture: "linkerd2-proxy-labels-test.prom",
			scheme: SchemeTargetPort,
			wants:  []want{{port: 40000, open: f(3), opened: f(7)}},
			conns:  f(3),
		},
		{
			name: "newer route counter without request_total", fixture: "linkerd2-proxy-pr-4127-inbound-requests.prom",
			scheme: SchemeParentPort,
			wants:  []want{{port: 8080, requests: f(148), source: FamilyRequestsV0}},
		},
		{
			name: "outbound route metrics only", fixture: "linkerd-website-pr-2069-outbound.prom",
			scheme: SchemeUnknown,
		},
		{
			name: "2026 labels: outbound and admin only", fixture: "linkerd-runbook-2026-response.prom",
			scheme: SchemeTargetPort,
		},
		{
			name: "2026 labels: admin port named explicitly", fixture: "linkerd-runbook-2026-response.prom",
			sel:    Selector{Ports: []int{4191}},
			scheme: SchemeTargetPort,
			wants:  []want{{port: 4191, responses: f(1)}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			snap := load(t, tc.fixture, tc.sel)
			if snap.Scheme != tc.scheme {
				t.Errorf("scheme %q, want %q", snap.Scheme, tc.scheme)
			}
			checkEndpoints(t, snap, tc.wants)
			if !eqPtr(snap.ConnectionsOpen, tc.conns) {
				t.Errorf("connections open %s, want %s", show(snap.ConnectionsOpen), show(tc.conns))
			}
			if snap.UnattributedSeries != tc.unattr {
				t.Errorf("unattributed %d, want %d", snap.UnattributedSeries, tc.unattr)
			}
		})
	}
}

// modern is a current proxy's output shape (labels as in the 2026 dump and labels.rs) for
// an app on 8080 with a kubelet probe route, the admin port, an outbound call and the
// proxy's connections to the app.
const modern = `# HELP request_total Total count of HTTP requests.
# TYPE request_total counter
request_total{direction="inbound",target_addr="10.1.2.3:8080",target_ip="10.1.2.3",target_port="8080",tls="true",client_id="web.default.serviceaccount.identity.linkerd.cluster.local",srv_group="",srv_kind="default",srv_name="all-unauthenticated",srv_port="8080",route_group="",route_kind="default",route_name="default",authz_group="",authz_kind="default",authz_name="all-unauthenticated"} 100
request_total{direction="inbound",authority="app.default.svc.cluster.local:8080",target_addr="10.1.2.3:8080",target_ip="10.1.2.3",target_port="8080",tls="true",client_id="api.default.serviceaccount.identity.linkerd.cluster.local",srv_group="",srv_kind="default",srv_name="all-unauthenticated",srv_port="8080",route_group="",route_kind="default",route_name="default",authz_group="",authz_kind="default",authz_name="all-unauthenticated"} 20
request_total{direction="inbound",target_addr="10.1.2.3:8080",target_ip="10.1.2.3",target_port="8080",tls="no_identity",no_tls_reason="no_tls_from_remote",srv_group="",srv_kind="default",srv_name="all-unauthenticated",srv_port="8080",route_group="",route_kind="default",route_name="probe",authz_group="",authz_kind="default",authz_name="probe"} 30
request_total{direction="inbound",target_addr="0.0.0.0:4191",target_ip="0.0.0.0",target_port="4191",tls="no_identity",no_tls_reason="no_tls_from_remote",srv_group="",srv_kind="default",srv_name="all-unauthenticated",srv_port="4191",route_group="",route_kind="default",route_name="default",authz_group="",authz_kind="default",authz_name="all-unauthenticated"} 500
request_total{direction="outbound",authority="db.default.svc.cluster.local:5432",target_addr="10.1.9.9:5432",target_ip="10.1.9.9",target_port="5432",tls="true",server_id="db.default.serviceaccount.identity.linkerd.cluster.local"} 9000
# HELP response_total Total count of HTTP responses.
# TYPE response_total counter
response_total{direction="inbound",target_addr="10.1.2.3:8080",target_ip="10.1.2.3",target_port="8080",tls="true",client_id="web.default.serviceaccount.identity.linkerd.cluster.local",srv_group="",srv_kind="default",srv_name="all-unauthenticated",srv_port="8080",route_group="",route_kind="default",route_name="default",authz_group="",authz_kind="default",authz_name="all-unauthenticated",status_code="200",classification="success",grpc_status="",error=""} 96
response_total{direction="inbound",authority="app.default.svc.cluster.local:8080",target_addr="10.1.2.3:8080",target_ip="10.1.2.3",target_port="8080",tls="true",client_id="api.default.serviceaccount.identity.linkerd.cluster.local",srv_group="",srv_kind="default",srv_name="all-unauthenticated",srv_port="8080",route_group="",route_kind="default",route_name="default",authz_group="",authz_kind="default",authz_name="all-unauthenticated",status_code="503",classification="failure",grpc_status="",error=""} 21
response_total{direction="inbound",target_addr="10.1.2.3:8080",target_ip="10.1.2.3",target_port="8080",tls="no_identity",no_tls_reason="no_tls_from_remote",srv_group="",srv_kind="default",srv_name="all-unauthenticated",srv_port="8080",route_group="",route_kind="default",route_name="probe",authz_group="",authz_kind="default",authz_name="probe",status_code="200",classification="success",grpc_status="",error=""} 29
# HELP tcp_open_total Total count of opened connections
# TYPE tcp_open_total counter
tcp_open_total{direction="inbound",peer="src",target_addr="10.1.2.3:8080",target_ip="10.1.2.3",target_port="8080",tls="true",client_id="web.default.serviceaccount.identity.linkerd.cluster.local",srv_group="",srv_kind="default",srv_name="all-unauthenticated",srv_port="8080"} 12
tcp_open_total{direction="inbound",peer="src",target_addr="0.0.0.0:4191",target_ip="0.0.0.0",target_port="4191",tls="no_identity",no_tls_reason="no_tls_from_remote",srv_group="",srv_kind="default",srv_name="all-unauthenticated",srv_port="4191"} 40
tcp_open_total{direction="inbound",peer="dst",tls="no_identity",no_tls_reason="loopback"} 6
tcp_open_total{direction="outbound",peer="src",target_addr="10.1.9.9:5432",target_ip="10.1.9.9",target_port="5432",tls="no_identity",no_tls_reason="loopback"} 3
# HELP tcp_open_connections Number of currently-open connections
# TYPE tcp_open_connections gauge
tcp_open_connections{direction="inbound",peer="src",target_addr="10.1.2.3:8080",target_ip="10.1.2.3",target_port="8080",tls="true",client_id="web.default.serviceaccount.identity.linkerd.cluster.local",srv_group="",srv_kind="default",srv_name="all-unauthenticated",srv_port="8080"} 4
tcp_open_connections{direction="inbound",peer="src",target_addr="0.0.0.0:4191",target_ip="0.0.0.0",target_port="4191",tls="no_identity",no_tls_reason="no_tls_from_remote",srv_group="",srv_kind="default",srv_name="all-unauthenticated",srv_port="4191"} 1
tcp_open_connections{direction="inbound",peer="dst",tls="no_identity",no_tls_reason="loopback"} 6
tcp_open_connections{direction="outbound",peer="src",target_addr="10.1.9.9:5432",target_ip="10.1.9.9",target_port="5432",tls="no_identity",no_tls_reason="loopback"} 3
# HELP tcp_close_total Total count of closed connections
# TYPE tcp_close_total counter
tcp_close_total{direction="inbound",peer="src",target_addr="10.1.2.3:8080",target_ip="10.1.2.3",target_port="8080",tls="true",client_id="web.default.serviceaccount.identity.linkerd.cluster.local",srv_group="",srv_kind="default",srv_name="all-unauthenticated",srv_port="8080",errno=""} 8
# HELP proxy_build_info Proxy build info.
# TYPE proxy_build_info gauge
proxy_build_info{date="2026-05-01T00:00:00Z",git_sha="0000000",profile="release",vendor="linkerd",version="v2.340.0"} 1
# HELP inbound_http_requests The total number of requests dispatched.
# TYPE inbound_http_requests counter
inbound_http_requests_total{parent_group="",parent_kind="default",parent_name="all-unauthenticated",parent_port="8080",route_group="",route_kind="default",route_name="default"} 119
# EOF
`

func TestNormaliseTable(t *testing.T) {
	tests := []struct {
		name   string
		text   string
		sel    Selector
		wants  []want
		conns  *float64
		scheme LabelScheme
	}{
		{
			// 120 requests, 117 responses: 3 in flight. Probes (30), the admin port (500),
			// outbound calls (9000) and the proxy's connections to the app never count; the
			// route counter is not read because request_total covers the port.
			name: "current proxy, every port", text: modern,
			wants: []want{{port: 8080, requests: f(120), responses: f(117), probes: f(30),
				open: f(4), opened: f(12), closed: f(8), inFlight: f(3), source: FamilyRequests}},
			conns: f(4), scheme: SchemeTargetPort,
		},
		{
			name: "probes asked for", text: modern, sel: Selector{IncludeProbes: true},
			wants: []want{{port: 8080, requests: f(150), responses: f(146),
				open: f(4), opened: f(12), closed: f(8), inFlight: f(4), source: FamilyRequests}},
			conns: f(4), scheme: SchemeTargetPort,
		},
		{
			name: "selected port without traffic is unknown, never zero", text: modern, sel: Selector{Ports: []int{9090}},
			wants: []want{{port: 9090}}, scheme: SchemeTargetPort,
		},
		{
			name: "excluded port", text: modern, sel: Selector{ExcludePorts: []int{8080}},
			scheme: SchemeTargetPort,
		},
		{
			name: "target_addr only (2.10), IPv6 and IPv4",
			text: `request_total{direction="inbound",target_addr="[fd00::1]:8080",tls="disabled"} 5
request_total{direction="inbound",target_addr="10.0.0.1:9000",tls="disabled"} 2
response_total{direction="inbound",target_addr="[fd00::1]:8080",tls="disabled",status_code="200",classification="success"} 5
`,
			wants: []want{{port: 8080, requests: f(5), responses: f(5), inFlight: f(0), source: FamilyRequests},
				{port: 9000, requests: f(2), source: FamilyRequests}},
			scheme: SchemeTargetAddr,
		},
		{
			// A request with a body that fails before its body is read is counted as a
			// response only: the difference would go negative, which is clamped.
			name: "more responses than requests is clamped",
			text: `request_total{direction="inbound",target_port="8080"} 10
response_total{direction="inbound",target_port="8080",classification="failure"} 12
`,
			wants:  []want{{port: 8080, requests: f(10), responses: f(12), inFlight: f(0), source: FamilyRequests}},
			scheme: SchemeTargetPort,
		},
		{
			name: "unparsable ports are no port",
			text: `request_total{direction="inbound",target_port="eighty"} 10
request_total{direction="inbound",target_addr="nonsense"} 3
`,
			wants:  []want{{port: 0, requests: f(13), source: FamilyRequests}},
			scheme: SchemeNone,
		},
		{
			name: "grpc route counter and probe route",
			text: `inbound_grpc_requests_total{parent_group="",parent_kind="default",parent_name="all-unauthenticated",parent_port="9090",route_group="",route_kind="default",route_name="default"} 7
inbound_http_requests_total{parent_group="",parent_kind="default",parent_name="all-unauthenticated",parent_port="9090",route_group="",route_kind="default",route_name="probe"} 3
`,
			wants:  []want{{port: 9090, requests: f(7), probes: f(3), source: FamilyGRPCRouteRequests}},
			scheme: SchemeParentPort,
		},
		{
			name: "empty output", text: "", scheme: SchemeUnknown,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			snap := parseText(t, tc.text, tc.sel)
			if snap.Scheme != tc.scheme {
				t.Errorf("scheme %q, want %q", snap.Scheme, tc.scheme)
			}
			checkEndpoints(t, snap, tc.wants)
			if !eqPtr(snap.ConnectionsOpen, tc.conns) {
				t.Errorf("connections open %s, want %s", show(snap.ConnectionsOpen), show(tc.conns))
			}
		})
	}
}

func TestBuildInfo(t *testing.T) {
	snap := parseText(t, modern, Selector{})
	if !snap.IsLinkerd || snap.ProxyVersion != "v2.340.0" {
		t.Errorf("IsLinkerd %v version %q", snap.IsLinkerd, snap.ProxyVersion)
	}
	// Older proxies wrote git_version and a trailing comma in the label set.
	snap = parseText(t, "proxy_build_info{git_branch=\"main\",git_version=\"v2.87.0\",rust_version=\"1.40\",} 1\n", Selector{})
	if !snap.IsLinkerd || snap.ProxyVersion != "v2.87.0" {
		t.Errorf("old build info: IsLinkerd %v version %q", snap.IsLinkerd, snap.ProxyVersion)
	}
	if snap = parseText(t, modern[:strings.Index(modern, "# HELP proxy_build_info")], Selector{}); snap.IsLinkerd {
		t.Error("IsLinkerd without proxy_build_info")
	}
}

func TestParseErrors(t *testing.T) {
	for _, text := range []string{
		"request_total{direction=\"inbound\" 1\n",
		"# TYPE request_total counter\n# TYPE request_total gauge\n",
	} {
		if _, err := Parse(strings.NewReader(text), Selector{}); err == nil {
			t.Errorf("no error for %q", text)
		}
	}
}

func TestInboundMapping(t *testing.T) {
	snap := parseText(t, modern, Selector{})
	in := snap.Inbound()
	if in.Naming != NamingLinkerd || len(in.Endpoints) != 1 {
		t.Fatalf("naming %q, endpoints %d", in.Naming, len(in.Endpoints))
	}
	e := in.Endpoints[0]
	if e.Port == nil || *e.Port != 8080 || e.Name != "target_port=8080" {
		t.Errorf("endpoint %+v", e)
	}
	r := in.Read()
	if r.Signal != mesh.SignalHTTPRequests || !eqPtr(r.Arrivals, f(120)) || !eqPtr(r.Active, f(3)) || !eqPtr(r.Connections, f(4)) {
		t.Errorf("reading %s arrivals %s active %s connections %s", r.Signal, show(r.Arrivals), show(r.Active), show(r.Connections))
	}
	if !eqPtr(in.CompletedRequestsTotal, f(117)) {
		t.Errorf("completed %s", show(in.CompletedRequestsTotal))
	}

	// Responses only (the 2.11 fixture is grepped): no request-level pair, so the next-best
	// signal is the completion counter.
	in = load(t, "linkerd2-issue-7861-response.prom", Selector{}).Inbound()
	if r := in.Read(); r.Signal != mesh.SignalCompletedRequests || !eqPtr(r.Arrivals, f(6868)) {
		t.Errorf("responses only: %s %s", r.Signal, show(r.Arrivals))
	}

	// Transport only, no port: connections are the only signal.
	in = load(t, "linkerd2-issue-2224-tcp.prom", Selector{}).Inbound()
	if r := in.Read(); r.Signal != mesh.SignalConnections || !eqPtr(r.Active, f(21)) || !eqPtr(r.Arrivals, f(24)) {
		t.Errorf("transport only: %s arrivals %s active %s", r.Signal, show(r.Arrivals), show(r.Active))
	}

	// Nothing inbound at all: unknown naming, no signal.
	in = load(t, "linkerd-website-pr-2069-outbound.prom", Selector{}).Inbound()
	if in.Naming != mesh.NamingUnknown || in.Read().Signal != mesh.SignalNone {
		t.Errorf("outbound only: naming %q signal %s", in.Naming, in.Read().Signal)
	}
}

func TestSelectorFor(t *testing.T) {
	sel, err := SelectorFor(mesh.Selector{Ports: []int{8080}}, 4191)
	if err != nil || len(sel.Ports) != 1 || sel.Ports[0] != 8080 || len(sel.ExcludePorts) != 1 {
		t.Errorf("selector %+v, %v", sel, err)
	}
	if _, err := SelectorFor(mesh.Selector{Clusters: []string{"local_app"}}, 4191); err == nil {
		t.Error("clusters accepted for a Linkerd proxy")
	}
}
