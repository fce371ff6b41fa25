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

// EvidenceLastArrival is the per-drain evidence every final event carries: the last moment a
// request (or a new connection, without a mesh) reached the pod, from the preStop's start. It
// is an upper bound on when the last client learnt for an uncensored drain, and the only
// sample of a drain whose event lists no client (written before clients_learnt, or by a
// backend that cannot name its clients' learning: Linkerd).
const EvidenceLastArrival = "last-arrival"

// The per-client evidence of the final event's clients_learnt (pkg/hook/drain's Evidence*,
// the one definition; a test holds these to it): when one client learnt, from the preStop's
// start.
const (
	EvidenceLetGo             = "let-go"              // it closed its idle pooled connection itself (a sidecar's socket table)
	EvidenceLastNewConnection = "last-new-connection" // no mesh: its last new connection (routed per connection)
	EvidenceLastRequest       = "last-request"        // no mesh: its last request on a kept connection (a pool routing per request)
)

// What cut a drain's wait before the clients could show they had learnt: its samples are then
// censored, lower bounds on the lag rather than measures of it.
const (
	CutDeadline = "deadline"  // reason=deadline: the deadline came first
	CutLagBound = "lag-bound" // window_term=lag-bound: the stop came from --eds-lag-bound, not from the clients
)

// Sample is one client's lag, or one drain's where the event lists no client: the seconds
// from the preStop's start to the evidence that it learnt of the removal.
type Sample struct {
	Seconds  float64
	Evidence string
	// Drain says which drain the sample is of: the final events' order in the export, from 0.
	// A drain's clients share it.
	Drain int
	// Client is the client's address; "" for a drain's last-arrival sample and for Unlisted.
	Client string
	// Unlisted: a client the event counted (clients_learnt_total) but did not list (only the
	// latest are), taken at its drain's earliest listed value. It learnt no later than that:
	// an over-estimate of its lag.
	Unlisted bool
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

// Samples are the clients and drains read from one or more exports, in the order they were
// read.
type Samples []Sample

// Skipped counts the records that gave no sample, so that a summary can say how much of the
// export was meshdrain's.
type Skipped struct {
	// NotMeshdrain: lines that are not meshdrain's events (application logs, other JSON).
	NotMeshdrain int
	// OtherEvents: meshdrain's events other than the final one (phases, "drain started").
	OtherEvents int
	// Malformed: final events with neither a listed client nor a usable last_arrival_ms.
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
	// drains counts the final events read: the next one's Sample.Drain.
	drains int
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
	drain := Sample{Drain: rd.drains, Source: source}
	drain.Reason, _ = ev["reason"].(string)
	drain.CutBy = cutOf(ev, drain.Reason)
	drain.Censored = drain.CutBy != ""
	if mesh, ok := ev["mesh"].(string); ok {
		drain.Mesh = mesh
	} else {
		drain.Mesh = rd.meshBySource[source]
	}
	if bound, ok := number(ev["lag_bound_ms"]); ok {
		drain.LagBound = bound / 1000
	} else if bound, ok := number(ev["eds_lag_bound_ms"]); ok {
		drain.LagBound = bound / 1000
	}
	if clients := learnt(ev, drain); len(clients) > 0 {
		rd.samples = append(rd.samples, clients...)
		rd.drains++
		return
	}
	lastMs, ok := number(ev["last_arrival_ms"])
	if !ok || lastMs < 0 {
		rd.skipped.Malformed++
		return
	}
	drain.Seconds, drain.Evidence = lastMs/1000, EvidenceLastArrival
	rd.samples = append(rd.samples, drain)
	rd.drains++
}

// cutOf is what cut a drain's wait: the event's cut_by where it has one, else what its reason
// and window term say (events written before cut_by).
func cutOf(ev map[string]any, reason string) string {
	if cut, ok := ev["cut_by"].(string); ok {
		return cut
	}
	switch {
	case reason == CutDeadline:
		return CutDeadline
	case ev["window_term"] == CutLagBound:
		return CutLagBound
	}
	return ""
}

// learnt is one sample per client of the event's clients_learnt, each a copy of drain with
// its seconds, evidence and address, and, for the clients counted but not listed
// (clients_learnt_total beyond the list), one each at the earliest listed value: the event
// keeps the latest learners, so the others learnt no later than that. None when the event
// lists no client with a usable time (the caller then takes last_arrival_ms).
func learnt(ev map[string]any, drain Sample) Samples {
	list, _ := ev["clients_learnt"].([]any)
	var out Samples
	earliest, earliestEvidence := math.Inf(1), ""
	for _, entry := range list {
		c, _ := entry.(map[string]any)
		seconds, ok := number(c["s"])
		if !ok || seconds < 0 {
			continue
		}
		s := drain
		s.Seconds = seconds
		s.Client, _ = c["client"].(string)
		s.Evidence, _ = c["evidence"].(string)
		out = append(out, s)
		if seconds < earliest {
			earliest, earliestEvidence = seconds, s.Evidence
		}
	}
	if len(out) == 0 {
		return nil
	}
	total, _ := number(ev["clients_learnt_total"])
	for range max(int(total)-len(list), 0) {
		s := drain
		s.Seconds, s.Evidence, s.Unlisted = earliest, earliestEvidence, true
		out = append(out, s)
	}
	return out
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

// drainsOf are the drains the samples come from, each once, in the order read.
func (s Samples) drainsOf() []Sample {
	var drains []Sample
	seen := map[int]bool{}
	for _, x := range s {
		if !seen[x.Drain] {
			seen[x.Drain] = true
			drains = append(drains, x)
		}
	}
	return drains
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

// Summary says how much evidence there was for the quantile asked: drains and clients apart,
// since a drain that lists its clients gives one sample each, and one that does not gives one
// sample of its last arrival.
func (s Samples) Summary(q float64, skipped Skipped) string {
	drains := s.drainsOf()
	var clients, unlisted, byArrival int
	perClient := map[int]bool{}
	for _, x := range s {
		switch {
		case x.Evidence == EvidenceLastArrival:
			byArrival++
		default:
			clients++
			perClient[x.Drain] = true
			if x.Unlisted {
				unlisted++
			}
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d drains read (%d censored: %d by the deadline, %d by the lag bound); %d samples: %d clients of %d drains from clients_learnt",
		len(drains), Samples(drains).Censored(), Samples(drains).cutBy(CutDeadline), Samples(drains).cutBy(CutLagBound),
		len(s), clients, len(perClient))
	if unlisted > 0 {
		fmt.Fprintf(&b, " (%d not listed, counted at their drain's earliest listed time: an over-estimate)", unlisted)
	}
	fmt.Fprintf(&b, ", %d drains by their %s; %d records skipped (%d not meshdrain's, %d other meshdrain events, %d malformed)",
		byArrival, EvidenceLastArrival, skipped.Total(), skipped.NotMeshdrain, skipped.OtherEvents, skipped.Malformed)
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
