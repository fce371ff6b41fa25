package envoy

import (
	"context"
	"sync"

	dto "github.com/prometheus/client_model/go"

	"github.com/meshdrain/meshdrain/pkg/mesh"
)

// Envoy matches /stats?filter= against every stat it holds, on the thread that also answers
// /ready, and in a big mesh nearly all of them are outbound clusters'. With usedonly it skips
// the stats nothing has ever touched before the regex: the poll pilot-agent itself makes
// (/stats?usedonly&filter=downstream_cx_active$). But "not used" is not "unchanged": a
// stat's used flag is set by every add and set, and Envoy can also clear it
// (Metric::markUnused in source/common/stats/allocator.cc; a hot restart's NeverImport gauge
// merge clears it too), after which a counter that moved since meshdrain last saw it is left
// out of a usedonly answer. So a usedonly answer is only ever a cheaper look between
// complete ones: InboundUsed completes it with the last complete picture, and a caller that
// is about to act on what it shows (the drain's stop decision) reads the complete stats
// first (Inbound).

// InboundUsed is Inbound for the polls between two complete reads: it asks only for the
// stats Envoy has marked used, and takes the value of every selected series the answer
// leaves out from the last picture (the last complete read, brought up to date by every
// usedonly answer since). The series a usedonly answer leaves out are, on a live Envoy,
// those that have not moved since the picture was taken, unless Envoy cleared their used
// flag after they moved: never act on its answer alone. With no complete read of this
// selection yet, or when the answer cannot be the same Envoy's stats as the picture (a
// counter went down: Envoy restarted or reset its counters), it makes a complete read
// instead. One poller at a time.
func (c *Client) InboundUsed(ctx context.Context, sel mesh.Selector) (mesh.Snapshot, error) {
	filter := StatsFilter(sel)
	picture := c.used.get(filter)
	if picture == nil {
		return c.complete(ctx, sel, true)
	}
	lines := inboundLines(sel)
	answer, err := c.stats(ctx, filter, true, &lines)
	if err != nil {
		return mesh.Snapshot{}, err
	}
	merged, ok := CompleteWith(picture, answer)
	if !ok {
		return c.complete(ctx, sel, true)
	}
	c.used.reset(filter, merged)
	snap := Normalise(merged, sel)
	// The admin request counter proves an answer fresh only by its own value: a carried one
	// proves nothing, so it is left unknown when this answer lacks it.
	snap.AdminRequestsTotal = AdminRequests(answer)
	return snap, nil
}

// usedView is the picture InboundUsed completes its answers with. It is only kept once
// InboundUsed is called (a drain's watch): the other callers' answers, which may be large
// when something other than Envoy answers without filtering, are not held on to.
type usedView struct {
	mu       sync.Mutex
	filter   string
	families map[string]*dto.MetricFamily
}

func (v *usedView) reset(filter string, families map[string]*dto.MetricFamily) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.filter, v.families = filter, families
}

// refresh replaces the picture of filter's selection with a complete answer, if one is kept.
func (v *usedView) refresh(filter string, families map[string]*dto.MetricFamily) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.families != nil && v.filter == filter {
		v.families = families
	}
}

// get returns the picture of the selection filter stands for, or nil.
func (v *usedView) get(filter string) map[string]*dto.MetricFamily {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.families == nil || v.filter != filter {
		return nil
	}
	return v.families
}
