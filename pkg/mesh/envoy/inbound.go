package envoy

import (
	"bytes"
	"errors"
	"fmt"
	"strings"

	"github.com/prometheus/common/model"

	"github.com/meshdrain/meshdrain/pkg/mesh"
)

// Envoy applies the stats filter meshdrain sends, so its answer to a drain's poll is small.
// Something else answering in its place, or an Envoy that ignores the filter, can send the
// whole 2 MiB the body cap allows, almost all of it other targets' series: parsed whole, that
// is some 13 MiB of live heap in a hook that shares the app container's memory limit. So a
// drain's reads keep, line by line, only what Normalise can read for its selection.
const (
	// maxKept bounds what is kept for parsing (about 14,000 series, some 7 MiB of heap):
	// the selected series of a sidecar are a few kilobytes.
	maxKept = 1 << 20
	// maxLine bounds one line: a sample line of Envoy's is well under a kilobyte.
	maxLine = 64 << 10
)

// errLineTooLong is a /stats/prometheus line longer than maxLine: not Envoy's output.
var errLineTooLong = errors.New("a /stats/prometheus line is longer than 64 KiB")

// adminRequestFamilies are the families AdminRequests reads, in both of their renderings.
var adminRequestFamilies = []string{"envoy_http_admin_downstream_rq_total", "envoy_http_downstream_rq_total"}

// inboundLines keeps the HELP and TYPE lines and the samples of the families Normalise and
// AdminRequests read, and of a targeted family only its first sample (its labels' names tell
// the naming) and those that mention one of sel's targets somewhere in their line. The
// normaliser checks the labels itself, so the filter can only keep too much, never drop a
// series Normalise would read. One filter reads one answer.
func inboundLines(sel mesh.Selector) mesh.LineFilter {
	mentions := targetMentions(sel)
	sampled := map[string]bool{}
	return mesh.LineFilter{
		MaxLine:      maxLine,
		MaxKept:      maxKept,
		KeptTooLarge: fmt.Errorf("the selected part of /stats/prometheus exceeds %d bytes", maxKept),
		Keep: func(line []byte) []byte {
			if keepStatsLine(line, mentions, sampled) {
				return line
			}
			return nil
		},
		TooLong: func([]byte) error { return errLineTooLong },
		Check:   checkStatsLine,
	}
}

// checkStatsLine refuses a line that is neither blank, nor a comment, nor a sample of a
// metric: the line a parse of the whole answer would have failed on first, whether or not
// the line is kept.
func checkStatsLine(line []byte) error {
	trimmed := bytes.TrimLeft(line, " \t")
	if len(trimmed) == 0 || trimmed[0] == '#' {
		return nil
	}
	end := bytes.IndexAny(trimmed, "{ \t")
	if end <= 0 || !model.IsValidLegacyMetricName(string(trimmed[:end])) {
		return fmt.Errorf("%w: %q", errNotStats, truncate(trimmed, 40))
	}
	return nil
}

// errNotStats is a line of an answer that is not Prometheus text.
var errNotStats = errors.New("not a Prometheus text line")

func truncate(b []byte, n int) []byte { return b[:min(len(b), n)] }

// targetMentions are the texts of which a selected series' line holds at least one: the
// admin prefix (AdminRequests), and sel's clusters and HTTP prefixes, or else Istio's inbound
// names (inbound|8080||, inbound_0.0.0.0_8080, envoy_http_inbound_...) and virtualInbound
// listener (0.0.0.0_15006).
func targetMentions(sel mesh.Selector) [][]byte {
	mentions := [][]byte{[]byte("admin")}
	if !generic(sel) {
		return append(mentions, []byte("inbound"), []byte("_"+virtualInboundPort))
	}
	for _, name := range append(append([]string{}, sel.Clusters...), sel.HTTPPrefixes...) {
		if strings.ContainsAny(name, "\\\"\n") {
			// Escaped in the label value: every targeted sample is kept.
			name = ""
		}
		mentions = append(mentions, []byte(name))
	}
	return mentions
}

// keepStatsLine decides one line: a comment by the family it names (# HELP name, # TYPE
// name), a sample by its metric name and, for a targeted family, whether it is the first
// (sampled has the families that had theirs) or has one of the mentions.
func keepStatsLine(line []byte, mentions [][]byte, sampled map[string]bool) bool {
	name, sample, ok := mesh.LineFamily(line)
	if !ok {
		return false
	}
	read, targeted := familyRead(name)
	if !read || !sample {
		return read
	}
	if !targeted || !sampled[string(name)] {
		sampled[string(name)] = true
		return true
	}
	for _, m := range mentions {
		if bytes.Contains(line, m) {
			return true
		}
	}
	return false
}

// familyRead says whether Normalise or AdminRequests reads a family, and whether its series
// name a target.
func familyRead(name []byte) (read, targeted bool) {
	if r, ok := familyReaders[string(name)]; ok {
		return true, r.targeted
	}
	if legacyHTTPName.Match(name) {
		return true, true
	}
	for _, admin := range adminRequestFamilies {
		if string(name) == admin {
			return true, false
		}
	}
	return false, false
}
