package linkerd

import (
	"context"
	"sort"

	"go.uber.org/zap"

	"github.com/meshdrain/meshdrain/pkg/mesh"
)

// Hints are a Linkerd proxy's fixes (mesh.Sidecar). Their numbers are the hook's deadline
// and the app's drain when the client was opened with them (Options.Deadline, AppDrain).
func (c *Client) Hints() mesh.Hints {
	return mesh.Hints{
		MissingStats: NoSeriesHint,
		SidecarGone:  SidecarGoneFix(c.opts.Deadline, c.opts.AppDrain),
		Unreachable:  UnreachableHint(c.opts.Deadline, c.opts.AppDrain),
		NoDrainCall:  NoDrainCallReason,
		AdminCounter: AdminCounter,
	}
}

// SilentPorts are the selected ports of snap that have no series (see Endpoint.Silent), and,
// only when there are some, the ports that do, read with one more /metrics: a silent port is
// also what a mistyped --port looks like, and the ports with series name the right ones.
func (c *Client) SilentPorts(ctx context.Context, snap Snapshot) (silent, withSeries []int) {
	for _, e := range snap.Endpoints {
		if e.Port != nil && e.Silent() {
			silent = append(silent, *e.Port)
		}
	}
	if len(silent) == 0 {
		return nil, nil
	}
	if all, err := c.Snapshot(ctx, Selector{}); err == nil {
		withSeries = PortsWithSeries(all)
	}
	return silent, withSeries
}

// PortsWithSeries are the ports of s that have request series, in order.
func PortsWithSeries(s Snapshot) []int {
	var out []int
	for _, e := range s.Endpoints {
		if e.Port != nil && !e.Silent() {
			out = append(out, *e.Port)
		}
	}
	sort.Ints(out)
	return out
}

// HookSidecar is the proxy as prestop's drain sees it: the client's inbound view, with one
// warning when a --port has no series, which the drain rule reads as quiet
// (Snapshot.ReadAbsentAsZero) but which is also what a mistyped port looks like.
type HookSidecar struct {
	*Client
	// Log receives the warning; nil logs nothing.
	Log    *zap.Logger
	warned bool
}

// Inbound is Client.Inbound, warning once about silent --ports.
func (h *HookSidecar) Inbound(ctx context.Context, sel mesh.Selector) (mesh.Snapshot, error) {
	lsel, err := SelectorFor(sel, h.AdminPort())
	if err != nil {
		return mesh.Snapshot{}, err
	}
	snap, err := h.Snapshot(ctx, lsel)
	if err != nil {
		return mesh.Snapshot{}, err
	}
	if !h.warned && len(sel.Ports) > 0 {
		h.warned = true
		if silent, with := h.SilentPorts(ctx, snap); len(silent) > 0 && h.Log != nil {
			h.Log.Warn("--port names a port the Linkerd proxy has no series for: no request in the last 10 minutes, or not a port this pod receives on; "+
				"read as no arrivals and nothing in flight (the proxy drops idle label sets), so a mistyped port would look quiet",
				zap.Ints("ports", silent), zap.Ints("ports_with_series", with))
		}
	}
	return snap.Inbound(), nil
}

var _ mesh.Sidecar = (*HookSidecar)(nil)
