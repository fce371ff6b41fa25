package envoy

import (
	"regexp"
	"strings"
)

// The stat names of Envoy and Istio, and the ports they carry, in every naming variant
// meshdrain reads: the normaliser and the stats filter both read them.

// virtualInboundPort is the port of Istio's virtualInbound listener, through which every
// inbound connection of a sidecar passes.
const virtualInboundPort = "15006"

var (
	// Istio < 1.23 leaves that prefix in the metric name: envoy_http_inbound_0_0_0_0_8080_downstream_rq_total{}.
	// Its 5xx counter keeps the prefix too, with the class extracted (response_code_class="5xx"):
	// envoy_http_inbound_0_0_0_0_8080_downstream_rq{response_code_class="5xx"}.
	legacyHTTPName = regexp.MustCompile(`^envoy_http_inbound_(.+)_([0-9]+)_(downstream_rq_total|downstream_rq_active|downstream_cx_active|downstream_cx_drain_close|downstream_rq|downstream_rq_5xx)$`)
	// 0.0.0.0_15006, 10.1.2.3_15006, and IPv6 [::]_15006 ([__]_15006 once Envoy has
	// replaced the colons of stat names).
	virtualInboundAddress = regexp.MustCompile(`^[0-9a-fA-F._:\[\]]+_` + virtualInboundPort + `$`)
)

// istioHTTPPort is the port of Istio's inbound HTTP prefix, which carries the bind address:
// inbound_0.0.0.0_8080, inbound_10.38.36.249_8080 (istio/istio#50894).
func istioHTTPPort(prefix string) (int, bool) {
	rest, ok := strings.CutPrefix(prefix, "inbound_")
	if !ok {
		return 0, false
	}
	i := strings.LastIndexByte(rest, '_')
	if i <= 0 {
		return 0, false
	}
	return atoiPort(rest[i+1:])
}

// istioClusterPort is the port of an inbound cluster (or TCP stat prefix) name:
// inbound|8080||, and the older inbound|8080|http|svc.ns.svc.cluster.local.
func istioClusterPort(cluster string) (int, bool) {
	rest, ok := strings.CutPrefix(cluster, "inbound|")
	if !ok {
		return 0, false
	}
	port, _, found := strings.Cut(rest, "|")
	if !found {
		return 0, false
	}
	return atoiPort(port)
}

// atoiPort reads a port number made of digits only.
func atoiPort(s string) (int, bool) {
	if s == "" || len(s) > 5 {
		return 0, false
	}
	port := 0
	for _, c := range []byte(s) {
		if c < '0' || c > '9' {
			return 0, false
		}
		port = port*10 + int(c-'0')
	}
	return port, port > 0 && port <= 65535
}

// Label names for the tag of each stat family: Envoy's default tags carry an "envoy_" prefix,
// Istio's own tag definitions do not.
var (
	httpPrefixLabels = []string{"envoy_http_conn_manager_prefix", "http_conn_manager_prefix"}
	clusterLabels    = []string{"envoy_cluster_name", "cluster_name"}
	listenerLabels   = []string{"envoy_listener_address", "listener_address"}
	tcpPrefixLabels  = []string{"envoy_tcp_prefix", "tcp_prefix"}
	// The response class tag: Envoy's default regex _rq_(\d)xx$ keeps the digit ("5") and
	// leaves "_xx" in the name (envoy_http_downstream_rq_xx); Istio's _rq(_(\dxx))$ keeps
	// "5xx" and cuts "_5xx" from it (envoy_http_downstream_rq) (envoyproxy/envoy
	// source/common/config/well_known_names.cc; istio/istio
	// tools/packaging/common/envoy_bootstrap.json).
	responseClassLabels = []string{"envoy_response_code_class", "response_code_class"}
)
