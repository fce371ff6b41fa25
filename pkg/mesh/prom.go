package mesh

import (
	"math"

	dto "github.com/prometheus/client_model/go"
)

// Label is the value of a series' label, "" when it has none: what every backend reads from
// a sidecar's Prometheus text.
func Label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// Value is a series' value whatever its type; NaN for a type meshdrain does not read, which
// AddTo leaves out.
func Value(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.GetCounter().GetValue()
	case m.Gauge != nil:
		return m.GetGauge().GetValue()
	case m.Untyped != nil:
		return m.GetUntyped().GetValue()
	}
	return math.NaN()
}
