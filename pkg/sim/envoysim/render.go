package envoysim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"net/url"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// statsFormat is the /stats output format.
type statsFormat string

const (
	formatText       statsFormat = "text"
	formatJSON       statsFormat = "json"
	formatPrometheus statsFormat = "prometheus"
)

// statsParams are the /stats query parameters (Envoy source/server/admin/stats_params.cc).
type statsParams struct {
	usedOnly bool
	filter   *regexp.Regexp
	format   statsFormat
	types    map[statType]bool // nil: all
}

// queryParams parses a query string as Envoy does: "+" stays "+" (only %XX is decoded), and a
// key without "=" is present with an empty value. The first value of a key wins.
func queryParams(rawQuery string) map[string]string {
	params := map[string]string{}
	for _, part := range strings.Split(rawQuery, "&") {
		if part == "" {
			continue
		}
		key, value, _ := strings.Cut(part, "=")
		if k, err := url.PathUnescape(key); err == nil {
			key = k
		}
		if v, err := url.PathUnescape(value); err == nil {
			value = v
		}
		if _, dup := params[key]; !dup {
			params[key] = value
		}
	}
	return params
}

// parseStatsParams returns the parameters, or the 400 body Envoy answers with.
func parseStatsParams(params map[string]string, format statsFormat) (statsParams, string) {
	p := statsParams{format: format}
	_, p.usedOnly = params["usedonly"]
	if f, ok := params["filter"]; ok {
		re, err := regexp.Compile(f)
		if err != nil {
			return p, "Invalid re2 regex"
		}
		p.filter = re
	}
	if t, ok := params["type"]; ok {
		switch t {
		case "Counters":
			p.types = map[statType]bool{typeCounter: true}
		case "Gauges":
			p.types = map[statType]bool{typeGauge: true}
		case "Histograms":
			p.types = map[statType]bool{typeHistogram: true}
		case "TextReadouts":
			p.types = map[statType]bool{}
		case "All":
		default:
			return p, "invalid &type= param"
		}
	}
	if f, ok := params["format"]; ok && format == formatText {
		switch f {
		case "text":
			p.format = formatText
		case "json":
			p.format = formatJSON
		case "prometheus":
			p.format = formatPrometheus
		default:
			return p, "usage: /stats?format=(html|active-html|json|prometheus|text)\n\n"
		}
	}
	return p, ""
}

// selected reports whether s is part of the answer. filter matches the Envoy name, never the
// Prometheus name, whatever the format (envoyproxy/envoy#10927).
func (p statsParams) selected(s *stat) bool {
	if p.types != nil && !p.types[s.typ] {
		return false
	}
	if p.usedOnly && !s.used.Load() {
		return false
	}
	if p.filter != nil && !p.filter.MatchString(s.name) {
		return false
	}
	return true
}

// renderStats writes the selected stats in the requested format and returns the content type.
func renderStats(all []*stat, p statsParams) ([]byte, string) {
	var selected []*stat
	for _, s := range all {
		if p.selected(s) {
			selected = append(selected, s)
		}
	}
	switch p.format {
	case formatJSON:
		return renderJSON(selected), "application/json"
	case formatPrometheus:
		return renderPrometheus(selected), "text/plain; charset=UTF-8"
	default:
		return renderText(selected), "text/plain; charset=UTF-8"
	}
}

// renderText writes "name: value" lines sorted by name, counters and gauges together, then the
// histograms.
func renderText(selected []*stat) []byte {
	var b bytes.Buffer
	for _, s := range selected {
		if s.typ != typeHistogram {
			fmt.Fprintf(&b, "%s: %d\n", s.name, s.get())
		}
	}
	for _, s := range selected {
		if s.typ == typeHistogram {
			fmt.Fprintf(&b, "%s: %s\n", s.name, histogramText(s.hist.snapshot()))
		}
	}
	return b.Bytes()
}

func histogramText(h histogramSnapshot) string {
	if h.count == 0 {
		return "No recorded values"
	}
	parts := make([]string, len(supportedQuantiles))
	for i, q := range supportedQuantiles {
		parts[i] = fmt.Sprintf("P%s(nan,%s)", strconv.FormatFloat(q, 'f', -1, 64), formatFloat(h.quantiles[i]))
	}
	return strings.Join(parts, " ")
}

func formatFloat(v float64) string {
	if math.IsNaN(v) {
		return "nan"
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}

// renderJSON writes Envoy's {"stats":[...]} document.
func renderJSON(selected []*stat) []byte {
	type value struct {
		Name  string `json:"name"`
		Value uint64 `json:"value"`
	}
	type quantileValue struct {
		Interval   *float64 `json:"interval"`
		Cumulative *float64 `json:"cumulative"`
	}
	type computed struct {
		Name   string          `json:"name"`
		Values []quantileValue `json:"values"`
	}
	entries := []any{}
	var hist []computed
	for _, s := range selected {
		if s.typ != typeHistogram {
			entries = append(entries, value{Name: s.name, Value: s.get()})
			continue
		}
		snap := s.hist.snapshot()
		c := computed{Name: s.name}
		for _, q := range snap.quantiles {
			qv := quantileValue{}
			if !math.IsNaN(q) {
				q := q
				qv.Cumulative = &q
			}
			c.Values = append(c.Values, qv)
		}
		hist = append(hist, c)
	}
	if len(hist) > 0 {
		entries = append(entries, map[string]any{"histograms": map[string]any{
			"supported_quantiles": supportedQuantiles,
			"computed_quantiles":  hist,
		}})
	}
	out, _ := json.Marshal(map[string]any{"stats": entries})
	return append(out, '\n')
}

// renderPrometheus writes one family per tag-extracted name with a "# TYPE" line (no HELP):
// counters first, then gauges, then histograms, each group sorted by metric name; a stat
// without tags is written "name{} value".
func renderPrometheus(selected []*stat) []byte {
	type family struct {
		name  string
		typ   statType
		stats []*stat
	}
	families := map[string]*family{}
	for _, s := range selected {
		name := s.promName()
		f, ok := families[name]
		if !ok {
			f = &family{name: name, typ: s.typ}
			families[name] = f
		}
		f.stats = append(f.stats, s)
	}
	ordered := make([]*family, 0, len(families))
	for _, f := range families {
		ordered = append(ordered, f)
	}
	sort.Slice(ordered, func(i, j int) bool {
		if ordered[i].typ != ordered[j].typ {
			return ordered[i].typ < ordered[j].typ
		}
		return ordered[i].name < ordered[j].name
	})
	var b bytes.Buffer
	for _, f := range ordered {
		fmt.Fprintf(&b, "# TYPE %s %s\n", f.name, f.typ)
		sort.SliceStable(f.stats, func(i, j int) bool {
			_, li := f.stats[i].tagsOf()
			_, lj := f.stats[j].tagsOf()
			return formatLabels(li, "") < formatLabels(lj, "")
		})
		for _, s := range f.stats {
			_, labels := s.tagsOf()
			if s.typ != typeHistogram {
				fmt.Fprintf(&b, "%s{%s} %d\n", f.name, formatLabels(labels, ""), s.get())
				continue
			}
			snap := s.hist.snapshot()
			for i, bound := range histogramBuckets {
				fmt.Fprintf(&b, "%s_bucket{%s} %d\n", f.name, formatLabels(labels, formatFloat(bound)), snap.buckets[i])
			}
			fmt.Fprintf(&b, "%s_bucket{%s} %d\n", f.name, formatLabels(labels, "+Inf"), snap.count)
			fmt.Fprintf(&b, "%s_sum{%s} %s\n", f.name, formatLabels(labels, ""), formatFloat(snap.sum))
			fmt.Fprintf(&b, "%s_count{%s} %d\n", f.name, formatLabels(labels, ""), snap.count)
		}
	}
	return b.Bytes()
}

// formatLabels writes labels as Prometheus does, with le last when given.
func formatLabels(labels []label, le string) string {
	parts := make([]string, 0, len(labels)+1)
	for _, l := range labels {
		parts = append(parts, promLabelName(l.name)+`="`+escapeLabelValue(l.value)+`"`)
	}
	if le != "" {
		parts = append(parts, `le="`+le+`"`)
	}
	return strings.Join(parts, ",")
}

// labelValueEscaper escapes what the Prometheus text format requires in label values.
var labelValueEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)

func escapeLabelValue(v string) string { return labelValueEscaper.Replace(v) }
