package envoysim

import (
	"math"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
)

// statType is Envoy's stat kind; it decides the Prometheus TYPE and the output order.
type statType int

const (
	typeCounter statType = iota
	typeGauge
	typeHistogram
)

func (t statType) String() string {
	switch t {
	case typeCounter:
		return "counter"
	case typeGauge:
		return "gauge"
	default:
		return "histogram"
	}
}

// label is one extracted tag: a Prometheus label.
type label struct{ name, value string }

// stat is one Envoy stat. Values are atomics so the proxy's hot path takes no lock; a nil
// *stat is a stat the inclusion list rejected, and every method on it is a no-op, as Envoy's
// null stats are.
type stat struct {
	name   string // the Envoy name, which /stats prints and filter matches
	typ    statType
	value  atomic.Uint64
	used   atomic.Bool
	hist   *histogram
	custom bool // a custom-namespace stat (istiocustom.*): no envoy_ prefix in Prometheus

	// The tag-extracted name and labels are computed on first use: a big mesh has 100k+
	// stats and most of them are never rendered in Prometheus format.
	tagOnce sync.Once
	tags    *tagExtractor
	tagged  string // tag-extracted name, before sanitising
	labels  []label
}

// tagsOf returns the tag-extracted name and labels.
func (s *stat) tagsOf() (string, []label) {
	s.tagOnce.Do(func() {
		if s.tags != nil {
			s.tagged, s.labels = s.tags.extract(s.name)
		}
	})
	return s.tagged, s.labels
}

func (s *stat) inc() { s.add(1) }

func (s *stat) add(n uint64) {
	if s == nil {
		return
	}
	s.value.Add(n)
	s.used.Store(true)
}

// dec leaves the used flag as it is, as Envoy's Gauge::sub does (allocator.cc): only add
// and set mark a stat used.
func (s *stat) dec() {
	if s == nil {
		return
	}
	s.value.Add(^uint64(0))
}

func (s *stat) set(n uint64) {
	if s == nil {
		return
	}
	s.value.Store(n)
	s.used.Store(true)
}

func (s *stat) get() uint64 {
	if s == nil {
		return 0
	}
	return s.value.Load()
}

func (s *stat) record(v float64) {
	if s == nil || s.hist == nil {
		return
	}
	s.hist.record(v)
	s.used.Store(true)
}

// stats is a set of stats updated together (a stat and its per-worker copy, say).
type stats []*stat

func (ss stats) inc() {
	for _, s := range ss {
		s.inc()
	}
}

func (ss stats) dec() {
	for _, s := range ss {
		s.dec()
	}
}

// histogramBuckets are Envoy's default histogram bucket bounds (milliseconds for times).
var histogramBuckets = []float64{0.5, 1, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000, 300000, 600000, 1800000, 3600000}

// supportedQuantiles are the quantiles /stats prints for histograms, in percent.
var supportedQuantiles = []float64{0, 25, 50, 75, 90, 95, 99, 99.5, 99.9, 100}

// histogram keeps bucket counts and a bounded sample for quantiles: enough for /stats to look
// like Envoy's, which is all a test double needs.
type histogram struct {
	mu      sync.Mutex
	buckets []uint64
	count   uint64
	sum     float64
	samples []float64
}

const histogramSampleCap = 4096

func newHistogram() *histogram { return &histogram{buckets: make([]uint64, len(histogramBuckets))} }

func (h *histogram) record(v float64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for i, b := range histogramBuckets {
		if v <= b {
			h.buckets[i]++
		}
	}
	h.count++
	h.sum += v
	if len(h.samples) < histogramSampleCap {
		h.samples = append(h.samples, v)
	}
}

type histogramSnapshot struct {
	buckets   []uint64 // cumulative, per bound
	count     uint64
	sum       float64
	quantiles []float64 // per supportedQuantiles; NaN when empty
}

func (h *histogram) snapshot() histogramSnapshot {
	h.mu.Lock()
	defer h.mu.Unlock()
	snap := histogramSnapshot{buckets: append([]uint64(nil), h.buckets...), count: h.count, sum: h.sum}
	sorted := append([]float64(nil), h.samples...)
	sort.Float64s(sorted)
	for _, q := range supportedQuantiles {
		if len(sorted) == 0 {
			snap.quantiles = append(snap.quantiles, math.NaN())
			continue
		}
		i := int(math.Round(q / 100 * float64(len(sorted)-1)))
		snap.quantiles = append(snap.quantiles, sorted[i])
	}
	return snap
}

func (h *histogram) reset() {
	h.mu.Lock()
	defer h.mu.Unlock()
	clear(h.buckets)
	h.count, h.sum, h.samples = 0, 0, nil
}

// store is the sidecar's stat store: creation applies the inclusion list and computes the
// tag-extracted name once, like Envoy's symbol table does.
type store struct {
	tags    *tagExtractor
	include func(name string) bool

	mu     sync.Mutex
	byName map[string]*stat
	sorted []*stat // by Envoy name; nil when a stat was added since the last sort
}

func newStore(tags *tagExtractor, include func(string) bool) *store {
	return &store{tags: tags, include: include, byName: map[string]*stat{}}
}

func (st *store) counter(name string) *stat   { return st.get(name, typeCounter, nil) }
func (st *store) gauge(name string) *stat     { return st.get(name, typeGauge, nil) }
func (st *store) histogram(name string) *stat { return st.get(name, typeHistogram, nil) }

// customCounter creates a stat whose tags are given rather than extracted, as Istio's stats
// filter does for istio_requests_total: its text name is the namespace, the metric and every
// tag name and value joined by dots.
func (st *store) customCounter(namespace, metric string, labels []label) *stat {
	return st.custom(namespace, metric, labels, typeCounter)
}

type customTags struct {
	metric string
	labels []label
}

func (st *store) get(name string, typ statType, custom *customTags) *stat {
	st.mu.Lock()
	defer st.mu.Unlock()
	if s, ok := st.byName[name]; ok {
		return s
	}
	if !st.include(name) {
		return nil
	}
	s := &stat{name: name, typ: typ}
	if typ == typeHistogram {
		s.hist = newHistogram()
	}
	if custom != nil {
		s.tagged, s.labels, s.custom = custom.metric, custom.labels, true
	} else {
		s.tags = st.tags
	}
	st.byName[name] = s
	st.sorted = nil
	return s
}

// all returns every stat sorted by Envoy name.
func (st *store) all() []*stat {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.sorted == nil {
		st.sorted = make([]*stat, 0, len(st.byName))
		for _, s := range st.byName {
			st.sorted = append(st.sorted, s)
		}
		sort.Slice(st.sorted, func(i, j int) bool { return st.sorted[i].name < st.sorted[j].name })
	}
	return st.sorted
}

// resetCounters zeroes every counter and histogram, as a restarted Envoy would show them.
// Gauges keep their values: they describe the present, not history.
func (st *store) resetCounters() {
	for _, s := range st.all() {
		switch s.typ {
		case typeCounter:
			s.value.Store(0)
		case typeHistogram:
			s.hist.reset()
		}
	}
}

// telemetryV2Counter is istio_requests_total as Istio <= 1.16's stats plugin names it: every
// tag as name=.=value;.; then the metric (istio/proxy extensions/stats). Its Prometheus form
// is the same as the native stats' one.
func (st *store) telemetryV2Counter(metric string, labels []label) *stat {
	var b strings.Builder
	for _, l := range labels {
		b.WriteString(l.name + "=.=" + l.value + ";.;")
	}
	b.WriteString(metric)
	return st.get(b.String(), typeCounter, &customTags{metric: metric, labels: labels})
}

// customGauge is customCounter for a gauge (istio_build).
func (st *store) customGauge(namespace, metric string, labels []label) *stat {
	return st.custom(namespace, metric, labels, typeGauge)
}

func (st *store) custom(namespace, metric string, labels []label, kind statType) *stat {
	parts := []string{namespace, metric}
	for _, l := range labels {
		// An empty value leaves only the tag name in the text name, as Istio writes it.
		parts = append(parts, l.name)
		if l.value != "" {
			parts = append(parts, l.value)
		}
	}
	return st.get(strings.Join(parts, "."), kind, &customTags{metric: metric, labels: labels})
}
