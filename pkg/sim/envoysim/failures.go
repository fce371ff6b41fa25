package envoysim

// The inbound cluster's counters of a failed attempt to reach the app that Envoy has and the
// proxy path does not count itself. Envoy creates every cluster traffic stat with the cluster
// (ALL_CLUSTER_TRAFFIC_STATS), so they read 0 until the first failure, as here.
const (
	statCxDestroyWithActiveRq       = "upstream_cx_destroy_with_active_rq"
	statCxDestroyRemoteWithActiveRq = "upstream_cx_destroy_remote_with_active_rq"
	// statRqTimeout is never counted: the emulator has no route timeout, as Istio's inbound
	// route has none (istio/istio pilot/pkg/networking/core/route BuildDefaultHTTPInboundRoute:
	// Timeout 0), so its UT is always 0.
	statRqTimeout = "upstream_rq_timeout"
)

// createFailureStats creates the failure counters of the port's inbound cluster.
func (l *inboundListener) createFailureStats() {
	for _, name := range []string{statCxDestroyWithActiveRq, statCxDestroyRemoteWithActiveRq, statRqTimeout} {
		l.s.store.counter(l.s.names.cluster(l.port.ClusterName, name))
	}
}

// chargeConnectionTermination counts an app that closed its connection while a request was on
// it (response flag UC), as Envoy's HTTP/1.1 connection pool does: on the remote close of a
// client whose stream is incomplete, upstream_cx_destroy_with_active_rq and
// upstream_cx_destroy_remote_with_active_rq (envoyproxy/envoy
// source/common/conn_pool/conn_pool_base.cc onConnectionEvent, reportUpstreamCxDestroyActiveRequest).
// It is not upstream_rq_rx_reset: that counts an HTTP/2 stream reset by the peer
// (source/common/http/conn_pool_base.cc MultiplexedActiveClientBase::onStreamReset, RemoteReset),
// which the router answers with UR, and the emulator speaks HTTP/1.1 to the app.
func (l *inboundListener) chargeConnectionTermination() {
	for _, name := range []string{statCxDestroyWithActiveRq, statCxDestroyRemoteWithActiveRq} {
		l.s.store.counter(l.s.names.cluster(l.port.ClusterName, name)).inc()
	}
}
