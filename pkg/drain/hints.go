package drain

import "github.com/meshdrain/meshdrain/pkg/inbound"

// Hints are what a drain's log tells the user to change, and they depend on the sidecar: an
// Istio sidecar needs an annotation before it exposes inbound stats, a Linkerd proxy needs
// none; an Envoy killed under live traffic is fixed in Istio's proxy config, a Linkerd proxy
// in its injection. A hint that names the other mesh's setting sends the user the wrong way
// at the moment they need it.
type Hints struct {
	// MissingStats is the fix when the sidecar exposes no usable inbound stat.
	MissingStats string
	// PlainEnvoy is added to the no-signal event as fix_plain_envoy; "" leaves it out.
	PlainEnvoy string
	// SidecarGone is the fix when the sidecar went away under live traffic.
	SidecarGone string
	// Unreachable, when set, is added to the event of an admin port never reached.
	Unreachable string
	// NoDrainCall, when set, says why the sidecar gets no drain call; the drain started and
	// the final events carry it as no_drain_call.
	NoDrainCall string
	// AdminCounter names the sidecar's own admin request counter (Snapshot
	// AdminRequestsTotal) in frozen-answer errors.
	AdminCounter string
}

// HintsProvider is the optional part of a Sidecar that names its mesh's fixes. Without it,
// a drain gives EnvoyHints.
type HintsProvider interface {
	Hints() Hints
}

// plainEnvoyHint is the fix for a generic Envoy, whose inbound side has no Istio names.
const plainEnvoyHint = "a sidecar that is not Istio's does not mark its inbound side in stat names: name it with --cluster and/or --http-prefix"

// EnvoyHints are the hints of an Envoy sidecar, Istio's first (domain.md §1, §3).
func EnvoyHints() Hints {
	return Hints{
		MissingStats: inbound.MissingStatsHint,
		PlainEnvoy:   plainEnvoyHint,
		SidecarGone:  sidecarGoneFix,
		AdminCounter: inbound.AdminRequestsStat,
	}
}

// hints are the sidecar's hints, or Envoy's.
func (c *coordinator) hints() Hints {
	if p, ok := c.sidecar.(HintsProvider); ok {
		return p.Hints()
	}
	return EnvoyHints()
}
