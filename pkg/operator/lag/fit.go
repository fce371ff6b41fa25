package lag

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/meshdrain/meshdrain/pkg/hook/risk"
)

// KindEvents names a source of meshdrain's final events; a histogram source is named by its
// metric (KubeProxyProgramming, IstiodConvergence, or UnnamedHistogram).
const KindEvents = "meshdrain events"

// UnnamedHistogram names a Prometheus answer whose _bucket series carry no __name__ (a
// `sum by (le)` query): a histogram all the same, of a metric the answer does not say.
const UnnamedHistogram = "_bucket series without __name__"

// Source is one --lag-from input as read: meshdrain's final events, or one histogram (a
// scrape holding both metrics gives two sources of the same name).
type Source struct {
	// Name is how the operator named it: a path, or "-" for stdin.
	Name string
	// Kind is KindEvents or the histogram's metric.
	Kind      string
	Samples   Samples
	Skipped   Skipped
	Histogram *Histogram
}

// Histograms the sniffer knows, in the order a scrape holding both is read.
var histogramNames = []string{KubeProxyProgramming, IstiodConvergence}

// ReadSource reads one --lag-from input, telling its kind from its content so that the
// operator need not: a Prometheus HTTP API answer (JSON with a resultType) or a text scrape
// holding one of the two histograms is a histogram; anything else is a log export, of which
// the lines that are not meshdrain's are counted in Skipped.
func ReadSource(name string, r io.Reader) ([]Source, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	var metrics []string
	switch {
	case isAPIAnswer(data):
		metrics = []string{UnnamedHistogram}
		for _, m := range histogramNames {
			if bytes.Contains(data, []byte(`"`+m+`_bucket"`)) {
				metrics = []string{m}
			}
		}
		if metrics[0] == UnnamedHistogram && bytes.Contains(data, []byte(`"__name__"`)) {
			return nil, fmt.Errorf("%s: a Prometheus answer for neither %s nor %s: query one's _bucket series", name, KubeProxyProgramming, IstiodConvergence)
		}
	default:
		for _, m := range histogramNames {
			if exposes(data, m) {
				metrics = append(metrics, m)
			}
		}
	}
	if len(metrics) == 0 {
		samples, skipped, err := ReadEvents(bytes.NewReader(data))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		return []Source{{Name: name, Kind: KindEvents, Samples: samples, Skipped: skipped}}, nil
	}
	var out []Source
	for _, m := range metrics {
		h, err := ReadHistogram(bytes.NewReader(data), m)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		out = append(out, Source{Name: name, Kind: m, Histogram: &h})
	}
	return out, nil
}

var apiResultType = regexp.MustCompile(`"resultType"\s*:`)

func isAPIAnswer(data []byte) bool {
	trimmed := bytes.TrimSpace(data)
	return len(trimmed) > 0 && trimmed[0] == '{' && bytes.Contains(trimmed, []byte(`"status"`)) && apiResultType.Match(trimmed)
}

// exposes says whether a text scrape carries the histogram name: its TYPE line or a sample
// of its buckets at the start of a line (a log line that only mentions the name does not).
func exposes(data []byte, name string) bool {
	for _, line := range bytes.Split(data, []byte("\n")) {
		line = bytes.TrimSpace(line)
		if bytes.HasPrefix(line, []byte("# TYPE "+name+" ")) || bytes.HasPrefix(line, []byte(name+"_bucket")) {
			return true
		}
	}
	return false
}

// Summary is how much evidence a fit rests on.
type Summary struct {
	// Drains are the meshdrain final events read.
	Drains int
	// Clients are the clients whose lag the events measured: each client a drain's
	// clients_learnt counts, and one (its last arrival) for a drain that lists none.
	Clients int
	// Nodes are the distinct nodes the evidence comes from: a histogram's instance or node
	// label values (a scrape without either is one node), an export's kubectl --prefix
	// sources (pods).
	Nodes int
	// Observations are the fit's sample size: the drains' samples plus the histograms'
	// observations.
	Observations float64
	// Censored are the drains whose wait was cut (a lower bound on their clients' lag); Tail the
	// histograms' observations past their last finite bound.
	Censored int
	Tail     float64
	// Skipped are the records of the log exports that gave no sample.
	Skipped Skipped
	// Need is the quantile the caller needs, and TooFew the warning when Observations are
	// fewer than MinSamples(Need); "" when there are enough.
	Need   float64
	TooFew string
}

// String is the summary in one line.
func (s Summary) String() string {
	return fmt.Sprintf("%d drains, %d clients, %d nodes, %g observations, %d censored, %d records skipped",
		s.Drains, s.Clients, s.Nodes, s.Observations, s.Censored, s.Skipped.Total())
}

// FitPoint is one point of the fitted distribution and what it comes from.
type FitPoint struct {
	risk.Point
	From string
}

// Fit is the lag distribution the evidence supports, with what it rests on.
type Fit struct {
	Dist    risk.Distribution
	Points  []FitPoint
	Summary Summary
	// Warnings say where the fit is weaker than it looks: too few observations for the
	// quantile needed, censored drains, a top bucket that holds the tail.
	Warnings []string
}

// fitQuantiles are the inner points a fit places where the evidence supports them
// (MinSamples): the median, and each tail quantile a rule may ask for.
var fitQuantiles = []float64{0.5, 0.9, 0.99, 0.999, 0.9999}

// NewFit fits the lag distribution of the sources, for a caller that needs its need-quantile
// (1 − risk). All sources pool into one empirical distribution: each drain is an atom at its
// lag (a censored one at its cut, a lower bound), each histogram bucket spreads its
// observations evenly over its bounds, and a +Inf bucket's sit at the last finite bound (a
// lower bound too: the histogram says nothing past it). The distribution's points are 0 at
// the least lag, the quantiles that have at least MinSamples observations, and 1 at the
// greatest lag observed (from a histogram: the top finite bound of a bucket that holds
// observations). Each lag is rounded up to the millisecond, which --lag-dist keeps.
func NewFit(sources []Source, need float64) (Fit, error) {
	if need <= 0 || need >= 1 {
		return Fit{}, fmt.Errorf("quantile %v: want 0 < q < 1", need)
	}
	s, pool := summarise(sources)
	s.Need = need
	if s.Observations <= 0 {
		return Fit{}, fmt.Errorf("no lag evidence: no meshdrain final event and no histogram observation (%d records skipped)", s.Skipped.Total())
	}
	f := Fit{Summary: s, Points: fitPoints(&pool, s.Observations, need, s.Tail > 0)}
	points := make([]risk.Point, len(f.Points))
	for i, p := range f.Points {
		points[i] = p.Point
	}
	dist, err := risk.New(points)
	if err != nil {
		return Fit{}, fmt.Errorf("fit: %w", err)
	}
	f.Dist = dist
	f.Summary.TooFew = tooFew(int(s.Observations), need)
	if f.Summary.TooFew != "" {
		f.Warnings = append(f.Warnings, fmt.Sprintf("%s; the fit's tail past its last supported point is the straight line to the greatest lag observed", f.Summary.TooFew))
	}
	if s.Censored > 0 {
		f.Warnings = append(f.Warnings, fmt.Sprintf("%d of %d drains were cut (by the deadline or the lag bound) before their clients showed they had learnt: each counts at its cut, a lower bound on its lag",
			s.Censored, s.Drains))
	}
	if s.Tail > 0 {
		f.Warnings = append(f.Warnings, fmt.Sprintf("%g histogram observations are past the last finite bucket bound %s: they count at it, and the tail past it is unknown",
			s.Tail, ceilMs(pool.topFinite)))
	}
	return f, nil
}

// summarise pools the sources' observations and counts the evidence they hold.
func summarise(sources []Source) (Summary, pooled) {
	pool := pooled{}
	var s Summary
	nodes := map[string]bool{}
	for i, src := range sources {
		if src.Histogram != nil {
			pool.addHistogram(*src.Histogram)
			s.Tail += src.Histogram.Buckets[len(src.Histogram.Buckets)-1].Count - topFiniteCount(*src.Histogram)
			for _, n := range src.Histogram.Nodes() {
				if n == "" {
					n = fmt.Sprintf("#%d %s", i, src.Name) // one unlabelled scrape: one node
				}
				nodes["histogram "+n] = true
			}
			continue
		}
		drains := Samples(src.Samples.drainsOf())
		s.Drains += len(drains)
		s.Clients += len(src.Samples)
		s.Censored += drains.Censored()
		s.Skipped.NotMeshdrain += src.Skipped.NotMeshdrain
		s.Skipped.OtherEvents += src.Skipped.OtherEvents
		s.Skipped.Malformed += src.Skipped.Malformed
		for _, x := range src.Samples {
			pool.atoms = append(pool.atoms, x.Seconds)
			if x.Source != "" {
				nodes["events "+x.Source] = true
			}
		}
	}
	s.Nodes = len(nodes)
	s.Observations = pool.total()
	sort.Float64s(pool.atoms)
	return s, pool
}

// fitPoints are the distribution's points: 0 at the least lag, each quantile (need among
// them) that observations support, and 1 at the greatest lag (tail: a histogram's +Inf
// bucket holds observations past it), each with where it comes from.
func fitPoints(pool *pooled, observations, need float64, tail bool) []FitPoint {
	lo, hi := pool.bounds()
	points := []FitPoint{{risk.Point{Q: 0, At: ceilMs(lo)}, "the least lag observed"}}
	qs := append([]float64(nil), fitQuantiles...)
	if !containsFloat(qs, need) {
		qs = append(qs, need)
		sort.Float64s(qs)
	}
	for _, q := range qs {
		n := MinSamples(q)
		if observations < float64(n) {
			continue
		}
		at := ceilMs(pool.quantile(q, lo, hi))
		last := points[len(points)-1]
		if at >= ceilMs(hi) || at < last.At {
			continue
		}
		points = append(points, FitPoint{risk.Point{Q: q, At: at}, fmt.Sprintf("p%s of %g observations (≥ %d needed)", percent(q), observations, n)})
	}
	top := "the greatest lag observed"
	if tail {
		top = "the top finite bucket bound (a lower bound: the +Inf bucket holds observations)"
	} else if pool.hasHistogram && (len(pool.atoms) == 0 || hi > pool.atoms[len(pool.atoms)-1]) {
		top = "the top finite bound of a bucket that holds observations"
	}
	return append(points, FitPoint{risk.Point{Q: 1, At: ceilMs(hi)}, top})
}

// pooled is every observation of the sources: the drains' atoms and the histograms' buckets.
type pooled struct {
	atoms        []float64
	buckets      []spread
	hasHistogram bool
	// topFinite is the highest finite bound of a histogram whose +Inf bucket holds
	// observations (0: none does).
	topFinite float64
}

// spread is count observations spread evenly over [lo, hi].
type spread struct{ lo, hi, count float64 }

func (p *pooled) addHistogram(h Histogram) {
	p.hasHistogram = true
	lower, below := 0.0, 0.0
	for _, b := range h.Buckets {
		count := b.Count - below
		if math.IsInf(b.UpperBound, 1) {
			if count > 0 {
				// Past the last finite bound: at it, a lower bound.
				p.buckets = append(p.buckets, spread{lower, lower, count})
				p.topFinite = math.Max(p.topFinite, lower)
			}
			break
		}
		if count > 0 {
			p.buckets = append(p.buckets, spread{math.Min(lower, b.UpperBound), b.UpperBound, count})
		}
		lower, below = b.UpperBound, b.Count
	}
}

func (p pooled) total() float64 {
	n := float64(len(p.atoms))
	for _, b := range p.buckets {
		n += b.count
	}
	return n
}

// bounds are the least and the greatest lag the observations reach.
func (p pooled) bounds() (lo, hi float64) {
	lo, hi = math.Inf(1), 0
	if len(p.atoms) > 0 {
		lo, hi = p.atoms[0], p.atoms[len(p.atoms)-1]
	}
	for _, b := range p.buckets {
		lo, hi = math.Min(lo, b.lo), math.Max(hi, b.hi)
	}
	return lo, hi
}

// cdf is the share of the observations at or below x.
func (p pooled) cdf(x float64) float64 {
	n := float64(sort.Search(len(p.atoms), func(i int) bool { return p.atoms[i] > x }))
	for _, b := range p.buckets {
		switch {
		case x >= b.hi:
			n += b.count
		case x > b.lo:
			n += b.count * (x - b.lo) / (b.hi - b.lo)
		}
	}
	return n / p.total()
}

// quantile is the least lag with a share q of the observations at or below it, to a
// microsecond: for drains alone, the empirical quantile Samples.Quantile gives.
func (p pooled) quantile(q, lo, hi float64) float64 {
	if p.cdf(lo) >= q {
		return lo
	}
	for hi-lo > 1e-7 {
		mid := lo + (hi-lo)/2
		if p.cdf(mid) >= q {
			hi = mid
		} else {
			lo = mid
		}
	}
	return math.Round(hi*1e6) / 1e6
}

func topFiniteCount(h Histogram) float64 {
	if len(h.Buckets) < 2 {
		return 0
	}
	return h.Buckets[len(h.Buckets)-2].Count
}

// ceilMs is seconds as a duration rounded up to the millisecond: --lag-dist's precision,
// rounded the way that keeps the fit on the late side.
func ceilMs(seconds float64) time.Duration {
	us := math.Round(seconds * 1e6) // the quantile's own precision
	return time.Duration(math.Ceil(us/1e3)) * time.Millisecond
}

func containsFloat(xs []float64, x float64) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

// nodeLabels match the labels that name a histogram series' node, most specific first.
var nodeLabels = []*regexp.Regexp{
	regexp.MustCompile(`[{,]node=("(?:[^"\\]|\\.)*")`),
	regexp.MustCompile(`[{,]instance=("(?:[^"\\]|\\.)*")`),
}

// Nodes are the distinct node names of the histogram's series (their node label, else their
// instance label); "" stands for series that carry neither, such as a single kube-proxy's own
// /metrics page.
func (h Histogram) Nodes() []string {
	seen := map[string]bool{}
	for key := range h.SeriesCounts {
		seen[seriesNode(key)] = true
	}
	out := make([]string, 0, len(seen))
	for n := range seen {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// seriesNode reads the node of a series key as seriesKey writes it ({a="x",b="y"}).
func seriesNode(key string) string {
	for _, re := range nodeLabels {
		if m := re.FindStringSubmatch(key); m != nil {
			if v, err := strconv.Unquote(m[1]); err == nil {
				return v
			}
			return strings.Trim(m[1], `"`)
		}
	}
	return ""
}
