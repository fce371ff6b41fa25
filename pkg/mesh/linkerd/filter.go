package linkerd

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	"github.com/meshdrain/meshdrain/pkg/mesh"
)

// A proxy's /metrics cannot be filtered by the proxy (FIDELITY.md §1), and most of it is what
// meshdrain never reads: outbound series, which grow with the destinations the app calls,
// and latency histograms. Parsing all of it would make a preStop hook's memory grow with the
// mesh, so the client keeps, line by line as it reads, only the families Normalise reads and,
// of the families that have a direction, only the inbound series.
const (
	// maxKept bounds what is kept for parsing, and so the parser's memory (about 13,000
	// inbound series; parsing them peaks near 20 MiB of RSS, within a hook's 32 MiB): the
	// inbound series of a proxy with ten ports and a few hundred callers are a few hundred
	// kilobytes.
	maxKept = 1 << 20
	// maxLine bounds one line: a sample line with every label the proxy writes is well under
	// a kilobyte.
	maxLine = 64 << 10
)

// readFamilies are the families Normalise reads; directional ones are kept inbound only.
var readFamilies = map[string]bool{
	FamilyRequests: true, FamilyResponses: true, FamilyTCPOpened: true, FamilyTCPClosed: true, FamilyTCPOpen: true,
	FamilyHTTPRouteRequests: false, FamilyGRPCRouteRequests: false, FamilyRequestsV0: false, FamilyBuildInfo: false,
}

var inboundLabel = []byte(`direction="inbound"`)

// ErrLineTooLong is a /metrics line longer than maxLine: not a proxy's output.
var ErrLineTooLong = errors.New("a /metrics line is longer than 64 KiB")

// FilterMetrics reads a /metrics answer and returns what Normalise needs of it, in the same
// text format: the HELP and TYPE lines and the samples of readFamilies, directional samples
// only when inbound. A sample that mentions direction="inbound" anywhere is kept (the
// normaliser checks the label itself), so the filter can only keep too much, never drop an
// inbound series. It fails on a line longer than 64 KiB or more than 1 MiB kept, and with
// r's own error (a body over its cap, a context that ended).
func FilterMetrics(r io.Reader) (io.Reader, error) {
	kept, err := metricsFilter.Filter(r)
	if err != nil {
		return nil, err
	}
	return kept, nil
}

var metricsFilter = mesh.LineFilter{
	MaxLine:      maxLine,
	MaxKept:      maxKept,
	KeptTooLarge: fmt.Errorf("the inbound part of /metrics exceeds %d bytes", maxKept),
	Keep: func(line []byte) []byte {
		if keepLine(line) {
			return line
		}
		return nil
	},
	TooLong: func([]byte) error { return ErrLineTooLong },
}

// keepLine decides one line: a comment by the family it names (# HELP name, # TYPE name), a
// sample by its metric name and, for directional families, its direction.
func keepLine(line []byte) bool {
	name, sample, ok := mesh.LineFamily(line)
	if !ok {
		return false
	}
	directional, read := readFamilies[string(name)]
	if !read || !sample {
		return read
	}
	return !directional || bytes.Contains(line, inboundLabel)
}
