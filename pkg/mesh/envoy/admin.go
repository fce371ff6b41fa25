package envoy

import (
	"github.com/meshdrain/meshdrain/pkg/mesh"
	dto "github.com/prometheus/client_model/go"
)

// AdminRequestsStat is the Envoy stat counting requests to the admin API itself. Envoy counts a
// request when its headers arrive, before the handler runs, so every meshdrain poll moves it,
// its own included: a poll that shows the same value as the one before was not answered by
// Envoy just now (a cache in front of admin, or a stuck admin replaying one answer).
const AdminRequestsStat = "http.admin.downstream_rq_total"

// adminRequests reads AdminRequestsStat from a family, whichever way the tags render it:
// plain Envoy extracts the "admin" prefix into envoy_http_conn_manager_prefix; Istio's tag
// regexes do not match it (< 1.23 admits only addresses, >= 1.23 needs a ';' after the
// value: tools/packaging/common/envoy_bootstrap.json), so it stays in the metric name.
func (n *normaliser) adminRequests(name string, fam *dto.MetricFamily) {
	switch name {
	case "envoy_http_admin_downstream_rq_total":
		for _, m := range fam.GetMetric() {
			mesh.AddTo(&n.adminRequestsTotal, mesh.Value(m))
		}
	case "envoy_http_downstream_rq_total":
		for _, m := range fam.GetMetric() {
			if prefix, _ := firstLabel(m, httpPrefixLabels); prefix == "admin" {
				mesh.AddTo(&n.adminRequestsTotal, mesh.Value(m))
			}
		}
	}
}

// AdminRequests reads AdminRequestsStat alone from parsed families: nil when they do not
// carry it.
func AdminRequests(families map[string]*dto.MetricFamily) *float64 {
	var n normaliser
	for _, name := range adminRequestFamilies {
		if fam, ok := families[name]; ok {
			n.adminRequests(name, fam)
		}
	}
	return n.adminRequestsTotal
}
