// Package appmetrics reads the app's own request counter from its Prometheus metrics on the
// pod's loopback (prestop --mesh none --app-metrics). Without a sidecar, the kernel shows
// connections and the data on them, per client; the app's counter shows requests, whatever
// carried them, and its labels can leave the kubelet's probes and the metrics scrapes out. The
// kernel backend (mesh/kernel) counts what the counter adds to what the kernel saw.
//
// Only one counter is read, so only its lines are parsed: the rest of an app's /metrics (a
// JVM's or a Go runtime's hundreds of series) is skipped line by line as it is read.
package appmetrics

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/meshdrain/meshdrain/pkg/localhttp"
	"github.com/meshdrain/meshdrain/pkg/mesh"
)

// DefaultCounter is --app-requests's default: the name Prometheus's own naming guide and most
// client libraries' HTTP middleware use for a request counter.
const DefaultCounter = "http_requests_total"

const (
	// maxBody bounds what one /metrics answer may transfer: an app's metrics are kilobytes to
	// a few MiB; anything near this is something else answering.
	maxBody = 16 << 20
	// maxKept bounds the counter's own lines kept for parsing.
	maxKept = 1 << 20
	// maxLine bounds one line.
	maxLine = 64 << 10
	// accept asks for the classic text format, which every client library serves; a library
	// that answers OpenMetrics instead is read too (the parser takes its samples as untyped).
	accept = "text/plain;version=0.0.4;q=1,*/*;q=0.1"
)

// Options tune a Source.
type Options struct {
	// Timeout bounds one read, the body included (default 1s).
	Timeout time.Duration
	// AllowRemote accepts a URL that is not the pod's loopback.
	AllowRemote bool
	// Dial, when set, makes the connections the loopback guard allows (tests).
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
}

// Source is the app's request counter at one URL. Safe for concurrent use.
type Source struct {
	target localhttp.Target
	sel    Selector
	http   localhttp.Doer
	opts   Options

	// requests serializes Requests: a reading applied out of order would look like a reset.
	requests sync.Mutex
	mu       sync.Mutex
	// own are the local addresses of the connections the source made, newest last: on one of
	// the app's ports, they are the hook's own and never a client's (Own).
	own []netip.AddrPort
	// series are the matching series' values at the latest read by Requests, and counted
	// their increases since its first.
	series  map[string]float64
	counted float64
}

// maxOwn is how many of its connections a source remembers: with keep-alive it makes one at
// a time, and a few hundred cover an app that closes every one.
const maxOwn = 256

// New checks the URL (localhttp.Syntax: the pod's loopback or a unix socket unless
// AllowRemote) and the selector; nothing is read until Read.
func New(rawURL string, sel Selector, opts Options) (*Source, error) {
	target, err := localhttp.Parse(rawURL, opts.AllowRemote)
	if err != nil {
		return nil, err
	}
	if opts.Timeout <= 0 {
		opts.Timeout = time.Second
	}
	s := &Source{target: target, sel: sel, opts: opts}
	s.http = localhttp.NewClient(target, localhttp.Options{AllowRemote: opts.AllowRemote, KeepAlive: true, Dial: s.dial})
	return s, nil
}

// dial connects and remembers the connection's local address.
func (s *Source) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	dial := s.opts.Dial
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	c, err := dial(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	if local, err := netip.ParseAddrPort(c.LocalAddr().String()); err == nil {
		s.mu.Lock()
		s.own = append(s.own, netip.AddrPortFrom(local.Addr().Unmap(), local.Port()))
		if len(s.own) > maxOwn {
			s.own = s.own[len(s.own)-maxOwn:]
		}
		s.mu.Unlock()
	}
	return c, nil
}

// Own says whether a connection from remote (as the app's side sees it) is one of the
// source's own reads of the metrics: when the metrics are served on a port meshdrain
// watches, the hook's own connections are never a client's.
func (s *Source) Own(remote netip.AddrPort) bool {
	remote = netip.AddrPortFrom(remote.Addr().Unmap(), remote.Port())
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Contains(s.own, remote)
}

// URL is the metrics URL as logs show it (credentials redacted).
func (s *Source) URL() string { return s.target.String() }

// Selector is the counter read.
func (s *Source) Selector() Selector { return s.sel }

// Reading is one read of the counter.
type Reading struct {
	// Total is the sum of the series that match the selector.
	Total float64
	// Series is how many series of the counter the answer had, Matched how many matched.
	Series, Matched int
	// matched are the matching series' values, by their labels.
	matched map[string]float64
}

// GrewByOne names the one matching series that grew by exactly one since prev, when the
// total did too: what a counter that counts the reads of the metrics themselves shows
// between two reads with no request in between ("" when it is not so).
func (r Reading) GrewByOne(prev Reading) string {
	if r.Total-prev.Total != 1 {
		return ""
	}
	for labels, v := range r.matched {
		if v-prev.matched[labels] == 1 {
			return labels
		}
	}
	return ""
}

// Requests is what the counter counted since the first call: the sum of its matching series'
// increases, as Prometheus's increase() takes them. A series that went back was reset and
// counts its new value; a series first seen counts its value (client libraries create a
// labelled series at its first request); a series gone counts nothing more.
func (s *Source) Requests(ctx context.Context) (float64, error) {
	s.requests.Lock()
	defer s.requests.Unlock()
	r, err := s.Read(ctx)
	if err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.series != nil {
		for labels, v := range r.matched {
			prev, seen := s.series[labels]
			switch {
			case !seen || v < prev:
				s.counted += v
			default:
				s.counted += v - prev
			}
		}
	}
	s.series = r.matched
	return s.counted, nil
}

// Read fetches the metrics and sums the counter.
func (s *Source) Read(ctx context.Context) (Reading, error) {
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	var r Reading
	err := localhttp.Exchange(ctx, acceptText{s.http}, s.target, http.MethodGet, "", s.target.URL.RawQuery, func(resp *http.Response, endpoint string) error {
		if resp.StatusCode != http.StatusOK {
			return localhttp.NewStatusError(http.MethodGet, endpoint, resp)
		}
		var err error
		if r, err = s.sel.read(localhttp.LimitBody(resp.Body, maxBody)); err != nil {
			return fmt.Errorf("GET %s: %w", endpoint, err)
		}
		return nil
	})
	return r, err
}

// acceptText asks every request for the text format.
type acceptText struct{ localhttp.Doer }

func (a acceptText) Do(req *http.Request) (*http.Response, error) {
	req.Header.Set("Accept", accept)
	return a.Doer.Do(req)
}

// ErrNotACounter is a --app-requests that names a series the app types as something else.
var ErrNotACounter = errors.New("not a request counter")

// read sums the selector's counter in a metrics answer. The counter's TYPE line, when there
// is one, must make it a count: a counter (or untyped), or the _count of a histogram or
// summary (Spring Boot's http_server_requests_seconds_count); a gauge, a bucket or a sum is
// refused.
func (s Selector) read(r io.Reader) (Reading, error) {
	kept, types, err := s.filter(r)
	if err != nil {
		return Reading{}, err
	}
	if err := s.checkType(types); err != nil {
		return Reading{}, err
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(kept)
	if err != nil {
		return Reading{}, fmt.Errorf("parse the metrics: %w", err)
	}
	reading := Reading{matched: map[string]float64{}}
	for _, m := range families[s.Name].GetMetric() {
		reading.Series++
		if !s.Matches(m) {
			continue
		}
		v := mesh.Value(m)
		if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
			return Reading{}, fmt.Errorf("%s%s is %v: not a count", s.Name, labelsOf(m), v)
		}
		reading.Matched++
		reading.Total += v
		reading.matched[labelsOf(m)] = v
	}
	return reading, nil
}

// filter keeps the counter's sample lines only, without their TYPE line (so the parser takes
// a histogram's _count as a series of its own), and returns the TYPE of every family the
// name could belong to. Another family's long line (a HELP text, a label full of values) is
// skipped; the counter's own cannot be read whole.
func (s Selector) filter(r io.Reader) (io.Reader, map[string]string, error) {
	types := map[string]string{}
	lines := mesh.LineFilter{
		MaxLine:      maxLine,
		MaxKept:      maxKept,
		KeptTooLarge: fmt.Errorf("the series of %s exceed %d bytes", s.Name, maxKept),
		Keep: func(line []byte) []byte {
			trimmed := bytes.TrimSpace(line)
			switch {
			case len(trimmed) == 0:
			case trimmed[0] == '#':
				if f := bytes.Fields(trimmed[1:]); len(f) >= 3 && string(f[0]) == "TYPE" && s.family(string(f[1])) {
					types[string(f[1])] = string(f[2])
				}
			case string(sampleName(trimmed)) == s.Name:
				return sampleOnly(trimmed)
			}
			return nil
		},
		TooLong: func(head []byte) error {
			if string(sampleName(bytes.TrimSpace(head))) == s.Name {
				return fmt.Errorf("a line of %s is longer than %d KiB", s.Name, maxLine>>10)
			}
			return nil
		},
	}
	kept, err := lines.Filter(r)
	if err != nil {
		return nil, nil, err
	}
	return kept, types, nil
}

// sampleOnly is a sample line's name, labels and value, without what may follow the value:
// a timestamp (OpenMetrics writes it in seconds, with a fraction, which the text parser
// refuses) and an exemplar (" # {trace_id=...} 1").
func sampleOnly(line []byte) []byte {
	at := len(sampleName(line))
	if at < len(line) && line[at] == '{' {
		at = labelsEnd(line, at)
	}
	for at < len(line) && (line[at] == ' ' || line[at] == '\t') {
		at++
	}
	for at < len(line) && line[at] != ' ' && line[at] != '\t' {
		at++
	}
	return line[:at]
}

// labelsEnd is the index just after the label set that opens at open: its quoted values may
// hold anything, '}' and '#' included.
func labelsEnd(line []byte, open int) int {
	inQuote := false
	for i := open + 1; i < len(line); i++ {
		switch c := line[i]; {
		case inQuote && c == '\\':
			i++
		case c == '"':
			inQuote = !inQuote
		case !inQuote && c == '}':
			return i + 1
		}
	}
	return len(line)
}

// labelsOf is a series' labels as a selector writes them.
func labelsOf(m *dto.Metric) string {
	parts := make([]string, 0, len(m.GetLabel()))
	for _, l := range m.GetLabel() {
		parts = append(parts, l.GetName()+"="+strconv.Quote(l.GetValue()))
	}
	return "{" + strings.Join(parts, ",") + "}"
}

// sampleName is the metric name a sample line starts with.
func sampleName(line []byte) []byte {
	if end := bytes.IndexAny(line, "{ \t"); end >= 0 {
		return line[:end]
	}
	return line
}

// countSuffixes are what a family's name gains in its count samples.
var countSuffixes = []string{"_count", "_total"}

// family says whether a TYPE line for name can be the counter's: its own, or that of the
// histogram, summary or OpenMetrics counter its name extends.
func (s Selector) family(name string) bool {
	if name == s.Name {
		return true
	}
	for _, suffix := range append(countSuffixes, "_sum", "_bucket") {
		if s.Name == name+suffix {
			return true
		}
	}
	return false
}

func (s Selector) checkType(types map[string]string) error {
	if t, ok := types[s.Name]; ok {
		switch t {
		case "counter", "untyped", "unknown":
			return nil
		case "histogram", "summary":
			return fmt.Errorf("%s is a %s: %w; name its count, %s_count", s.Name, t, ErrNotACounter, s.Name)
		default:
			return fmt.Errorf("%s is a %s: %w", s.Name, t, ErrNotACounter)
		}
	}
	for base, t := range types {
		suffix := strings.TrimPrefix(s.Name, base)
		switch {
		case suffix == "_count" && (t == "histogram" || t == "summary" || t == "gaugehistogram"):
		case suffix == "_total" && t == "counter":
		default:
			return fmt.Errorf("%s is the %s of a %s (%s): %w", s.Name, strings.TrimPrefix(suffix, "_"), t, base, ErrNotACounter)
		}
	}
	return nil
}
