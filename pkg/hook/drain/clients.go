package drain

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/meshdrain/meshdrain/pkg/mesh"
)

// ClientEvidence says which clients have let go, from what the pod itself can see of its
// inbound connections (the socket table; docs/facts.md §6): a client's sidecar closes its
// idle pooled connections to this pod when it applies the endpoint removal, and keeps them
// until then. It is optional: without it, or when it cannot be read, silence alone decides.
type ClientEvidence interface {
	// Begin marks the connections open as the drain begins, on the inbound listener the
	// snapshot's sidecar serves; start is when the hook started, a moment before (zero:
	// unknown).
	Begin(ctx context.Context, start time.Time, snap mesh.Snapshot) error
	// Counts reads the connections again, when they can have changed, and says where each
	// client stands; traffic is what this poll's stats say of the inbound side.
	Counts(ctx context.Context, traffic Traffic) (ClientCounts, error)
}

// FinalFields is what an evidence source adds to the final event beyond the counts: the
// fields only that source has, which the rule never reads.
type FinalFields interface {
	FinalFields() []zap.Field
}

// ReadObserver sees each of the watch's reads beside the rule, for what only a backend makes
// of them (an Envoy sidecar's drain regime: pkg/hook/regime), and adds its account to the
// final event (FinalFields, nil until it has something to say). The rule never reads it.
type ReadObserver interface {
	ObserveRead(snap mesh.Snapshot, traffic Traffic)
	FinalFields
}

// Traffic is what one poll's stats say of the inbound side, for the evidence: whether
// requests reached the pod since its table was read (a connection gone meanwhile may have
// carried one), and whether any connection was opened or closed (if none was and nothing
// arrived, the table says what it said).
type Traffic struct {
	// Arrivals is the arrival counter (nil: unknown).
	Arrivals *float64
	// Active is the requests in flight (nil: unknown): with Arrivals, how many have been
	// answered.
	Active *float64
	// Opened and Open are the inbound listener's accepted and open connections (nil:
	// unknown).
	Opened, Open *float64
	// DrainCloses is the connections the sidecar told to close because it drains (nil:
	// none counted, or not exposed).
	DrainCloses *float64
}

// TrafficOf is the traffic a snapshot and its reading show.
func TrafficOf(snap mesh.Snapshot, r mesh.Reading) Traffic {
	t := Traffic{Arrivals: r.Arrivals, Active: r.Active, DrainCloses: snap.DrainCloses()}
	if l := snap.Listener; l != nil {
		t.Opened, t.Open = l.ConnectionsTotal, l.ConnectionsActive
	}
	return t
}

// beginClients starts the evidence at the watch's start; a table that cannot be read is
// said once, and the drain goes on with today's rule.
func (c *coordinator) beginClients(ctx context.Context, snap mesh.Snapshot) {
	if c.cfg.Clients == nil {
		c.result.ClientEvidence = "off"
		return
	}
	if err := c.cfg.Clients.Begin(ctx, c.start, snap); err != nil {
		c.noClientEvidence(err)
		return
	}
	c.clients = c.cfg.Clients
	c.result.ClientEvidence = "socket-table"
}

// clientCounts is this poll's evidence, nil without any.
func (c *coordinator) clientCounts(ctx context.Context, traffic Traffic) *ClientCounts {
	if c.clients == nil {
		return nil
	}
	counts, err := c.clients.Counts(ctx, traffic)
	if err != nil {
		c.noClientEvidence(err)
		return nil
	}
	c.result.Clients = &counts
	return &counts
}

// noClientEvidence drops the evidence for the rest of the drain, saying why once.
func (c *coordinator) noClientEvidence(err error) {
	c.clients = nil
	c.result.Clients = nil
	c.result.ClientEvidence = "unavailable: " + err.Error()
	c.log.Warn("per-client evidence given up: clients are judged by silence alone, as without it",
		zap.String("error", err.Error()))
}

// clientFields are the final event's per-client evidence.
func (c *coordinator) clientFields() []zap.Field {
	fields := []zap.Field{zap.String("client_evidence", c.result.ClientEvidence)}
	if c.cfg.LagBound > 0 {
		fields = append(fields, zap.Int64("lag_bound_ms", c.cfg.LagBound.Milliseconds()))
	}
	if n := c.result.Clients; n != nil {
		fields = append(fields,
			zap.Int("clients_left", n.Left),
			zap.Int("clients_by_silence", n.Sending+n.NoEvidence),
			zap.Int("clients_holding", n.Holding))
		if n.Named != nil {
			fields = append(fields, n.Named.FinalFields()...)
		}
	}
	return fields
}
