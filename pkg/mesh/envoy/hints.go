package envoy

import "github.com/meshdrain/meshdrain/pkg/mesh"

// MissingStatsHint explains how to make an Istio sidecar expose the inbound stats meshdrain
// reads: Istio emits none of them by default (docs/facts.md §3).
const MissingStatsHint = `add the pod annotation sidecar.istio.io/statsInclusionPrefixes: "cluster.inbound|,http.inbound_,listener.0.0.0.0_15006" ` +
	`(or proxy.istio.io/config: {proxyStatsMatcher: {inclusionPrefixes: ["cluster.inbound|", "http.inbound_", "listener.0.0.0.0_15006"]}}) and restart the pod`

// sidecarGoneFix is what to change when Envoy dies under live traffic (docs/facts.md §1).
const sidecarGoneFix = "make the sidecar outlive the app's drain: raise Istio's terminationDrainDuration above the preStop deadline plus the app's drain time, " +
	"or set EXIT_ON_ZERO_ACTIVE_CONNECTIONS=true, or use native sidecars (Kubernetes >= 1.29, Istio ENABLE_NATIVE_SIDECARS)"

// plainEnvoyHint is the fix for a generic Envoy, whose inbound side has no Istio names.
const plainEnvoyHint = "a sidecar that is not Istio's does not mark its inbound side in stat names: name it with --cluster and/or --http-prefix"

// EnvoyHints are the hints of an Envoy sidecar, Istio's first (docs/facts.md §1, §3).
func EnvoyHints() mesh.Hints {
	return mesh.Hints{
		MissingStats:      MissingStatsHint,
		MoreNoSignalFixes: []mesh.Fix{{Key: "fix_plain_envoy", Text: plainEnvoyHint}},
		SidecarGone:       sidecarGoneFix,
		AdminCounter:      AdminRequestsStat,
	}
}

// Hints are an Envoy sidecar's fixes (mesh.Sidecar).
func (c *Client) Hints() mesh.Hints { return EnvoyHints() }
