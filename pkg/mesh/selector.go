package mesh

// Selector says which inbound endpoints to watch. Empty fields mean "every inbound port the
// sidecar names" (Istio). Generic Envoys do not mark their inbound side in stat names, so for
// them the cluster or HTTP prefix names must be given.
type Selector struct {
	Ports        []int    // Istio target ports (inbound|PORT||, inbound_<bind>_PORT)
	Clusters     []string // generic Envoy: cluster names, e.g. Consul's local_app
	HTTPPrefixes []string // generic Envoy: HTTP stat prefixes, e.g. Consul's public_listener
	// Completions also asks for istio_requests_total{reporter="destination"}. It has one
	// series per caller, response code and flag, so a busy service's poll would grow with
	// its callers: it is only asked for when no request-level stat exists.
	Completions bool
}
