package envoy

import (
	"testing"

	dto "github.com/prometheus/client_model/go"
)

func TestCompleteWithLeavesItsInputsAlone(t *testing.T) {
	counter := func(v float64, labels ...string) *dto.Metric {
		m := &dto.Metric{Counter: &dto.Counter{Value: &v}}
		for i := 0; i+1 < len(labels); i += 2 {
			name, value := labels[i], labels[i+1]
			m.Label = append(m.Label, &dto.LabelPair{Name: &name, Value: &value})
		}
		return m
	}
	family := func(name string, typ dto.MetricType, metrics ...*dto.Metric) *dto.MetricFamily {
		return &dto.MetricFamily{Name: &name, Type: &typ, Metric: metrics}
	}
	picture := map[string]*dto.MetricFamily{"c": family("c", dto.MetricType_COUNTER, counter(5, "a", "1", "b", "2"), counter(9, "a", "3"))}
	// The same labels in another order are the same series.
	answer := map[string]*dto.MetricFamily{"c": family("c", dto.MetricType_COUNTER, counter(6, "b", "2", "a", "1"))}
	merged, ok := CompleteWith(picture, answer)
	if !ok || len(merged["c"].Metric) != 2 || merged["c"].Metric[0].GetCounter().GetValue() != 6 || merged["c"].Metric[1].GetCounter().GetValue() != 9 {
		t.Fatalf("merged %v (ok %v)", merged, ok)
	}
	if picture["c"].Metric[0].GetCounter().GetValue() != 5 || len(answer["c"].Metric) != 1 {
		t.Error("an input changed")
	}
	if _, ok := CompleteWith(picture, map[string]*dto.MetricFamily{"c": family("c", dto.MetricType_GAUGE, counter(6, "a", "3"))}); ok {
		t.Error("a family that changed type was merged")
	}
	if _, ok := CompleteWith(picture, map[string]*dto.MetricFamily{"c": family("c", dto.MetricType_COUNTER, counter(8, "a", "3"))}); ok {
		t.Error("a counter that went down was merged")
	}
}
