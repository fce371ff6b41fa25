package linkerd

import (
	"fmt"
	"strconv"

	"github.com/meshdrain/meshdrain/pkg/mesh"
)

// SelectorFor turns the drain logic's selector into a Linkerd one. Linkerd names no clusters
// or HTTP prefixes, so a selector with them is a configuration mistake, reported at once.
// adminPort is never watched: the proxy counts its own admin traffic, meshdrain's polls
// included, so a selector that names it is refused (CheckPorts).
func SelectorFor(sel mesh.Selector, adminPort int) (Selector, error) {
	if len(sel.Clusters) > 0 || len(sel.HTTPPrefixes) > 0 {
		return Selector{}, fmt.Errorf("a Linkerd proxy has no Envoy clusters or HTTP stat prefixes; select its inbound target ports instead (--port)")
	}
	if err := CheckPorts(sel.Ports, adminPort); err != nil {
		return Selector{}, err
	}
	out := Selector{Ports: append([]int(nil), sel.Ports...), AdminPort: adminPort}
	if adminPort > 0 {
		out.ExcludePorts = []int{adminPort}
	}
	return out, nil
}

// CheckPorts refuses the admin port (adminPort, or 4191 when 0) as a port to watch: every
// admin request moves its counters, the drain's own polls and the kubelet's probes included,
// so it would never look quiet, and it is not where clients send.
func CheckPorts(ports []int, adminPort int) error {
	for _, p := range ports {
		if p == AdminPort || (adminPort > 0 && p == adminPort) {
			return fmt.Errorf("port %d is the Linkerd proxy's admin port: meshdrain's own polls and the kubelet's probes arrive there; name the app's target ports", p)
		}
	}
	return nil
}

// Inbound maps the snapshot onto the model the drain logic reads (package mesh), with no
// new type: each target port becomes an Endpoint whose HTTP pair is request_total (counted
// as requests start, like Envoy's downstream_rq_total) and the in-flight estimate of
// Endpoint.InFlight (in place of downstream_rq_active, which Linkerd does not have); its
// connections are the client connections of that port. The whole proxy's client connections
// become the Listener, and the responses of the watched ports CompletedRequestsTotal (the
// next-best signal, counted at completion). A port whose requests came from a route counter
// has no in-flight estimate, so it reads as having no request-level signal.
//
// A watched port with no series is read as having had no request (ReadAbsentAsZero): the
// proxy writes a port's series only once a request has used it and drops them after 10
// minutes idle, so after a successful scrape of a proxy their absence is itself the
// information. The admin port's request counter becomes AdminRequestsTotal, which the drain
// logic uses to catch a frozen answer.
func (s Snapshot) Inbound() mesh.Snapshot {
	out := mesh.Snapshot{Naming: NamingLinkerd, AdminRequestsTotal: copyPtr(s.AdminRequestsTotal)}
	if s.Scheme == SchemeUnknown && !s.IsLinkerd {
		out.Naming = mesh.NamingUnknown
	}
	for _, e := range s.Endpoints {
		e = s.ReadAbsentAsZero(e)
		ie := mesh.Endpoint{
			HTTPRequestsTotal:     copyPtr(e.RequestsTotal),
			HTTPRequestsActive:    e.InFlight(),
			HTTPConnectionsActive: copyPtr(e.ConnectionsOpen),
		}
		if e.Port != nil {
			p := *e.Port
			ie.Port = &p
			ie.Name = "target_port=" + strconv.Itoa(p)
		} else {
			ie.Name = "all inbound ports"
		}
		out.Endpoints = append(out.Endpoints, ie)
		if e.ResponsesTotal != nil {
			if out.CompletedRequestsTotal == nil {
				out.CompletedRequestsTotal = new(float64)
			}
			*out.CompletedRequestsTotal += *e.ResponsesTotal
		}
	}
	if s.ConnectionsOpen != nil || s.ConnectionsOpened != nil {
		out.Listener = &mesh.Listener{
			Address:           "linkerd-proxy inbound",
			ConnectionsTotal:  copyPtr(s.ConnectionsOpened),
			ConnectionsActive: copyPtr(s.ConnectionsOpen),
		}
	}
	return out
}

// ReadAbsentAsZero returns e with the request counters it lacks read as zero, where the
// scrape proves they are zero: the snapshot is a Linkerd proxy's (proxy_build_info), the
// port has no client request or response series at all, and it is a port the proxy counts
// requests on: it has no series whatever (quiet for 10 minutes, or named by --port), or only
// the kubelet's probes reached it. A port with connections but no request of any route is
// left alone: it may carry opaque TCP, whose requests the proxy never counts. A counter is
// read as zero only when the scrape holds series of its family that name ports; a field
// the proxy does not export per port (responses of the route counters, every counter of a
// proxy without target labels) stays unknown.
func (s Snapshot) ReadAbsentAsZero(e Endpoint) Endpoint {
	if !s.IsLinkerd || e.Port == nil || e.RequestsTotal != nil || e.ResponsesTotal != nil {
		return e
	}
	if !e.Silent() && e.ProbeRequestsTotal == nil {
		return e
	}
	switch {
	case s.RequestsPerPort:
		e.RequestsTotal, e.RequestsSource = new(float64), FamilyRequests
		if s.ResponsesPerPort {
			e.ResponsesTotal = new(float64)
		}
	case s.RouteRequestsPerPort:
		e.RequestsTotal, e.RequestsSource = new(float64), FamilyHTTPRouteRequests
	}
	return e
}

func copyPtr(v *float64) *float64 {
	if v == nil {
		return nil
	}
	c := *v
	return &c
}
