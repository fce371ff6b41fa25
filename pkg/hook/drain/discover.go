package drain

import (
	"context"
	"sort"

	"go.uber.org/zap"

	"github.com/meshdrain/meshdrain/pkg/localhttp"
	"github.com/meshdrain/meshdrain/pkg/mesh"
)

// checkPorts makes sure every --port names an inbound endpoint of the sidecar. A wrong port
// would otherwise leave nothing to watch but the pod-wide completions or connections, which
// meshdrain would silently use. It returns a fix when none of the ports exists (the drain
// then falls back to a fixed wait), or the reason to stop when the sidecar went away.
func (c *coordinator) checkPorts(ctx context.Context, snap mesh.Snapshot) (fix string, stop Reason) {
	if len(c.cfg.Selector.Ports) == 0 {
		return "", ""
	}
	var missing, present []int
	for _, e := range snap.Endpoints {
		if e.Port == nil {
			continue
		}
		if hasStats(e) {
			present = append(present, *e.Port)
		} else {
			missing = append(missing, *e.Port)
		}
	}
	if len(missing) == 0 {
		return "", ""
	}
	everyPort := c.cfg.Selector
	everyPort.Ports = nil
	everyPort.Completions = false
	callCtx, cancel := context.WithTimeout(ctx, c.cfg.ConnectTimeout)
	wide, err := c.sidecar.Inbound(callCtx, everyPort)
	cancel()
	c.result.Polls++
	if err != nil {
		if localhttp.IsRefused(err) {
			return "", c.sidecarGone()
		}
		c.log.Warn("could not list "+c.terms.Ports+" to check --port", zap.Ints("ports", missing), zap.String("error", err.Error()))
		return "", ""
	}
	var found []int
	for _, e := range wide.Endpoints {
		if e.Port != nil && hasStats(e) {
			found = append(found, *e.Port)
		}
	}
	sort.Ints(found)
	if len(found) == 0 {
		c.log.Warn("--port cannot be checked: "+c.terms.NoPortStats,
			zap.Ints("ports", missing), zap.String("fix", c.sidecar.Hints().MissingStats))
		return "", ""
	}
	c.log.Error("--port names a port "+c.terms.NotOnPort,
		zap.Ints("ports", missing), zap.Ints("inbound_ports_found", found), zap.Ints("watching", present))
	if len(present) > 0 {
		return "", ""
	}
	return c.terms.PortsMissing(missing, found), ""
}

func hasStats(e mesh.Endpoint) bool {
	for _, v := range []*float64{e.HTTPRequestsTotal, e.HTTPRequestsActive, e.HTTPConnectionsActive,
		e.ClusterRequestsTotal, e.ClusterRequestsActive, e.ClusterConnsActive, e.CompletedRequests, e.ClientActivityTotal} {
		if v != nil {
			return true
		}
	}
	return false
}

// warnWeakSignal names, in prestop's own log, a signal weaker than request arrivals and the
// annotation that gives the better one.
func (c *coordinator) warnWeakSignal(signal mesh.Signal) {
	var what string
	switch signal {
	case mesh.SignalCompletedRequests:
		what = "only completed requests (istio_requests_total, or Linkerd's response_total) are exposed: they are counted when a request ends, so the quiet window is extended by --latency-allowance and a request longer than that can still be in flight"
	case mesh.SignalConnections:
		what = "only the inbound listener's connections are exposed: no request-level signal, and idle keep-alive connections hold the wait until they close"
	default:
		return
	}
	fields := []zap.Field{zap.String("signal", string(signal)), zap.String("fix", c.sidecar.Hints().MissingStats),
		zap.Int64("latency_allowance_ms", c.cfg.LatencyAllowance.Milliseconds())}
	if len(c.cfg.Selector.Ports) > 0 {
		fields = append(fields, zap.String("scope", "every inbound port of the pod, not only --port"))
	}
	c.log.Warn("weak inbound signal: "+what, fields...)
}
