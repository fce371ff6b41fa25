package envoy

import (
	"maps"
	"slices"
	"strings"

	dto "github.com/prometheus/client_model/go"
)

// CompleteWith returns picture with every series of answer in place of its namesake (same
// family, same labels) and answer's new series added: a usedonly answer completed with what
// an earlier complete one showed of the stats it leaves out. Neither input is changed. ok is false
// when answer cannot be a later look at the same stats: a counter went down, or a family
// changed type.
func CompleteWith(picture, answer map[string]*dto.MetricFamily) (map[string]*dto.MetricFamily, bool) {
	out := maps.Clone(picture)
	for name, fresh := range answer {
		old, seen := out[name]
		if !seen {
			out[name] = fresh
			continue
		}
		if old.GetType() != fresh.GetType() {
			return nil, false
		}
		at := make(map[string]int, len(old.Metric))
		for i, m := range old.Metric {
			at[seriesKey(m)] = i
		}
		metrics := slices.Clone(old.Metric)
		for _, m := range fresh.Metric {
			i, known := at[seriesKey(m)]
			if !known {
				metrics = append(metrics, m)
				continue
			}
			if fresh.GetType() == dto.MetricType_COUNTER && m.GetCounter().GetValue() < metrics[i].GetCounter().GetValue() {
				return nil, false
			}
			metrics[i] = m
		}
		out[name] = &dto.MetricFamily{Name: old.Name, Help: old.Help, Type: old.Type, Unit: old.Unit, Metric: metrics}
	}
	return out, true
}

// seriesKey identifies a series within its family: its labels, in name order.
func seriesKey(m *dto.Metric) string {
	pairs := make([]string, 0, len(m.Label))
	for _, l := range m.Label {
		pairs = append(pairs, l.GetName()+"\x00"+l.GetValue())
	}
	slices.Sort(pairs)
	return strings.Join(pairs, "\x01")
}
