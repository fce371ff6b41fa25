package mesh

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"math"
	"sync"

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

// LineFamily reads one line of the Prometheus text format: the family a HELP or TYPE comment
// names (sample false), or the metric name of a sample (sample true); ok is false for a blank
// line, another comment, or a line with no name. name is part of line: a filter reads every
// line of a large answer, and looks names up without a copy.
func LineFamily(line []byte) (name []byte, sample, ok bool) {
	trimmed := bytes.TrimLeft(line, " \t")
	if len(trimmed) == 0 {
		return nil, false, false
	}
	if trimmed[0] == '#' {
		rest := bytes.TrimLeft(trimmed[1:], " \t")
		end := bytes.IndexAny(rest, " \t")
		if end < 0 || (string(rest[:end]) != "HELP" && string(rest[:end]) != "TYPE") {
			return nil, false, false
		}
		rest = bytes.TrimLeft(rest[end:], " \t")
		if end := bytes.IndexAny(rest, " \t"); end >= 0 {
			rest = rest[:end]
		}
		return rest, false, len(rest) > 0
	}
	end := bytes.IndexAny(trimmed, "{ \t")
	if end <= 0 {
		return nil, false, false
	}
	return trimmed[:end], true, true
}

// LineFilter keeps, line by line as it reads, the few lines of a /metrics answer a backend
// parses: a sidecar's or an app's metrics grow with what the app calls and links, and parsing
// all of it would make a preStop hook's memory grow with them.
type LineFilter struct {
	// MaxLine bounds one line as read.
	MaxLine int
	// MaxKept bounds what is kept, and so the parser's memory; KeptTooLarge is the error when
	// a kept line would pass it.
	MaxKept      int
	KeptTooLarge error
	// Keep is what to keep of a line (without its newline), nil to drop it.
	Keep func(line []byte) []byte
	// Check, if set, sees every line before Keep: an error ends the read with it, so that an
	// answer in no metrics format is not read as one that holds nothing.
	Check func(line []byte) error
	// TooLong decides a line longer than MaxLine from its first MaxLine bytes: nil skips the
	// line, an error ends the read with it.
	TooLong func(head []byte) error
}

// Filter reads r to its end and returns the kept lines, each ending in a newline. It fails
// as TooLong or KeptTooLarge say, and with r's own error (a body over its cap, a context that
// ended).
func (f LineFilter) Filter(r io.Reader) (*bytes.Buffer, error) {
	br := lineReader(r, f.MaxLine)
	defer func() {
		br.Reset(nil) // the pool keeps the buffer, not what it read
		lineReaders.Put(br)
	}()
	var kept bytes.Buffer
	for {
		line, err := br.ReadSlice('\n')
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			if stop := f.TooLong(line); stop != nil {
				return nil, stop
			}
			err = skipLine(br)
		case len(line) == 0:
			// The end of r, right after a newline.
		default:
			line = bytes.TrimSuffix(line, []byte("\n"))
			if f.Check != nil {
				if bad := f.Check(line); bad != nil {
					return nil, bad
				}
			}
			keep := f.Keep(line)
			if keep == nil {
				break
			}
			if kept.Len()+len(keep)+1 > f.MaxKept {
				return nil, f.KeptTooLarge
			}
			kept.Write(keep)
			kept.WriteByte('\n')
		}
		if err == io.EOF {
			return &kept, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// lineReaders are the filters' read buffers, kept from poll to poll: a preStop polls every
// 200 ms, and each buffer is as long as the longest line a filter reads (64 KiB).
var lineReaders sync.Pool

// lineReader is a pooled reader of r whose buffer holds size bytes.
func lineReader(r io.Reader, size int) *bufio.Reader {
	if br, ok := lineReaders.Get().(*bufio.Reader); ok && br.Size() == size {
		br.Reset(r)
		return br
	}
	return bufio.NewReaderSize(r, size)
}

// skipLine reads to the end of a line too long for the buffer.
func skipLine(br *bufio.Reader) error {
	for {
		_, err := br.ReadSlice('\n')
		if !errors.Is(err, bufio.ErrBufferFull) {
			return err
		}
	}
}
