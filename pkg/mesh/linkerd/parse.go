package linkerd

import (
	"fmt"
	"io"
	"math"
	"net"
	"sort"
	"strconv"

	"github.com/meshdrain/meshdrain/pkg/mesh"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// ParseFamilies parses a proxy's /metrics. The proxy writes the 0.0.4 text format for its
// legacy metrics followed by a prometheus-client registry (OpenMetrics-style "# UNIT" and
// "# EOF" lines, counters typed under their name without _total); expfmt reads the comments
// as comments and the _total samples as untyped, which Normalise accepts.
func ParseFamilies(r io.Reader) (map[string]*dto.MetricFamily, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("parse linkerd proxy metrics: %w", err)
	}
	return families, nil
}

// Parse reads a proxy's /metrics and normalises it for sel.
func Parse(r io.Reader, sel Selector) (Snapshot, error) {
	families, err := ParseFamilies(r)
	if err != nil {
		return Snapshot{}, err
	}
	return Normalise(families, sel), nil
}

// Normalise builds the inbound model from parsed families. It never invents a zero: a
// counter no series carries stays nil. Outbound series, the proxy's connections to the app
// (peer="dst"), the proxy's own ports and, unless asked for, the kubelet's probe route never
// count.
func Normalise(families map[string]*dto.MetricFamily, sel Selector) Snapshot {
	if sel.AdminPort == 0 {
		sel.AdminPort = AdminPort
	}
	n := &normaliser{sel: sel, byPort: map[int]*Endpoint{}, scheme: SchemeUnknown}
	for _, p := range sel.Ports {
		n.endpoint(p)
	}
	for _, m := range families[FamilyBuildInfo].GetMetric() {
		n.snap.IsLinkerd = true
		n.snap.ProxyVersion = firstNonEmpty(mesh.Label(m, "version"), mesh.Label(m, "git_version"))
	}
	n.requests(families[FamilyRequests], func(e *Endpoint) **float64 { return &e.RequestsTotal }, true)
	n.requests(families[FamilyResponses], func(e *Endpoint) **float64 { return &e.ResponsesTotal }, false)
	n.serverErrors(families[FamilyResponses])
	n.transport(families[FamilyTCPOpen], func(e *Endpoint) **float64 { return &e.ConnectionsOpen })
	n.transport(families[FamilyTCPOpened], func(e *Endpoint) **float64 { return &e.ConnectionsOpened })
	n.transport(families[FamilyTCPClosed], func(e *Endpoint) **float64 { return &e.ConnectionsClosed })
	n.routeCounters(families)
	return n.snapshot()
}

type normaliser struct {
	sel Selector
	// admin and defaultAdmin collect the admin port's request counter, at Selector.AdminPort
	// and at the proxy's default 4191 (a port-forwarded URL's port is not the proxy's).
	admin, defaultAdmin *float64
	byPort              map[int]*Endpoint
	unport              *Endpoint
	scheme              LabelScheme
	snap                Snapshot
	counted             map[*Endpoint]bool // endpoints whose requests came from request_total
}

// requests adds request_total or response_total series.
func (n *normaliser) requests(fam *dto.MetricFamily, field func(*Endpoint) **float64, isRequests bool) {
	for _, m := range fam.GetMetric() {
		if mesh.Label(m, "direction") != "inbound" {
			continue
		}
		if port, scheme := portOf(m); scheme != SchemeNone {
			if isRequests {
				n.snap.RequestsPerPort = true
				n.adminRequests(port, mesh.Value(m))
			} else {
				n.snap.ResponsesPerPort = true
			}
		}
		e, ok := n.target(m)
		if !ok {
			continue
		}
		v := mesh.Value(m)
		if mesh.Label(m, "route_name") == "probe" && !n.sel.IncludeProbes {
			if isRequests {
				mesh.AddTo(&e.ProbeRequestsTotal, v)
			}
			continue
		}
		mesh.AddTo(field(e), v)
		if isRequests {
			e.RequestsSource = FamilyRequests
			if n.counted == nil {
				n.counted = map[*Endpoint]bool{}
			}
			n.counted[e] = true
		}
	}
}

// serverErrors adds the response_total series with a 5xx status_code to their endpoint's
// ServerErrorsTotal and ServerErrorsByCode. The classification label would also count gRPC
// failures and streams that ended in an error (linkerd2-proxy linkerd/app/core/src/classify.rs):
// only an HTTP 5xx is what a client was answered with.
func (n *normaliser) serverErrors(fam *dto.MetricFamily) {
	for _, m := range fam.GetMetric() {
		if mesh.Label(m, "direction") != "inbound" {
			continue
		}
		code, err := strconv.Atoi(mesh.Label(m, "status_code"))
		if err != nil || code < 500 || code > 599 {
			continue
		}
		if mesh.Label(m, "route_name") == "probe" && !n.sel.IncludeProbes {
			continue
		}
		// As target, without counting a portless series as unattributed twice: requests did.
		var e *Endpoint
		port, scheme := portOf(m)
		switch {
		case scheme == SchemeNone && len(n.sel.Ports) == 0:
			if n.unport == nil {
				n.unport = &Endpoint{}
			}
			e = n.unport
		case scheme != SchemeNone && n.selected(port):
			e = n.endpoint(port)
		default:
			continue
		}
		v := mesh.Value(m)
		if math.IsNaN(v) {
			continue
		}
		mesh.AddTo(&e.ServerErrorsTotal, v)
		if e.ServerErrorsByCode == nil {
			e.ServerErrorsByCode = map[int]float64{}
		}
		e.ServerErrorsByCode[code] += v
	}
}

// transport adds the client side (peer="src") of an inbound transport family. Series
// without a peer label are left out: they cannot be told from the proxy's own connections
// to the app, which stay open in a pool whatever the clients do.
func (n *normaliser) transport(fam *dto.MetricFamily, field func(*Endpoint) **float64) {
	for _, m := range fam.GetMetric() {
		if mesh.Label(m, "direction") != "inbound" || mesh.Label(m, "peer") != "src" {
			continue
		}
		if e, ok := n.target(m); ok {
			mesh.AddTo(field(e), mesh.Value(m))
		}
	}
}

// adminRequests adds an inbound request series of the admin port to the admin counter.
func (n *normaliser) adminRequests(port int, v float64) {
	switch {
	case port == n.sel.AdminPort:
		mesh.AddTo(&n.admin, v)
	case port == AdminPort:
		mesh.AddTo(&n.defaultAdmin, v)
	}
}

// routeCounters reads the newer per-route request counters for ports request_total says
// nothing about. They have no response counterpart here, so those ports' in-flight count
// stays unknown.
func (n *normaliser) routeCounters(families map[string]*dto.MetricFamily) {
	for _, name := range []string{FamilyHTTPRouteRequests, FamilyGRPCRouteRequests, FamilyRequestsV0} {
		for _, m := range families[name].GetMetric() {
			port, ok := atoiPort(mesh.Label(m, "parent_port"))
			if !ok {
				continue
			}
			n.note(SchemeParentPort)
			n.snap.RouteRequestsPerPort = true
			if !n.selected(port) {
				continue
			}
			e := n.endpoint(port)
			if n.counted[e] {
				continue
			}
			v := mesh.Value(m)
			if mesh.Label(m, "route_name") == "probe" && !n.sel.IncludeProbes {
				mesh.AddTo(&e.ProbeRequestsTotal, v)
				continue
			}
			mesh.AddTo(&e.RequestsTotal, v)
			e.RequestsSource = name
		}
	}
}

// target finds the endpoint an inbound series belongs to, or reports that it is not
// watched. Series that name no port go to the whole-proxy endpoint when no port was
// selected, and are counted as unattributed otherwise.
func (n *normaliser) target(m *dto.Metric) (*Endpoint, bool) {
	port, scheme := portOf(m)
	n.note(scheme)
	if scheme == SchemeNone {
		if len(n.sel.Ports) > 0 {
			n.snap.UnattributedSeries++
			return nil, false
		}
		if n.unport == nil {
			n.unport = &Endpoint{}
		}
		return n.unport, true
	}
	if !n.selected(port) {
		return nil, false
	}
	return n.endpoint(port), true
}

// portOf reads a series' target port: target_port (2.11+), else the port of target_addr.
func portOf(m *dto.Metric) (int, LabelScheme) {
	if p, ok := atoiPort(mesh.Label(m, "target_port")); ok {
		return p, SchemeTargetPort
	}
	if addr := mesh.Label(m, "target_addr"); addr != "" {
		if _, portText, err := net.SplitHostPort(addr); err == nil {
			if p, ok := atoiPort(portText); ok {
				return p, SchemeTargetAddr
			}
		}
	}
	return 0, SchemeNone
}

// note keeps the most precise label scheme seen.
func (n *normaliser) note(s LabelScheme) {
	rank := map[LabelScheme]int{SchemeUnknown: 0, SchemeNone: 1, SchemeParentPort: 2, SchemeTargetAddr: 3, SchemeTargetPort: 4}
	if rank[s] > rank[n.scheme] {
		n.scheme = s
	}
}

func (n *normaliser) selected(port int) bool {
	if len(n.sel.Ports) > 0 {
		for _, p := range n.sel.Ports {
			if p == port {
				return true
			}
		}
		return false
	}
	switch port {
	case OutboundPort, InboundPort, ControlPort, AdminPort:
		return false
	}
	for _, p := range n.sel.ExcludePorts {
		if p == port {
			return false
		}
	}
	return true
}

func (n *normaliser) endpoint(port int) *Endpoint {
	if e, ok := n.byPort[port]; ok {
		return e
	}
	p := port
	e := &Endpoint{Port: &p}
	n.byPort[port] = e
	return e
}

func (n *normaliser) snapshot() Snapshot {
	s := n.snap
	s.Scheme = n.scheme
	s.AdminRequestsTotal = n.admin
	if s.AdminRequestsTotal == nil {
		s.AdminRequestsTotal = n.defaultAdmin
	}
	for _, e := range n.byPort {
		s.Endpoints = append(s.Endpoints, *e)
	}
	sort.Slice(s.Endpoints, func(i, j int) bool { return *s.Endpoints[i].Port < *s.Endpoints[j].Port })
	if n.unport != nil {
		s.Endpoints = append(s.Endpoints, *n.unport)
	}
	for _, e := range s.Endpoints {
		mesh.AddPtr(&s.ConnectionsOpen, e.ConnectionsOpen)
		mesh.AddPtr(&s.ConnectionsOpened, e.ConnectionsOpened)
		mesh.AddPtr(&s.ConnectionsClosed, e.ConnectionsClosed)
	}
	return s
}

func atoiPort(text string) (int, bool) {
	p, err := strconv.Atoi(text)
	if err != nil || p <= 0 || p > 65535 {
		return 0, false
	}
	return p, true
}

func firstNonEmpty(values ...string) string {
	for _, v := range values {
		if v != "" {
			return v
		}
	}
	return ""
}
