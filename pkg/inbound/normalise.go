package inbound

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"math"
	"regexp"
	"sort"
	"strconv"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Selector says which inbound endpoints to watch. Empty fields mean "every inbound port the
// sidecar names" (Istio). Generic Envoys do not mark their inbound side in stat names, so for
// them the cluster or HTTP prefix names must be given.
type Selector struct {
	Ports        []int    // Istio target ports (inbound|PORT||, inbound_<bind>_PORT)
	Clusters     []string // generic Envoy: cluster names, e.g. Consul's local_app
	HTTPPrefixes []string // generic Envoy: HTTP stat prefixes, e.g. Consul's public_listener
	// Completions also asks for istio_requests_total{reporter="destination"}. It has one
	// series per caller, response code and flag, so a busy service's poll would grow with
	// its callers: it is only asked for when no request-level stat exists.
	Completions bool
}

// virtualInboundPort is the port of Istio's virtualInbound listener, through which every
// inbound connection of a sidecar passes.
const virtualInboundPort = "15006"

// ParseFamilies parses Envoy's /stats/prometheus output. Envoy writes the 0.0.4 text format
// with untyped-free TYPE lines and no HELP, which expfmt reads as is.
func ParseFamilies(r io.Reader) (map[string]*dto.MetricFamily, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(trimTrailingSpace(r))
	if err != nil {
		return nil, fmt.Errorf("parse prometheus stats: %w", err)
	}
	return families, nil
}

// Parse reads Envoy's Prometheus output and normalises it for sel.
func Parse(r io.Reader, sel Selector) (Snapshot, error) {
	families, err := ParseFamilies(r)
	if err != nil {
		return Snapshot{}, err
	}
	return Normalise(families, sel), nil
}

// StatsFilter returns the RE2 regex to send as /stats?filter=: it matches the Envoy (text)
// stat names of exactly the stats Normalise reads, in every naming variant, so that one poll
// of a sidecar in a large mesh stays a few kilobytes (domain.md §2: never poll unfiltered).
// Per-worker listener copies (listener.X.worker_N.*) are excluded by the anchoring.
func StatsFilter(sel Selector) string {
	port := `[0-9]+`
	if len(sel.Ports) > 0 {
		ports := make([]string, len(sel.Ports))
		for i, p := range sel.Ports {
			ports[i] = strconv.Itoa(p)
		}
		port = "(" + strings.Join(ports, "|") + ")"
	}
	const httpStats = `\.(downstream_rq_total|downstream_rq_active|downstream_cx_active)$`
	const clusterStats = `\.(upstream_rq_total|upstream_rq_active|upstream_cx_active)$`
	var alternatives []string
	if len(sel.Clusters) == 0 && len(sel.HTTPPrefixes) == 0 {
		alternatives = append(alternatives,
			`^http\.inbound_.*_`+port+`;?`+httpStats,
			`^cluster\.inbound\|`+port+`\|.*`+clusterStats,
			`^listener\.[0-9a-fA-F._:\[\]]+_`+virtualInboundPort+`\.(downstream_cx_total|downstream_cx_active)$`,
		)
		if sel.Completions {
			alternatives = append(alternatives, `istio_requests_total.*reporter\.(=\.)?destination`)
		}
	}
	for _, name := range sel.Clusters {
		alternatives = append(alternatives, `^cluster\.`+regexp.QuoteMeta(name)+`;?`+clusterStats)
	}
	for _, name := range sel.HTTPPrefixes {
		alternatives = append(alternatives, `^http\.`+regexp.QuoteMeta(name)+`;?`+httpStats)
	}
	alternatives = append(alternatives, `^server\.state$`)
	return "(" + strings.Join(alternatives, ")|(") + ")"
}

var (
	// Istio's inbound HTTP prefix carries the bind address: inbound_0.0.0.0_8080,
	// inbound_10.38.36.249_8080 (istio/istio#50894). Text names of Istio >= 1.23 end in ';'.
	istioHTTPPrefix = regexp.MustCompile(`^inbound_(.+)_([0-9]+);?$`)
	// Istio < 1.23 leaves that prefix in the metric name: envoy_http_inbound_0_0_0_0_8080_downstream_rq_total{}.
	legacyHTTPName = regexp.MustCompile(`^envoy_http_inbound_(.+)_([0-9]+)_(downstream_rq_total|downstream_rq_active|downstream_cx_active)$`)
	// inbound|8080||, and the older inbound|8080|http|svc.ns.svc.cluster.local.
	istioInboundCluster = regexp.MustCompile(`^inbound\|([0-9]+)\|`)
	// 0.0.0.0_15006, 10.1.2.3_15006, and IPv6 [::]_15006 ([__]_15006 once Envoy has
	// replaced the colons of stat names).
	virtualInboundAddress = regexp.MustCompile(`^[0-9a-fA-F._:\[\]]+_` + virtualInboundPort + `$`)
)

// Label names for the tag of each stat family: Envoy's default tags carry an "envoy_" prefix,
// Istio's own tag definitions do not.
var (
	httpPrefixLabels = []string{"envoy_http_conn_manager_prefix", "http_conn_manager_prefix"}
	clusterLabels    = []string{"envoy_cluster_name", "cluster_name"}
	listenerLabels   = []string{"envoy_listener_address", "listener_address"}
)

// Normalise builds the inbound model from parsed families. It never invents a zero: a stat
// the payload does not hold stays nil.
func Normalise(families map[string]*dto.MetricFamily, sel Selector) Snapshot {
	n := normaliser{sel: sel, byKey: map[string]*Endpoint{}, naming: NamingUnknown}
	for _, p := range sel.Ports {
		n.endpointForPort(p)
	}
	for _, name := range sel.Clusters {
		n.endpointForName(name)
	}
	for _, name := range sel.HTTPPrefixes {
		n.endpointForName(name)
	}

	names := make([]string, 0, len(families))
	for name := range families {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		n.family(name, families[name])
	}
	return n.snapshot()
}

type normaliser struct {
	sel      Selector
	byKey    map[string]*Endpoint
	order    []string
	listener *Listener
	naming   Naming
	// namingEvidence ranks how sure the naming guess is: legacy names and envoy_ labels are
	// conclusive, un-prefixed labels only say "Istio" (both Istio variants extract clusters).
	namingEvidence int
	completed      *float64
	serverState    *float64
	serverUptime   *float64
}

func (n *normaliser) family(name string, fam *dto.MetricFamily) {
	switch name {
	case "envoy_http_downstream_rq_total", "envoy_http__downstream_rq_total":
		n.httpSeries(fam, func(e *Endpoint) **float64 { return &e.HTTPRequestsTotal })
	case "envoy_http_downstream_rq_active", "envoy_http__downstream_rq_active":
		n.httpSeries(fam, func(e *Endpoint) **float64 { return &e.HTTPRequestsActive })
	case "envoy_http_downstream_cx_active", "envoy_http__downstream_cx_active":
		n.httpSeries(fam, func(e *Endpoint) **float64 { return &e.HTTPConnectionsActive })
	case "envoy_cluster_upstream_rq_total":
		n.clusterSeries(fam, func(e *Endpoint) **float64 { return &e.ClusterRequestsTotal })
	case "envoy_cluster_upstream_rq_active":
		n.clusterSeries(fam, func(e *Endpoint) **float64 { return &e.ClusterRequestsActive })
	case "envoy_cluster_upstream_cx_active":
		n.clusterSeries(fam, func(e *Endpoint) **float64 { return &e.ClusterConnsActive })
	case "envoy_listener_downstream_cx_active":
		n.listenerSeries(fam, func(l *Listener) **float64 { return &l.ConnectionsActive })
	case "envoy_listener_downstream_cx_total":
		n.listenerSeries(fam, func(l *Listener) **float64 { return &l.ConnectionsTotal })
	case "istio_requests_total":
		for _, m := range fam.GetMetric() {
			if label(m, "reporter") == "destination" {
				addTo(&n.completed, value(m))
			}
		}
	case "envoy_server_state", "server_state":
		for _, m := range fam.GetMetric() {
			v := value(m)
			n.serverState = &v
		}
	case "envoy_server_uptime", "server_uptime":
		for _, m := range fam.GetMetric() {
			v := value(m)
			n.serverUptime = &v
		}
	default:
		if match := legacyHTTPName.FindStringSubmatch(name); match != nil {
			n.legacyHTTP(fam, match)
		}
	}
}

func (n *normaliser) httpSeries(fam *dto.MetricFamily, field func(*Endpoint) **float64) {
	for _, m := range fam.GetMetric() {
		prefix, labelName := firstLabel(m, httpPrefixLabels)
		if prefix == "" {
			continue
		}
		n.noteLabel(labelName)
		if e := n.httpEndpoint(prefix); e != nil {
			addTo(field(e), value(m))
		}
	}
}

func (n *normaliser) legacyHTTP(fam *dto.MetricFamily, match []string) {
	port, err := strconv.Atoi(match[2])
	if err != nil || !n.portSelected(port) || n.genericSelection() {
		return
	}
	n.note(NamingIstioLegacy, 3)
	e := n.endpointForPort(port)
	var field **float64
	switch match[3] {
	case "downstream_rq_total":
		field = &e.HTTPRequestsTotal
	case "downstream_rq_active":
		field = &e.HTTPRequestsActive
	default:
		field = &e.HTTPConnectionsActive
	}
	for _, m := range fam.GetMetric() {
		addTo(field, value(m))
	}
}

func (n *normaliser) clusterSeries(fam *dto.MetricFamily, field func(*Endpoint) **float64) {
	for _, m := range fam.GetMetric() {
		cluster, labelName := firstLabel(m, clusterLabels)
		if cluster == "" {
			continue
		}
		n.noteLabel(labelName)
		if e := n.clusterEndpoint(cluster); e != nil {
			addTo(field(e), value(m))
		}
	}
}

func (n *normaliser) listenerSeries(fam *dto.MetricFamily, field func(*Listener) **float64) {
	if n.genericSelection() {
		return
	}
	for _, m := range fam.GetMetric() {
		address, labelName := firstLabel(m, listenerLabels)
		// Only the virtualInbound listener: admin, 15021 health and 15090 Prometheus
		// listeners and every outbound listener are someone else's traffic.
		if !virtualInboundAddress.MatchString(address) {
			continue
		}
		n.noteLabel(labelName)
		if n.listener == nil {
			n.listener = &Listener{Address: address}
		}
		addTo(field(n.listener), value(m))
	}
}

// httpEndpoint maps an HTTP stat prefix to the endpoint it belongs to, or nil when it is not
// watched (admin, outbound, a port not selected).
func (n *normaliser) httpEndpoint(prefix string) *Endpoint {
	prefix = strings.TrimSuffix(prefix, ";")
	if n.genericSelection() {
		if contains(n.sel.HTTPPrefixes, prefix) {
			return n.endpointForName(prefix)
		}
		return nil
	}
	match := istioHTTPPrefix.FindStringSubmatch(prefix)
	if match == nil {
		return nil
	}
	port, err := strconv.Atoi(match[2])
	if err != nil || !n.portSelected(port) {
		return nil
	}
	return n.endpointForPort(port)
}

func (n *normaliser) clusterEndpoint(cluster string) *Endpoint {
	cluster = strings.TrimSuffix(cluster, ";")
	if n.genericSelection() {
		if contains(n.sel.Clusters, cluster) {
			return n.endpointForName(cluster)
		}
		return nil
	}
	match := istioInboundCluster.FindStringSubmatch(cluster)
	if match == nil {
		return nil
	}
	port, err := strconv.Atoi(match[1])
	if err != nil || !n.portSelected(port) {
		return nil
	}
	return n.endpointForPort(port)
}

func (n *normaliser) genericSelection() bool {
	return len(n.sel.Clusters) > 0 || len(n.sel.HTTPPrefixes) > 0
}

func (n *normaliser) portSelected(port int) bool {
	if len(n.sel.Ports) == 0 {
		return true
	}
	for _, p := range n.sel.Ports {
		if p == port {
			return true
		}
	}
	return false
}

func (n *normaliser) endpointForPort(port int) *Endpoint {
	key := "port:" + strconv.Itoa(port)
	if e, ok := n.byKey[key]; ok {
		return e
	}
	p := port
	e := &Endpoint{Port: &p, Name: fmt.Sprintf("inbound|%d||", port)}
	n.byKey[key] = e
	n.order = append(n.order, key)
	return e
}

// endpointForName groups a generic Envoy's cluster and HTTP prefix stats. When the user
// names one cluster and one prefix, they describe the same inbound service, so they share
// one endpoint.
func (n *normaliser) endpointForName(name string) *Endpoint {
	key := "name:" + name
	if len(n.sel.Clusters) == 1 && len(n.sel.HTTPPrefixes) == 1 {
		key = "name:" + n.sel.HTTPPrefixes[0] + "+" + n.sel.Clusters[0]
		name = n.sel.HTTPPrefixes[0] + " / " + n.sel.Clusters[0]
	}
	if e, ok := n.byKey[key]; ok {
		return e
	}
	e := &Endpoint{Name: name}
	n.byKey[key] = e
	n.order = append(n.order, key)
	return e
}

func (n *normaliser) noteLabel(labelName string) {
	if strings.HasPrefix(labelName, "envoy_") {
		n.note(NamingEnvoy, 3)
	} else {
		n.note(NamingIstio, 1)
	}
}

func (n *normaliser) note(naming Naming, evidence int) {
	if evidence > n.namingEvidence {
		n.naming, n.namingEvidence = naming, evidence
	}
}

func (n *normaliser) snapshot() Snapshot {
	s := Snapshot{Naming: n.naming, Listener: n.listener, CompletedRequestsTotal: n.completed, ServerState: n.serverState, ServerUptime: n.serverUptime}
	if s.Naming == NamingUnknown && n.completed != nil {
		s.Naming = NamingIstio
	}
	for _, key := range n.order {
		s.Endpoints = append(s.Endpoints, *n.byKey[key])
	}
	sort.SliceStable(s.Endpoints, func(i, j int) bool {
		a, b := s.Endpoints[i].Port, s.Endpoints[j].Port
		if a != nil && b != nil {
			return *a < *b
		}
		return a != nil && b == nil
	})
	return s
}

func firstLabel(m *dto.Metric, names []string) (value, name string) {
	for _, l := range m.GetLabel() {
		for _, want := range names {
			if l.GetName() == want {
				return l.GetValue(), want
			}
		}
	}
	return "", ""
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.GetCounter().GetValue()
	case m.Gauge != nil:
		return m.GetGauge().GetValue()
	case m.Untyped != nil:
		return m.GetUntyped().GetValue()
	}
	return math.NaN()
}

func addTo(field **float64, v float64) {
	if math.IsNaN(v) {
		return
	}
	if *field == nil {
		*field = new(float64)
	}
	**field += v
}

func contains(list []string, s string) bool {
	for _, item := range list {
		if item == s {
			return true
		}
	}
	return false
}

// trimTrailingSpace drops spaces at line ends: Envoy has written "name value " lines
// (istio/istio pkg/envoy/agent_test.go), which expfmt would read as a missing timestamp.
func trimTrailingSpace(r io.Reader) io.Reader {
	var out bytes.Buffer
	scanner := bufio.NewScanner(r)
	scanner.Buffer(make([]byte, 64*1024), 1024*1024)
	for scanner.Scan() {
		out.Write(bytes.TrimRight(scanner.Bytes(), " \t\r"))
		out.WriteByte('\n')
	}
	if err := scanner.Err(); err != nil {
		return io.MultiReader(&out, errReader{err})
	}
	return &out
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }
