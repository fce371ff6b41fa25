package lag

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// The histograms that already measure a fleet's lag (domain.md §8).
const (
	// KubeProxyProgramming is kube-proxy's network programming latency, per node: from the
	// endpoint change to the node's rules reflecting it.
	KubeProxyProgramming = "kubeproxy_network_programming_duration_seconds"
	// IstiodConvergence is istiod's delay from a config change to a proxy receiving it.
	IstiodConvergence = "pilot_proxy_convergence_time"
)

// Bucket is one cumulative bucket: Count observations at or below UpperBound seconds.
type Bucket struct {
	UpperBound float64
	Count      float64
}

// Histogram is a cumulative histogram summed over its series (one per node for kube-proxy,
// one per istiod replica), buckets sorted by bound, the last one +Inf.
type Histogram struct {
	Name    string
	Buckets []Bucket
	// SeriesCounts is each series' +Inf count, by its labels other than le, so that a summary
	// can say whether one node holds most of the evidence.
	SeriesCounts map[string]float64
}

// ReadHistogram reads the histogram called name (without _bucket) from a Prometheus text
// exposition (a /metrics scrape) or from the Prometheus HTTP API's JSON answer to a query of
// name_bucket (resultType vector, or matrix whose last value per series is taken). Series are
// summed bucket by bucket, as `sum by (le)` would.
func ReadHistogram(r io.Reader, name string) (Histogram, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return Histogram{}, fmt.Errorf("read %s: %w", name, err)
	}
	if trimmed := bytes.TrimSpace(data); len(trimmed) > 0 && trimmed[0] == '{' {
		return readAPIAnswer(trimmed, name)
	}
	return readExposition(data, name)
}

func readExposition(data []byte, name string) (Histogram, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(data))
	if err != nil {
		return Histogram{}, fmt.Errorf("parse the scrape for %s: %w", name, err)
	}
	family, ok := families[name]
	if !ok {
		return Histogram{}, fmt.Errorf("the scrape has no %s", name)
	}
	if family.GetType() != dto.MetricType_HISTOGRAM {
		return Histogram{}, fmt.Errorf("%s is a %s, not a histogram", name, strings.ToLower(family.GetType().String()))
	}
	acc := newAccumulator(name)
	for _, m := range family.GetMetric() {
		series := seriesKey(m.GetLabel())
		h := m.GetHistogram()
		hasInf := false
		for _, b := range h.GetBucket() {
			hasInf = hasInf || math.IsInf(b.GetUpperBound(), 1)
			acc.add(series, b.GetUpperBound(), float64(b.GetCumulativeCount()))
		}
		if !hasInf {
			// A scrape may leave the +Inf bucket out: it is the _count.
			acc.add(series, math.Inf(1), float64(h.GetSampleCount()))
		}
	}
	return acc.histogram()
}

func seriesKey(labels []*dto.LabelPair) string {
	parts := make([]string, 0, len(labels))
	for _, l := range labels {
		parts = append(parts, l.GetName()+"="+strconv.Quote(l.GetValue()))
	}
	sort.Strings(parts)
	return "{" + strings.Join(parts, ",") + "}"
}

// apiAnswer is the Prometheus HTTP API's query answer (prometheus docs/querying/api.md).
type apiAnswer struct {
	Status string `json:"status"`
	Error  string `json:"error"`
	Data   struct {
		ResultType string          `json:"resultType"`
		Result     json.RawMessage `json:"result"`
	} `json:"data"`
}

// apiSeries is one series of a vector (value) or a matrix (values).
type apiSeries struct {
	Metric map[string]string `json:"metric"`
	Value  []any             `json:"value"`
	Values [][]any           `json:"values"`
}

func readAPIAnswer(data []byte, name string) (Histogram, error) {
	var ans apiAnswer
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(&ans); err != nil {
		return Histogram{}, fmt.Errorf("parse the Prometheus answer for %s: %w", name, err)
	}
	if ans.Status != "success" {
		return Histogram{}, fmt.Errorf("the Prometheus answer for %s has status %q: %s", name, ans.Status, ans.Error)
	}
	if t := ans.Data.ResultType; t != "vector" && t != "matrix" {
		return Histogram{}, fmt.Errorf("the Prometheus answer for %s is a %s: query %s_bucket for a vector or a matrix", name, t, name)
	}
	var series []apiSeries
	if err := json.Unmarshal(ans.Data.Result, &series); err != nil {
		return Histogram{}, fmt.Errorf("parse the Prometheus answer's %s for %s: %w", ans.Data.ResultType, name, err)
	}
	acc := newAccumulator(name)
	bucketName := name + "_bucket"
	for _, res := range series {
		// A `sum by (le)` answer has no __name__; one that names another metric is the
		// wrong query, not a histogram to sum.
		if n, ok := res.Metric["__name__"]; ok && n != bucketName {
			return Histogram{}, fmt.Errorf("the Prometheus answer for %s holds %s, not %s", name, n, bucketName)
		}
		le, ok := res.Metric["le"]
		if !ok {
			return Histogram{}, fmt.Errorf("the Prometheus answer for %s has a series without le %v: query %s_bucket", name, res.Metric, name)
		}
		bound, err := strconv.ParseFloat(le, 64) // "+Inf" parses as +Inf
		if err != nil {
			return Histogram{}, fmt.Errorf("the Prometheus answer for %s: le %q: %w", name, le, err)
		}
		sample := res.Value
		if ans.Data.ResultType == "matrix" {
			if len(res.Values) == 0 {
				continue
			}
			// Buckets are cumulative counters: the last value holds every observation.
			sample = res.Values[len(res.Values)-1]
		}
		count, err := sampleValue(sample)
		if err != nil {
			return Histogram{}, fmt.Errorf("the Prometheus answer for %s: %w", name, err)
		}
		labels := make([]*dto.LabelPair, 0, len(res.Metric))
		for k, v := range res.Metric {
			if k != "le" && k != "__name__" {
				labels = append(labels, &dto.LabelPair{Name: &k, Value: &v})
			}
		}
		acc.add(seriesKey(labels), bound, count)
	}
	return acc.histogram()
}

// sampleValue reads the API's [ <unix_time>, "<sample_value>" ] pair.
func sampleValue(pair []any) (float64, error) {
	if len(pair) != 2 {
		return 0, fmt.Errorf("sample %v: want [time, \"value\"]", pair)
	}
	s, ok := pair[1].(string)
	if !ok {
		return 0, fmt.Errorf("sample %v: the value is not a string", pair)
	}
	return strconv.ParseFloat(s, 64)
}

type accumulator struct {
	name     string
	byBound  map[float64]float64
	bySeries map[string]float64
}

func newAccumulator(name string) *accumulator {
	return &accumulator{name: name, byBound: map[float64]float64{}, bySeries: map[string]float64{}}
}

func (a *accumulator) add(series string, bound, count float64) {
	a.byBound[bound] += count
	if math.IsInf(bound, 1) {
		a.bySeries[series] += count
	}
}

func (a *accumulator) histogram() (Histogram, error) {
	if len(a.byBound) == 0 {
		return Histogram{}, fmt.Errorf("no %s buckets", a.name)
	}
	if _, ok := a.byBound[math.Inf(1)]; !ok {
		return Histogram{}, fmt.Errorf("%s has no +Inf bucket: every series must carry one", a.name)
	}
	h := Histogram{Name: a.name, SeriesCounts: a.bySeries}
	for bound, count := range a.byBound {
		h.Buckets = append(h.Buckets, Bucket{UpperBound: bound, Count: count})
	}
	sort.Slice(h.Buckets, func(i, j int) bool { return h.Buckets[i].UpperBound < h.Buckets[j].UpperBound })
	return h, nil
}

// Count is the number of observations (the +Inf bucket).
func (h Histogram) Count() float64 { return h.Buckets[len(h.Buckets)-1].Count }

// Quantile is the q-quantile by linear interpolation within the bucket that holds it, as
// PromQL's histogram_quantile does. inTail is true when that bucket is the +Inf one: the
// value returned is then the highest finite bound, a lower bound on the quantile, because
// the histogram cannot say how far the tail goes.
func (h Histogram) Quantile(q float64) (seconds float64, inTail bool, err error) {
	if q <= 0 || q > 1 {
		return 0, false, fmt.Errorf("quantile %v: want 0 < q <= 1", q)
	}
	total := h.Count()
	if total <= 0 {
		return 0, false, fmt.Errorf("%s has no observations", h.Name)
	}
	rank := q * total
	lowerBound, lowerCount := 0.0, 0.0
	for _, b := range h.Buckets {
		if b.Count >= rank {
			if math.IsInf(b.UpperBound, 1) {
				return lowerBound, true, nil
			}
			if b.Count == lowerCount {
				return b.UpperBound, false, nil
			}
			return lowerBound + (b.UpperBound-lowerBound)*(rank-lowerCount)/(b.Count-lowerCount), false, nil
		}
		lowerBound, lowerCount = b.UpperBound, b.Count
	}
	return lowerBound, true, nil
}

// Summary says how much evidence the histogram holds for the quantile asked: observations,
// buckets, series and their counts, whether the quantile falls in the top bucket, and whether
// there are too few observations for it.
func (h Histogram) Summary(q float64) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %g observations in %d buckets over %d series", h.Name, h.Count(), len(h.Buckets), len(h.SeriesCounts))
	keys := make([]string, 0, len(h.SeriesCounts))
	for k := range h.SeriesCounts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if len(keys) > 1 {
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = fmt.Sprintf("%s %g", k, h.SeriesCounts[k])
		}
		fmt.Fprintf(&b, " (%s)", strings.Join(parts, ", "))
	}
	if v, tail, err := h.Quantile(q); err == nil {
		if tail {
			fmt.Fprintf(&b, "; p%s is past the last finite bound %gs: a top bucket that holds the tail, the quantile is at least %gs and the histogram cannot say more", percent(q), v, v)
		} else {
			fmt.Fprintf(&b, "; p%s %.3gs", percent(q), v)
		}
	}
	if warn := tooFew(int(h.Count()), q); warn != "" {
		b.WriteString("; " + warn)
	}
	return b.String()
}
