// Package lag reads how late a fleet's clients learn that a pod is going away, from the two
// places it is already written down: meshdrain's own final events in any log export, and the
// Prometheus histograms kube-proxy and istiod export (docs: domain.md §8). It only parses:
// fetching logs or querying Prometheus is the caller's business, so that every format is
// pinned by a fixture (testdata/README.md names their sources).
package lag

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"regexp"
	"sort"
	"strings"
)

// EvidenceLastArrival is the only per-drain evidence today's final event carries: the last
// moment a request (or a new connection, without a mesh) reached the pod, from the preStop's
// start. It is an upper bound on when the last client learnt for an uncensored drain.
const EvidenceLastArrival = "last-arrival"

// What cut a drain's wait before the clients could show they had learnt: its sample is then
// censored, a lower bound on the lag rather than a measure of it.
const (
	CutDeadline = "deadline"  // reason=deadline: the deadline came first
	CutLagBound = "lag-bound" // window_term=lag-bound: the stop came from --eds-lag-bound, not from the clients
)

// Sample is one drain's lag: the seconds from the preStop's start to the last evidence that a
// client learnt of the removal.
type Sample struct {
	Seconds  float64
	Evidence string
	// Censored is true when CutBy is set: the clients might have sent later had the wait gone on.
	Censored bool
	CutBy    string
	Reason   string
	// Mesh is the --mesh of the drain, from the final event or its "drain started" event on
	// the same stream; "" when neither is in the export.
	Mesh string
	// LagBound is the --eds-lag-bound the drain used, in seconds; 0 when none.
	LagBound float64
	// Source says where the line came from: the kubectl --prefix ("pod/NAME/CONTAINER") when
	// there was one.
	Source string
}

// Samples are the drains read from one or more exports, in the order they were read.
type Samples []Sample

// Skipped counts the records that gave no sample, so that a summary can say how much of the
// export was meshdrain's.
type Skipped struct {
	// NotMeshdrain: lines that are not meshdrain's events (application logs, other JSON).
	NotMeshdrain int
	// OtherEvents: meshdrain's events other than the final one (phases, "drain started").
	OtherEvents int
	// Malformed: final events without a usable last_arrival_ms.
	Malformed int
}

// Total is every record skipped.
func (s Skipped) Total() int { return s.NotMeshdrain + s.OtherEvents + s.Malformed }

const finalMessage = "drain finished"

// kubectlPrefix is what `kubectl logs --prefix` writes before each line.
var kubectlPrefix = regexp.MustCompile(`^\[([^\]]+)\] `)

// rfc3339Stamp is what `kubectl logs --timestamps` (and most exporters) write before a line.
var rfc3339Stamp = regexp.MustCompile(`^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2}) `)

// wrapperKeys are the fields log exporters keep the original line in: Loki's "line",
// CloudWatch's "message", Elasticsearch's _source.message or _source.log (and Docker's
// json-file "log").
var wrapperKeys = []string{"line", "message", "log"}

type reader struct {
	samples Samples
	skipped Skipped
	// meshBySource is the --mesh of the last "drain started" event seen on each stream.
	meshBySource map[string]string
}

// ReadEvents reads meshdrain's final events from a log export: `kubectl logs` with or without
// --prefix and --timestamps, JSON lines that wrap each line (Loki, CloudWatch, Elasticsearch,
// Docker), or one JSON document holding many (a CloudWatch filter-log-events answer, an
// Elasticsearch search answer, a Loki query answer). Whatever is not meshdrain's final event
// is counted in Skipped.
func ReadEvents(r io.Reader) (Samples, Skipped, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, Skipped{}, fmt.Errorf("read log export: %w", err)
	}
	rd := &reader{meshBySource: map[string]string{}}
	if values, ok := jsonStream(data); ok {
		for _, v := range values {
			rd.record(v, "")
		}
		return rd.samples, rd.skipped, nil
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64*1024), 16*1024*1024)
	for sc.Scan() {
		if strings.TrimSpace(sc.Text()) == "" {
			continue
		}
		rd.line(sc.Text(), "")
	}
	if err := sc.Err(); err != nil {
		return nil, Skipped{}, fmt.Errorf("read log export: %w", err)
	}
	return rd.samples, rd.skipped, nil
}

// jsonStream decodes the whole input as a stream of JSON values (JSON lines, or one document
// pretty-printed over many lines); false when any part is not JSON (kubectl's text lines).
func jsonStream(data []byte) ([]any, bool) {
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 || (trimmed[0] != '{' && trimmed[0] != '[') {
		return nil, false
	}
	dec := json.NewDecoder(bytes.NewReader(trimmed))
	dec.UseNumber()
	var out []any
	for {
		var v any
		err := dec.Decode(&v)
		if err == io.EOF {
			return out, true
		}
		if err != nil {
			return nil, false
		}
		out = append(out, v)
	}
}

// line reads one text line: prefixes stripped, then the JSON object it carries.
func (rd *reader) line(text, source string) {
	text = strings.TrimRight(text, "\r\n")
	if m := kubectlPrefix.FindStringSubmatch(text); m != nil {
		source, text = m[1], text[len(m[0]):]
	}
	text = rfc3339Stamp.ReplaceAllString(text, "")
	// Other exporters put their own prefix (a timestamp in another layout, a stream name):
	// the event starts at the first '{' that opens a JSON object.
	for i := strings.IndexByte(text, '{'); i >= 0; {
		dec := json.NewDecoder(strings.NewReader(text[i:]))
		dec.UseNumber()
		var v map[string]any
		if dec.Decode(&v) == nil {
			rd.record(v, source)
			return
		}
		next := strings.IndexByte(text[i+1:], '{')
		if next < 0 {
			break
		}
		i += 1 + next
	}
	rd.skipped.NotMeshdrain++
}

// walk reads one JSON value: a meshdrain event, or a wrapper holding lines or events. It
// says whether the value held any record, so that a wrapper's own fields (Loki's labels, an
// Elasticsearch answer's shards) are not counted as skipped lines.
func (rd *reader) walk(v any, source string) bool {
	switch val := v.(type) {
	case map[string]any:
		if _, isEvent := val["msg"]; isEvent && val["component"] != nil {
			rd.event(val, source)
			return true
		}
		held := false
		for _, k := range wrapperKeys {
			if s, ok := val[k].(string); ok {
				rd.line(s, source)
				held = true
			}
		}
		for _, child := range val {
			switch child.(type) {
			case map[string]any, []any:
				held = rd.walk(child, source) || held
			}
		}
		return held
	case []any:
		held := false
		for _, child := range val {
			if c, ok := child.(string); ok {
				// Loki's query answer keeps [timestamp, line] pairs: only a string that
				// can hold an event is a line.
				if strings.Contains(c, "{") {
					rd.line(c, source)
					held = true
				}
				continue
			}
			held = rd.walk(child, source) || held
		}
		return held
	}
	return false
}

// record reads one top-level value; one that holds no record is a line that is not
// meshdrain's.
func (rd *reader) record(v any, source string) {
	if !rd.walk(v, source) {
		rd.skipped.NotMeshdrain++
	}
}

// event reads one structured event.
func (rd *reader) event(ev map[string]any, source string) {
	msg, _ := ev["msg"].(string)
	if ev["component"] != "prestop" && msg != finalMessage {
		rd.skipped.NotMeshdrain++
		return
	}
	if msg != finalMessage {
		if msg == "drain started" {
			if mesh := startedMesh(ev); mesh != "" {
				rd.meshBySource[source] = mesh
			}
		}
		rd.skipped.OtherEvents++
		return
	}
	lastMs, ok := number(ev["last_arrival_ms"])
	if !ok || lastMs < 0 {
		rd.skipped.Malformed++
		return
	}
	s := Sample{Seconds: lastMs / 1000, Evidence: EvidenceLastArrival, Source: source}
	s.Reason, _ = ev["reason"].(string)
	switch {
	case s.Reason == CutDeadline:
		s.CutBy = CutDeadline
	case ev["window_term"] == CutLagBound:
		s.CutBy = CutLagBound
	}
	s.Censored = s.CutBy != ""
	if mesh, ok := ev["mesh"].(string); ok {
		s.Mesh = mesh
	} else {
		s.Mesh = rd.meshBySource[source]
	}
	if bound, ok := number(ev["lag_bound_ms"]); ok {
		s.LagBound = bound / 1000
	} else if bound, ok := number(ev["eds_lag_bound_ms"]); ok {
		s.LagBound = bound / 1000
	}
	rd.samples = append(rd.samples, s)
}

// startedMesh is the --mesh recorded in a "drain started" event's settings.
func startedMesh(ev map[string]any) string {
	settings, _ := ev["settings"].(map[string]any)
	mesh, _ := settings["mesh"].(map[string]any)
	value, _ := mesh["value"].(string)
	return value
}

func number(v any) (float64, bool) {
	switch n := v.(type) {
	case json.Number:
		f, err := n.Float64()
		return f, err == nil && !math.IsNaN(f)
	case float64:
		return n, true
	}
	return 0, false
}

// Censored counts the samples whose wait was cut.
func (s Samples) Censored() int {
	n := 0
	for _, x := range s {
		if x.Censored {
			n++
		}
	}
	return n
}

// Quantile is the empirical q-quantile of the samples' seconds (the smallest value with at
// least q of the samples at or below it), censored samples counted at their cut value: a
// lower bound on the fleet's quantile when any are censored.
func (s Samples) Quantile(q float64) (float64, error) {
	if len(s) == 0 {
		return 0, fmt.Errorf("no samples")
	}
	if q <= 0 || q > 1 {
		return 0, fmt.Errorf("quantile %v: want 0 < q <= 1", q)
	}
	values := make([]float64, len(s))
	for i, x := range s {
		values[i] = x.Seconds
	}
	sort.Float64s(values)
	rank := int(math.Ceil(q*float64(len(values)))) - 1
	return values[max(rank, 0)], nil
}

// Summary says how much evidence there was for the quantile asked.
func (s Samples) Summary(q float64, skipped Skipped) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d drains read (%d samples of %s, %d censored: %d by the deadline, %d by the lag bound); %d records skipped (%d not meshdrain's, %d other meshdrain events, %d malformed)",
		len(s), len(s), EvidenceLastArrival, s.Censored(), s.cutBy(CutDeadline), s.cutBy(CutLagBound),
		skipped.Total(), skipped.NotMeshdrain, skipped.OtherEvents, skipped.Malformed)
	if v, err := s.Quantile(q); err == nil {
		fmt.Fprintf(&b, "; p%s %.3gs", percent(q), v)
		if s.Censored() > 0 {
			b.WriteString(" (a lower bound: censored samples count at their cut)")
		}
	}
	if warn := tooFew(len(s), q); warn != "" {
		b.WriteString("; " + warn)
	}
	return b.String()
}

func (s Samples) cutBy(cut string) int {
	n := 0
	for _, x := range s {
		if x.CutBy == cut {
			n++
		}
	}
	return n
}

// MinSamples is how many observations a q-quantile needs before it is more than a guess: ten
// expected observations beyond it, 10/(1−q) (100 for p90, 1,000 for p99).
func MinSamples(q float64) int {
	if q >= 1 {
		return math.MaxInt
	}
	return int(math.Ceil(10/(1-q) - 1e-9))
}

// tooFew is the warning for n observations and the q asked; "" when there are enough.
func tooFew(n int, q float64) string {
	need := MinSamples(q)
	if n >= need {
		return ""
	}
	return fmt.Sprintf("too few samples for p%s: %d, want at least %d (10/(1-q)): the quantile is a guess", percent(q), n, need)
}

func percent(q float64) string {
	return strings.TrimSuffix(strings.TrimRight(fmt.Sprintf("%.4f", q*100), "0"), ".")
}
