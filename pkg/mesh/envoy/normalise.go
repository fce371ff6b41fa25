package envoy

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/meshdrain/meshdrain/pkg/mesh"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// ParseFamilies parses Envoy's /stats/prometheus output. Envoy writes the 0.0.4 text format
// with untyped-free TYPE lines and no HELP, which expfmt reads as is. The read buffer and the
// parser are reused from poll to poll: a preStop polls every 200ms for up to a minute.
func ParseFamilies(r io.Reader) (map[string]*dto.MetricFamily, error) {
	p := parsers.Get().(*parser)
	defer parsers.Put(p)
	p.body.Reset()
	if _, err := p.body.ReadFrom(r); err != nil {
		return nil, fmt.Errorf("parse prometheus stats: %w", err)
	}
	p.in.Reset(trimTrailingSpace(p.body.Bytes()))
	families, err := p.text.TextToMetricFamilies(&p.in)
	if err != nil {
		return nil, fmt.Errorf("parse prometheus stats: %w", err)
	}
	return families, nil
}

// parser is what one parse needs besides the families it returns.
type parser struct {
	body bytes.Buffer
	in   bytes.Reader
	text expfmt.TextParser
}

var parsers = sync.Pool{New: func() any { return &parser{text: expfmt.NewTextParser(model.UTF8Validation)} }}

// Parse reads Envoy's Prometheus output and normalises it for sel.
func Parse(r io.Reader, sel mesh.Selector) (mesh.Snapshot, error) {
	families, err := ParseFamilies(r)
	if err != nil {
		return mesh.Snapshot{}, err
	}
	return Normalise(families, sel), nil
}

// Normalise builds the inbound model from parsed families. It never invents a zero: a stat
// the payload does not hold stays nil.
func Normalise(families map[string]*dto.MetricFamily, sel mesh.Selector) mesh.Snapshot {
	n := normaliser{sel: sel, byPort: map[int]*mesh.Endpoint{}, byName: map[string]*mesh.Endpoint{}, naming: mesh.NamingUnknown}
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
		n.adminRequests(name, families[name])
	}
	return n.snapshot()
}

type normaliser struct {
	sel    mesh.Selector
	byPort map[int]*mesh.Endpoint
	byName map[string]*mesh.Endpoint
	order  []*mesh.Endpoint
	// values holds the normalised numbers, a chunk at a time, so that a poll does not
	// allocate one float per stat.
	values   []float64
	listener *mesh.Listener
	naming   mesh.Naming
	// namingEvidence ranks how sure the naming guess is: legacy names and envoy_ labels are
	// conclusive, un-prefixed labels only say "Istio" (both Istio variants extract clusters).
	namingEvidence     int
	completed          *float64
	serverState        *float64
	serverUptime       *float64
	adminRequestsTotal *float64
	completedErrors    map[string]float64
}

// family reads one family, if Normalise reads it at all.
func (n *normaliser) family(name string, fam *dto.MetricFamily) {
	if r, ok := familyReaders[name]; ok {
		r.read(n, fam)
		return
	}
	if match := legacyHTTPName.FindStringSubmatch(name); match != nil {
		n.legacyHTTP(fam, match)
	}
}

// familyReader is how Normalise reads one family. A targeted family has a series per port,
// cluster, HTTP prefix or listener, inbound and outbound alike, and Normalise reads only the
// series of the selected targets: inboundLines may drop the others before the parse.
type familyReader struct {
	read     func(n *normaliser, fam *dto.MetricFamily)
	targeted bool
}

// familyReaders are the families Normalise reads by name (the legacy Istio names, which carry
// their port in the name, are matched by legacyHTTPName).
var familyReaders = func() map[string]familyReader {
	readers := map[string]familyReader{}
	add := func(r familyReader, names ...string) {
		for _, name := range names {
			readers[name] = r
		}
	}
	http := func(field func(*mesh.Endpoint) **float64, keep func(*dto.Metric) bool) familyReader {
		return familyReader{targeted: true, read: func(n *normaliser, fam *dto.MetricFamily) { n.httpSeriesWhere(fam, field, keep) }}
	}
	cluster := func(field func(*mesh.Endpoint) **float64, keep func(*dto.Metric) bool) familyReader {
		return familyReader{targeted: true, read: func(n *normaliser, fam *dto.MetricFamily) { n.clusterSeriesWhere(fam, field, keep) }}
	}
	listener := func(field func(*mesh.Listener) **float64) familyReader {
		return familyReader{targeted: true, read: func(n *normaliser, fam *dto.MetricFamily) { n.listenerSeries(fam, field) }}
	}
	add(http(func(e *mesh.Endpoint) **float64 { return &e.HTTPRequestsTotal }, nil), "envoy_http_downstream_rq_total", "envoy_http__downstream_rq_total")
	add(http(func(e *mesh.Endpoint) **float64 { return &e.HTTPRequestsActive }, nil), "envoy_http_downstream_rq_active", "envoy_http__downstream_rq_active")
	add(http(func(e *mesh.Endpoint) **float64 { return &e.HTTPConnectionsActive }, nil), "envoy_http_downstream_cx_active", "envoy_http__downstream_cx_active")
	add(http(func(e *mesh.Endpoint) **float64 { return &e.HTTPDrainCloses }, nil), "envoy_http_downstream_cx_drain_close", "envoy_http__downstream_cx_drain_close")
	add(cluster(func(e *mesh.Endpoint) **float64 { return &e.ClusterRequestsTotal }, nil), "envoy_cluster_upstream_rq_total")
	add(cluster(func(e *mesh.Endpoint) **float64 { return &e.ClusterRequestsActive }, nil), "envoy_cluster_upstream_rq_active")
	add(cluster(func(e *mesh.Endpoint) **float64 { return &e.ClusterConnsActive }, nil), "envoy_cluster_upstream_cx_active")
	// The failure stats, which only FailuresFilter asks for. The class-tagged families also
	// hold the other classes (and, in Istio's naming, the per-code series of the same stat):
	// only the 5xx class is read. A bootstrap without the class tag leaves _5xx in the name.
	add(http(func(e *mesh.Endpoint) **float64 { return &e.HTTPServerErrorsTotal }, serverErrorClass),
		"envoy_http_downstream_rq_xx", "envoy_http_downstream_rq", "envoy_http__downstream_rq")
	add(http(func(e *mesh.Endpoint) **float64 { return &e.HTTPServerErrorsTotal }, nil), "envoy_http_downstream_rq_5xx", "envoy_http__downstream_rq_5xx")
	add(cluster(func(e *mesh.Endpoint) **float64 { return &e.ClusterServerErrorsTotal }, serverErrorClass), "envoy_cluster_upstream_rq_xx", "envoy_cluster_upstream_rq")
	add(cluster(func(e *mesh.Endpoint) **float64 { return &e.ClusterServerErrorsTotal }, nil), "envoy_cluster_upstream_rq_5xx")
	add(cluster(func(e *mesh.Endpoint) **float64 { return &e.ConnectFailuresTotal }, nil), "envoy_cluster_upstream_cx_connect_fail")
	add(cluster(func(e *mesh.Endpoint) **float64 { return &e.ConnectionTerminationsTotal }, nil), "envoy_cluster_upstream_cx_destroy_remote_with_active_rq")
	add(cluster(func(e *mesh.Endpoint) **float64 { return &e.RequestTimeoutsTotal }, nil), "envoy_cluster_upstream_rq_timeout")
	add(cluster(func(e *mesh.Endpoint) **float64 { return &e.RemoteResetsTotal }, nil), "envoy_cluster_upstream_rq_rx_reset")
	add(listener(func(l *mesh.Listener) **float64 { return &l.ConnectionsActive }), "envoy_listener_downstream_cx_active")
	add(listener(func(l *mesh.Listener) **float64 { return &l.ConnectionsTotal }), "envoy_listener_downstream_cx_total")
	add(familyReader{targeted: true, read: (*normaliser).tcpConnections}, "envoy_tcp_downstream_cx_total")
	// Envoy releases without custom stat namespaces prefix every Prometheus name with
	// envoy_, and Istio 1.7's stats plugin named the metric _istio_requests_total.
	add(familyReader{read: (*normaliser).completions}, "istio_requests_total", "envoy_istio_requests_total", "envoy__istio_requests_total")
	add(familyReader{read: func(n *normaliser, fam *dto.MetricFamily) { setLast(&n.serverState, fam) }}, "envoy_server_state", "server_state")
	add(familyReader{read: func(n *normaliser, fam *dto.MetricFamily) { setLast(&n.serverUptime, fam) }}, "envoy_server_uptime", "server_uptime")
	return readers
}()

func (n *normaliser) tcpConnections(fam *dto.MetricFamily) {
	for _, m := range fam.GetMetric() {
		prefix, labelName := firstLabel(m, tcpPrefixLabels)
		if prefix == "" {
			continue
		}
		n.noteLabel(labelName)
		if n.genericSelection() {
			continue // a generic Envoy's TCP port is watched through its --cluster
		}
		if e := n.clusterEndpoint(prefix); e != nil {
			n.add(&e.TCPConnectionsTotal, mesh.Value(m))
		}
	}
}

func (n *normaliser) completions(fam *dto.MetricFamily) {
	for _, m := range fam.GetMetric() {
		if mesh.Label(m, "reporter") == "destination" {
			n.add(&n.completed, mesh.Value(m))
			n.completedError(m)
		}
	}
}

// setLast sets *to to the value of a family's last series, if it has one: a server stat has
// one series.
func setLast(to **float64, fam *dto.MetricFamily) {
	for _, m := range fam.GetMetric() {
		v := mesh.Value(m)
		*to = &v
	}
}

// httpSeriesWhere is httpSeries for the series keep accepts (all when nil).
func (n *normaliser) httpSeriesWhere(fam *dto.MetricFamily, field func(*mesh.Endpoint) **float64, keep func(*dto.Metric) bool) {
	n.series(fam, httpPrefixLabels, n.httpEndpoint, field, keep)
}

// series adds each series keep accepts (all when nil) to field of the endpoint its first
// label of labels names (none: skipped), as endpoint finds it.
func (n *normaliser) series(fam *dto.MetricFamily, labels []string, endpoint func(string) *mesh.Endpoint, field func(*mesh.Endpoint) **float64, keep func(*dto.Metric) bool) {
	for _, m := range fam.GetMetric() {
		if keep != nil && !keep(m) {
			continue
		}
		name, labelName := firstLabel(m, labels)
		if name == "" {
			continue
		}
		n.noteLabel(labelName)
		if e := endpoint(name); e != nil {
			n.add(field(e), mesh.Value(m))
		}
	}
}

func (n *normaliser) legacyHTTP(fam *dto.MetricFamily, match []string) {
	port, err := strconv.Atoi(match[2])
	if err != nil || !n.portSelected(port) || n.genericSelection() {
		return
	}
	n.note(mesh.NamingIstioLegacy, 3)
	e := n.endpointForPort(port)
	var field **float64
	keep := func(*dto.Metric) bool { return true }
	switch match[3] {
	case "downstream_rq_total":
		field = &e.HTTPRequestsTotal
	case "downstream_rq_active":
		field = &e.HTTPRequestsActive
	case "downstream_rq":
		field, keep = &e.HTTPServerErrorsTotal, serverErrorClass
	case "downstream_rq_5xx":
		field = &e.HTTPServerErrorsTotal
	case "downstream_cx_drain_close":
		field = &e.HTTPDrainCloses
	default:
		field = &e.HTTPConnectionsActive
	}
	for _, m := range fam.GetMetric() {
		if keep(m) {
			n.add(field, mesh.Value(m))
		}
	}
}

// serverErrorClass keeps the 5xx series of a class-tagged family: "5" in Envoy's default
// tags, "5xx" in Istio's.
func serverErrorClass(m *dto.Metric) bool {
	class, _ := firstLabel(m, responseClassLabels)
	return class == "5" || class == "5xx"
}

// completedError adds an istio_requests_total{reporter="destination"} series with a 5xx
// response_code to the 5xx completions of its response flag.
func (n *normaliser) completedError(m *dto.Metric) {
	code := mesh.Label(m, "response_code")
	if len(code) != 3 || code[0] != '5' {
		return
	}
	v := mesh.Value(m)
	if math.IsNaN(v) {
		return
	}
	flags := mesh.Label(m, "response_flags")
	if flags == "" {
		flags = "-"
	}
	if n.completedErrors == nil {
		n.completedErrors = map[string]float64{}
	}
	n.completedErrors[flags] += v
}

// clusterSeriesWhere is clusterSeries for the series keep accepts (all when nil).
func (n *normaliser) clusterSeriesWhere(fam *dto.MetricFamily, field func(*mesh.Endpoint) **float64, keep func(*dto.Metric) bool) {
	n.series(fam, clusterLabels, n.clusterEndpoint, field, keep)
}

func (n *normaliser) listenerSeries(fam *dto.MetricFamily, field func(*mesh.Listener) **float64) {
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
			n.listener = &mesh.Listener{Address: address}
		}
		n.add(field(n.listener), mesh.Value(m))
	}
}

// httpEndpoint maps an HTTP stat prefix to the endpoint it belongs to, or nil when it is not
// watched (admin, outbound, a port not selected).
func (n *normaliser) httpEndpoint(prefix string) *mesh.Endpoint {
	prefix = strings.TrimSuffix(prefix, ";")
	if n.genericSelection() {
		if slices.Contains(n.sel.HTTPPrefixes, prefix) {
			return n.endpointForName(prefix)
		}
		return nil
	}
	port, ok := istioHTTPPort(prefix)
	if !ok || !n.portSelected(port) {
		return nil
	}
	return n.endpointForPort(port)
}

func (n *normaliser) clusterEndpoint(cluster string) *mesh.Endpoint {
	cluster = strings.TrimSuffix(cluster, ";")
	if n.genericSelection() {
		if slices.Contains(n.sel.Clusters, cluster) {
			return n.endpointForName(cluster)
		}
		return nil
	}
	port, ok := istioClusterPort(cluster)
	if !ok || !n.portSelected(port) {
		return nil
	}
	return n.endpointForPort(port)
}

func (n *normaliser) genericSelection() bool { return generic(n.sel) }

// generic says that sel names a generic Envoy's clusters and HTTP prefixes, rather than
// Istio's inbound ports.
func generic(sel mesh.Selector) bool { return len(sel.Clusters) > 0 || len(sel.HTTPPrefixes) > 0 }

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

func (n *normaliser) endpointForPort(port int) *mesh.Endpoint {
	if e, ok := n.byPort[port]; ok {
		return e
	}
	p := port
	e := &mesh.Endpoint{Port: &p, Name: "inbound|" + strconv.Itoa(port) + "||"}
	n.byPort[port] = e
	n.order = append(n.order, e)
	return e
}

// endpointForName groups a generic Envoy's cluster and HTTP prefix stats. When the user
// names one cluster and one prefix, they describe the same inbound service, so they share
// one endpoint.
func (n *normaliser) endpointForName(name string) *mesh.Endpoint {
	if len(n.sel.Clusters) == 1 && len(n.sel.HTTPPrefixes) == 1 {
		name = n.sel.HTTPPrefixes[0] + " / " + n.sel.Clusters[0]
	}
	if e, ok := n.byName[name]; ok {
		return e
	}
	e := &mesh.Endpoint{Name: name}
	n.byName[name] = e
	n.order = append(n.order, e)
	return e
}

func (n *normaliser) noteLabel(labelName string) {
	if strings.HasPrefix(labelName, "envoy_") {
		n.note(mesh.NamingEnvoy, 3)
	} else {
		n.note(mesh.NamingIstio, 1)
	}
}

func (n *normaliser) note(naming mesh.Naming, evidence int) {
	if evidence > n.namingEvidence {
		n.naming, n.namingEvidence = naming, evidence
	}
}

func (n *normaliser) snapshot() mesh.Snapshot {
	s := mesh.Snapshot{Naming: n.naming, Listener: n.listener, CompletedRequestsTotal: n.completed, ServerState: n.serverState, ServerUptime: n.serverUptime,
		AdminRequestsTotal: n.adminRequestsTotal, CompletedServerErrors: n.completedErrors}
	if s.Naming == mesh.NamingUnknown && n.completed != nil {
		s.Naming = mesh.NamingIstio
	}
	s.Endpoints = make([]mesh.Endpoint, 0, len(n.order))
	for _, e := range n.order {
		s.Endpoints = append(s.Endpoints, *e)
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

// add adds v to the value field points at, creating it (from the current chunk) when absent.
func (n *normaliser) add(field **float64, v float64) {
	if math.IsNaN(v) {
		return
	}
	if *field == nil {
		if len(n.values) == cap(n.values) {
			n.values = make([]float64, 0, 32)
		}
		n.values = append(n.values, 0)
		*field = &n.values[len(n.values)-1]
	}
	**field += v
}

// trimTrailingSpace drops spaces at line ends, in place: Envoy has written "name value "
// lines (istio/istio pkg/envoy/agent_test.go), which expfmt would read as a missing timestamp.
func trimTrailingSpace(b []byte) []byte {
	out := b[:0]
	for len(b) > 0 {
		line, rest, found := bytes.Cut(b, []byte{'\n'})
		out = append(out, bytes.TrimRight(line, " \t\r")...)
		if found {
			out = append(out, '\n')
		}
		b = rest
	}
	return out
}
