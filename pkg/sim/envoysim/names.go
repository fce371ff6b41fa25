package envoysim

import (
	"fmt"
	"strconv"
)

// namer writes Envoy stat names for a profile: Istio >= 1.23 puts ";" after a cluster name or
// an HTTP prefix that pilot generated (DelimitedStatsPrefix), the others do not.
type namer struct {
	profile Profile
	bind    string
}

func (n namer) delim() string {
	if n.profile == ProfileIstio {
		return ";"
	}
	return ""
}

// cluster is a stat of a pilot-generated cluster: cluster.inbound|8080||;.upstream_rq_total.
func (n namer) cluster(name, stat string) string {
	return "cluster." + name + n.delim() + "." + stat
}

// tcp is a stat of a tcp_proxy filter: tcp.<stat_prefix>.<stat>.
func (n namer) tcp(prefix, stat string) string {
	return "tcp." + prefix + "." + stat
}

// http is a stat of a pilot-generated HTTP connection manager.
func (n namer) http(prefix, stat string) string {
	return "http." + prefix + n.delim() + "." + stat
}

// inboundNames fills the stat names of one inbound port from the profile's defaults.
func (n namer) inboundNames(in InboundPort, index int) InboundPort {
	if in.ClusterName == "" {
		if n.profile.istio() {
			in.ClusterName = fmt.Sprintf("inbound|%d||", in.Port)
		} else {
			in.ClusterName = "service_" + string(rune('a'+index%26))
			if index >= 26 {
				in.ClusterName += strconv.Itoa(index / 26)
			}
		}
	}
	if in.HTTPPrefix == "" {
		switch {
		case n.profile.istio():
			in.HTTPPrefix = fmt.Sprintf("inbound_%s_%d", n.bind, in.Port)
		case index == 0:
			in.HTTPPrefix = "ingress_http"
		default:
			in.HTTPPrefix = fmt.Sprintf("ingress_http_%d", in.Port)
		}
	}
	if in.TCPPrefix == "" {
		switch {
		case n.profile.istio():
			// Istio's inbound tcp_proxy stat prefix is the cluster name, never delimited
			// (pilot/pkg/networking/core listener_inbound.go buildInboundNetworkFilters).
			in.TCPPrefix = fmt.Sprintf("inbound|%d||", in.Port)
		case index == 0:
			in.TCPPrefix = "ingress_tcp"
		default:
			in.TCPPrefix = fmt.Sprintf("ingress_tcp_%d", in.Port)
		}
	}
	if in.ListenerAddress == "" {
		if n.profile.istio() {
			// Every inbound port shares the virtualInbound listener.
			in.ListenerAddress = "0.0.0.0_15006"
		} else {
			in.ListenerAddress = fmt.Sprintf("0.0.0.0_%d", in.Port)
		}
	}
	return in
}

// extraClusterName names the i-th synthetic outbound cluster.
func (n namer) extraClusterName(i int) string {
	if n.profile.istio() {
		return fmt.Sprintf("outbound|8080||svc-%05d.ns-%03d.svc.cluster.local", i, i%200)
	}
	return fmt.Sprintf("upstream_%05d", i)
}

// extraClusterStats are the ~20 stats every outbound cluster carries, with whether a running
// mesh has touched them (so that usedonly keeps them) and a plausible value.
var extraClusterStats = []struct {
	name  string
	typ   statType
	used  bool
	value uint64
}{
	{"assignment_stale", typeCounter, false, 0},
	{"assignment_timeout_received", typeCounter, false, 0},
	{"bind_errors", typeCounter, false, 0},
	{"lb_healthy_panic", typeCounter, false, 0},
	{"max_host_weight", typeGauge, true, 1},
	{"membership_change", typeCounter, true, 1},
	{"membership_degraded", typeGauge, true, 0},
	{"membership_excluded", typeGauge, true, 0},
	{"membership_healthy", typeGauge, true, 3},
	{"membership_total", typeGauge, true, 3},
	{"retry_or_shadow_abandoned", typeCounter, false, 0},
	{"update_attempt", typeCounter, true, 7},
	{"update_empty", typeCounter, false, 0},
	{"update_failure", typeCounter, false, 0},
	{"update_no_rebuild", typeCounter, true, 6},
	{"update_success", typeCounter, true, 7},
	{"upstream_cx_active", typeGauge, false, 0},
	{"upstream_cx_connect_fail", typeCounter, false, 0},
	{"upstream_cx_total", typeCounter, false, 0},
	{"upstream_rq_active", typeGauge, false, 0},
	{"upstream_rq_total", typeCounter, false, 0},
	{"version", typeGauge, true, 0},
}
