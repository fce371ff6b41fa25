package linkerd

import (
	"fmt"
	"strconv"

	"github.com/meshdrain/meshdrain/pkg/inbound"
)

// SelectorFor turns the drain logic's selector into a Linkerd one. Linkerd names no clusters
// or HTTP prefixes, so a selector with them is a configuration mistake, reported at once.
// adminPort is excluded from the watched ports: the proxy counts its own admin traffic.
func SelectorFor(sel inbound.Selector, adminPort int) (Selector, error) {
	if len(sel.Clusters) > 0 || len(sel.HTTPPrefixes) > 0 {
		return Selector{}, fmt.Errorf("a Linkerd proxy has no Envoy clusters or HTTP stat prefixes; select its inbound target ports instead (--port)")
	}
	out := Selector{Ports: append([]int(nil), sel.Ports...)}
	if adminPort > 0 {
		out.ExcludePorts = []int{adminPort}
	}
	return out, nil
}

// Inbound maps the snapshot onto the model the drain logic reads (package inbound), with no
// new type: each target port becomes an Endpoint whose HTTP pair is request_total (counted
// as requests start, like Envoy's downstream_rq_total) and the in-flight estimate of
// Endpoint.InFlight (in place of downstream_rq_active, which Linkerd does not have); its
// connections are the client connections of that port. The whole proxy's client connections
// become the Listener, and the responses of the watched ports CompletedRequestsTotal (the
// next-best signal, counted at completion). A port whose requests came from a route counter
// has no in-flight estimate, so it reads as having no request-level signal.
func (s Snapshot) Inbound() inbound.Snapshot {
	out := inbound.Snapshot{Naming: NamingLinkerd}
	if s.Scheme == SchemeUnknown && !s.IsLinkerd {
		out.Naming = inbound.NamingUnknown
	}
	for _, e := range s.Endpoints {
		ie := inbound.Endpoint{
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
		out.Listener = &inbound.Listener{
			Address:           "linkerd-proxy inbound",
			ConnectionsTotal:  copyPtr(s.ConnectionsOpened),
			ConnectionsActive: copyPtr(s.ConnectionsOpen),
		}
	}
	return out
}

func copyPtr(v *float64) *float64 {
	if v == nil {
		return nil
	}
	c := *v
	return &c
}
