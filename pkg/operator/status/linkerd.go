package status

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/meshdrain/meshdrain/pkg/mesh"
	"github.com/meshdrain/meshdrain/pkg/mesh/envoy"
	"github.com/meshdrain/meshdrain/pkg/mesh/linkerd"
)

// LinkerdAdmin is the part of a Linkerd proxy's admin port that status and check read;
// *linkerd.Client is one (it leaves its own admin port out of the snapshot).
type LinkerdAdmin interface {
	Ready(ctx context.Context) (bool, error)
	Snapshot(ctx context.Context, sel linkerd.Selector) (linkerd.Snapshot, error)
	SilentPorts(ctx context.Context, snap linkerd.Snapshot) (silent, withSeries []int)
}

// Linkerd proxy states, as its /ready says them.
const (
	StateReady    = "ready"
	StateNotReady = "not ready"
)

// GatherLinkerd takes one sample of the Linkerd proxy at adminURL, through the same
// normalisation prestop reads (linkerd.Snapshot.Inbound), so the signal shown is the one the
// drain would use. It reads /ready and one /metrics (the proxy cannot filter it); a second
// /metrics only when a --port has no series, to name the ports that do.
func GatherLinkerd(ctx context.Context, admin LinkerdAdmin, adminURL string, sel mesh.Selector, now time.Time) (Report, error) {
	r := Report{
		Admin:       adminURL,
		ServerState: StateUnknown,
		Mesh:        mesh.Linkerd,
		Naming:      linkerd.NamingLinkerd,
		Signal:      mesh.SignalNone,
		Inbound:     []Port{},
		Hints:       []string{},
		SampledAt:   now,
		portsAsked:  sel.Ports,
	}
	lsel, err := linkerd.SelectorFor(sel, 0)
	if err != nil {
		return r, err
	}
	ready, readyErr := admin.Ready(ctx)
	if readyErr != nil && envoy.IsUnreachable(readyErr) {
		return r, &UnreachableError{URL: adminURL, Err: readyErr, Mesh: mesh.Linkerd}
	}
	snap, err := admin.Snapshot(ctx, lsel)
	if err != nil {
		if envoy.IsUnreachable(err) {
			return r, &UnreachableError{URL: adminURL, Err: err, Mesh: mesh.Linkerd}
		}
		return r, fmt.Errorf("read the proxy's /metrics from %s: %w", adminURL, err)
	}
	switch {
	case readyErr != nil:
		r.Hints = append(r.Hints, fmt.Sprintf("/ready failed (%v): the proxy's state is unknown", readyErr))
	case ready:
		r.ServerState = StateReady
	default:
		r.ServerState = StateNotReady
	}
	r.ProxyVersion = snap.ProxyVersion
	r.LabelScheme = string(snap.Scheme)
	in := snap.Inbound()
	r.Naming = in.Naming
	r.Signal = in.Read().Signal
	r.Listener = in.Listener
	r.CompletedRequestsTotal = in.CompletedRequestsTotal
	for i, raw := range snap.Endpoints {
		ie := in.Endpoints[i] // Inbound keeps the endpoints' order
		// The counters as the drain reads them: a port without series reads zero there
		// (linkerd.Snapshot.ReadAbsentAsZero); SilentPorts and its hint still say why.
		e := snap.ReadAbsentAsZero(raw)
		r.Inbound = append(r.Inbound, Port{
			Port:               e.Port,
			Name:               ie.Name,
			Signal:             requestSignal(ie),
			RequestsTotal:      e.RequestsTotal,
			RequestsActive:     ie.HTTPRequestsActive,
			ConnectionsActive:  e.ConnectionsOpen,
			ResponsesTotal:     e.ResponsesTotal,
			ProbeRequestsTotal: e.ProbeRequestsTotal,
			ServerErrorsTotal:  linkerdServerErrors(e),
			ServerErrorsByCode: linkerdCodes(e.ServerErrorsByCode),
		})
		if e.Port != nil && len(sel.Ports) > 0 && raw.Silent() {
			r.SilentPorts = append(r.SilentPorts, *e.Port)
		}
	}
	if len(r.SilentPorts) > 0 {
		_, r.InboundPorts = admin.SilentPorts(ctx, snap)
	}
	r.Hints = append(r.Hints, linkerdHints(r)...)
	r.Hints = append(r.Hints, failureHints(r)...)
	return r, nil
}

// linkerdServerErrors is a port's 5xx count: with its responses counted and no 5xx series
// among them, none; without responses, unknown.
func linkerdServerErrors(e linkerd.Endpoint) *float64 {
	if e.ServerErrorsTotal == nil && e.ResponsesTotal != nil {
		return new(float64)
	}
	return e.ServerErrorsTotal
}

func linkerdCodes(codes map[int]float64) map[string]float64 {
	if len(codes) == 0 {
		return nil
	}
	out := make(map[string]float64, len(codes))
	for code, v := range codes {
		out[fmt.Sprint(code)] = v
	}
	return out
}

// probesOnly reports a port that only the kubelet's probes reached lately: the port is the
// pod's, but no client request has been counted, so there is no request_total series yet
// (the row shows the drain's reading of that absence, zero).
func probesOnly(p Port) bool {
	return (p.RequestsTotal == nil || *p.RequestsTotal == 0) && p.ProbeRequestsTotal != nil
}

// Linkerd hint texts, shared by status and check.
const (
	// linkerdRetainIdle is why a quiet port has no series (linkerd2-proxy
	// LINKERD2_PROXY_METRICS_RETAIN_IDLE, default 10 minutes).
	linkerdRetainIdle   = "a Linkerd proxy writes a port's series only once traffic has used it, and drops them after 10 minutes without any (LINKERD2_PROXY_METRICS_RETAIN_IDLE)"
	hintLinkerdNotReady = "the proxy is not ready (/ready answers 503 \"not ready\"): it is still starting, e.g. waiting for its identity; " +
		"run the check once the pod is Ready"
	hintLinkerdNoPort = "this proxy's series name no target port (proxies before Linkerd 2.9 have no target labels): " +
		"only whole-proxy sums exist, and --port cannot select a port"
)

// linkerdHints say what the operator should know or change for prestop to see a
// request-level signal on a Linkerd proxy. No annotation is ever the answer: the proxy exports
// its metrics by default.
func linkerdHints(r Report) []string {
	var out []string
	if r.ServerState == StateNotReady {
		out = append(out, hintLinkerdNotReady)
	}
	if r.LabelScheme == string(linkerd.SchemeNone) && len(r.portsAsked) > 0 {
		out = append(out, hintLinkerdNoPort)
	}
	if len(r.SilentPorts) > 0 {
		out = append(out, fmt.Sprintf("--port %v: the proxy has no series for it: no request, probe or connection in the last 10 minutes, "+
			"or not a port the pod receives on (%s); %s. request_total appears with the first request; prestop reads such a port as no arrivals and nothing in flight, so check it is the right one", r.SilentPorts, seriesPorts(r.InboundPorts), linkerdRetainIdle))
	}
	var probes, routeOnly []string
	for _, p := range r.Inbound {
		switch {
		case probesOnly(p):
			probes = append(probes, portText(p.Port))
		case p.RequestsTotal != nil && p.ResponsesTotal == nil:
			routeOnly = append(routeOnly, portText(p.Port))
		}
	}
	if len(probes) > 0 {
		out = append(out, fmt.Sprintf("port(s) %v: only the kubelet's probes reached them lately (route \"probe\", which meshdrain leaves out): "+
			"no client request yet, so nothing to wait for now; request_total appears with the first client request", probes))
	}
	if len(routeOnly) > 0 {
		out = append(out, fmt.Sprintf("port(s) %v: requests come only from the per-route counter (no request_total/response_total), "+
			"so nothing in flight can be estimated and prestop falls back to connections", routeOnly))
	}
	if len(r.Inbound) == 0 && len(r.portsAsked) == 0 {
		out = append(out, "no app port has series yet: no request has reached the pod in the last 10 minutes; "+linkerdRetainIdle)
	}
	return out
}

func seriesPorts(ports []int) string {
	if len(ports) == 0 {
		return "the proxy has series for no app port"
	}
	return "ports with series: " + joinInts(ports)
}

// linkerdServerStateItem judges the proxy's /ready.
func linkerdServerStateItem(r Report) Item {
	it := Item{Name: "server-state", Message: "proxy " + r.ServerState + " (/ready)"}
	switch r.ServerState {
	case StateReady:
		it.Status = Pass
	case StateNotReady:
		it.Status, it.Fix = Fail, "the proxy is still starting: run the check once the pod is Ready"
	default:
		it.Status, it.Fix = Fail, "/ready gave no state: is --admin the Linkerd proxy's admin port (4191)?"
	}
	return it
}

// linkerdSignalItems require a request-level signal for every named port, or for at least
// one app port when none is named. A port with no series is a failure with its two possible
// causes (quiet, or wrong): the proxy cannot tell them apart. A port that only probes reached
// is the pod's own and merely quiet: a warning.
func linkerdSignalItems(r Report, min MinSignal) []Item {
	if len(r.portsAsked) > 0 {
		var items []Item
		for _, p := range r.Inbound {
			label := "port " + portText(p.Port)
			switch {
			case p.Port != nil && slices.Contains(r.SilentPorts, *p.Port):
				items = append(items, Item{Name: "signal", Status: Fail,
					Message: fmt.Sprintf("%s: the proxy has no series for this port: no request, probe or connection in the last 10 minutes, "+
						"or not a port the pod receives on (%s)", label, seriesPorts(r.InboundPorts)),
					Fix: "send a request through the port (from a meshed client) and run the check again, or pass --port with the container's target port; " +
						linkerdRetainIdle})
			case probesOnly(p):
				items = append(items, probesOnlyItem(label))
			default:
				items = append(items, signalItem(r, label, effectiveSignal(r, p), min))
			}
		}
		return items
	}
	best, on, probed := mesh.SignalNone, []string{}, []string{}
	for _, p := range r.Inbound {
		if probesOnly(p) {
			probed = append(probed, portText(p.Port))
			continue
		}
		if sig := effectiveSignal(r, p); sig.Rank() < best.Rank() {
			best, on = sig, []string{portText(p.Port)}
		} else if sig == best && sig != mesh.SignalNone {
			on = append(on, portText(p.Port))
		}
	}
	switch {
	case best == mesh.SignalNone && len(probed) > 0:
		return []Item{probesOnlyItem("inbound port(s) " + strings.Join(probed, ", "))}
	case best == mesh.SignalNone && len(r.Inbound) == 0:
		return []Item{{Name: "signal", Status: Fail,
			Message: "no app port has series: no request has reached the pod in the last 10 minutes (prestop would fall back to a fixed wait if none comes)",
			Fix:     "send a request through the app's port (from a meshed client) and run the check again; " + linkerdRetainIdle}}
	}
	label := "inbound"
	if len(on) > 0 {
		label = "inbound port(s) " + strings.Join(on, ", ")
	}
	return []Item{signalItem(r, label, best, min)}
}

func probesOnlyItem(label string) Item {
	return Item{Name: "signal", Status: Warn,
		Message: fmt.Sprintf("%s: only the kubelet's probes in the last 10 minutes: the port is the pod's, but no client request has been counted, "+
			"so request_total has no series yet (it appears with the first client request)", label),
		Fix: "send a request through the port (from a meshed client) and run the check again to see the signal itself"}
}

// linkerdFix is how to get a request-level signal on a Linkerd proxy.
func linkerdFix(r Report) string {
	if r.LabelScheme == string(linkerd.SchemeNone) {
		return hintLinkerdNoPort + "; upgrade the proxy"
	}
	return "a Linkerd proxy counts requests per target port in request_total and response_total by default: send traffic through the port, " +
		"and check that --admin is the pod's own proxy (4191)"
}
