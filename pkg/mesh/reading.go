package mesh

import "math"

// Reading is the one number pair the drain rule looks at: a counter of new inbound arrivals
// and a gauge of inbound work in flight, both summed over the watched endpoints.
type Reading struct {
	Signal Signal
	// Arrivals only ever grows while the sidecar lives; nil when the signal has no counter.
	Arrivals *float64
	// Active must reach zero before the app may stop; nil when the signal has no such gauge
	// (completed requests: the quiet window's latency allowance covers what is in flight).
	Active *float64
	// Connections is the inbound connections open, for reporting; nil when unknown.
	Connections *float64
}

// Read picks the best signal the snapshot offers (docs/facts.md §3: HTTP requests, then inbound
// cluster requests, then completed requests, then virtualInbound connections). Each endpoint
// uses the best of its own request-level stats, so one port without HTTP stats does not
// demote the others; the reported signal is the weakest one used.
func (s Snapshot) Read() Reading {
	r := Reading{Signal: SignalNone}
	worst := -1
	tcpOnly := false
	for _, e := range s.Endpoints {
		sig, arrivals, active := e.best()
		if sig == SignalNone {
			continue
		}
		AddPtr(&r.Arrivals, arrivals)
		AddPtr(&r.Active, active)
		tcpOnly = tcpOnly || sig == SignalTCPConnections
		if sig.Rank() > worst {
			worst = sig.Rank()
			r.Signal = sig
		}
		if e.HTTPConnectionsActive != nil {
			AddPtr(&r.Connections, e.HTTPConnectionsActive)
		}
	}
	listenerActive := s.Listener != nil && s.Listener.ConnectionsActive != nil
	if listenerActive {
		// The virtualInbound listener sees every inbound connection: it is the better count.
		r.Connections = ptr(*s.Listener.ConnectionsActive)
	}
	if tcpOnly {
		// A TCP port's open connections are counted only by the inbound listener (pod-wide,
		// so with every other port's connections): without it, what is in flight is unknown.
		if listenerActive {
			AddPtr(&r.Active, s.Listener.ConnectionsActive)
		} else {
			r.Active = nil
		}
	}
	if r.Signal != SignalNone {
		return r
	}
	if s.CompletedRequestsTotal != nil {
		r.Signal = SignalCompletedRequests
		r.Arrivals = ptr(*s.CompletedRequestsTotal)
		return r
	}
	if s.Listener != nil && s.Listener.ConnectionsActive != nil {
		r.Signal = SignalConnections
		if s.Listener.ConnectionsTotal != nil {
			r.Arrivals = ptr(*s.Listener.ConnectionsTotal)
		}
		r.Active = ptr(*s.Listener.ConnectionsActive)
	}
	return r
}

// best returns the endpoint's best request-level signal: a counter and its gauge together.
func (e Endpoint) best() (Signal, *float64, *float64) {
	if e.HTTPRequestsTotal != nil && e.HTTPRequestsActive != nil {
		return SignalHTTPRequests, e.HTTPRequestsTotal, e.HTTPRequestsActive
	}
	if e.ClusterRequestsTotal != nil && e.ClusterRequestsActive != nil {
		// For a TCP port, Envoy's TCP connection pool counts one request per proxied
		// connection, open until the connection closes (Tcp::ConnPoolImpl).
		return SignalClusterRequests, e.ClusterRequestsTotal, e.ClusterRequestsActive
	}
	if e.TCPConnectionsTotal != nil {
		return SignalTCPConnections, e.TCPConnectionsTotal, nil
	}
	if e.ClientActivityTotal != nil {
		return SignalKernel, e.ClientActivityTotal, e.ClientRequestsActive
	}
	return SignalNone, nil, nil
}

// RequestsTotal is the endpoint's best arrival counter, for display; nil when unknown.
func (e Endpoint) RequestsTotal() *float64 {
	if e.HTTPRequestsTotal != nil {
		return e.HTTPRequestsTotal
	}
	if e.ClusterRequestsTotal != nil {
		return e.ClusterRequestsTotal
	}
	if e.TCPConnectionsTotal != nil {
		return e.TCPConnectionsTotal
	}
	return e.ClientActivityTotal
}

// RequestsActive is the endpoint's best in-flight gauge, for display; nil when unknown.
func (e Endpoint) RequestsActive() *float64 {
	if e.HTTPRequestsActive != nil {
		return e.HTTPRequestsActive
	}
	if e.ClusterRequestsActive != nil {
		return e.ClusterRequestsActive
	}
	return e.ClientRequestsActive
}

// ConnectionsActive is the endpoint's open downstream connections, for display.
func (e Endpoint) ConnectionsActive() *float64 {
	if e.HTTPConnectionsActive != nil {
		return e.HTTPConnectionsActive
	}
	return e.ClusterConnsActive
}

// AddPtr adds a known value to *dst; an unknown (nil) one leaves it as it was.
func AddPtr(dst **float64, v *float64) {
	if v == nil {
		return
	}
	AddTo(dst, *v)
}

func ptr(v float64) *float64 { return &v }

// AddTo adds v to *field, making the field known (non-nil) on the first value; NaN, which
// Envoy writes for a stat it cannot compute, leaves it as it was.
func AddTo(field **float64, v float64) {
	if math.IsNaN(v) {
		return
	}
	if *field == nil {
		*field = new(float64)
	}
	**field += v
}

// DrainCloses is the inbound connections the sidecar has told to close because it drains
// (http.<prefix>.downstream_cx_drain_close, summed), nil when no endpoint exposes it.
func (s Snapshot) DrainCloses() *float64 {
	var sum *float64
	for _, e := range s.Endpoints {
		AddPtr(&sum, e.HTTPDrainCloses)
	}
	return sum
}
