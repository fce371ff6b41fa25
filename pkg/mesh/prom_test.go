package mesh

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

var errLong, errLarge = errors.New("long"), errors.New("large")

// keepAll keeps every line, skips a long one unless it starts with "stop".
func keepAll(maxLine, maxKept int) LineFilter {
	return LineFilter{
		MaxLine: maxLine, MaxKept: maxKept, KeptTooLarge: errLarge,
		Keep: func(line []byte) []byte { return line },
		TooLong: func(head []byte) error {
			if bytes.HasPrefix(head, []byte("stop")) {
				return errLong
			}
			return nil
		},
	}
}

func TestLineFilter(t *testing.T) {
	for _, c := range []struct {
		in, want string
		err      error
	}{
		{"a 1\nb 2", "a 1\nb 2\n", nil},
		{"a 1\n\nb 2\n", "a 1\n\nb 2\n", nil},
		{"a 1\n" + strings.Repeat("x", 40) + "\nb 2\n", "a 1\nb 2\n", nil},
		{"a 1\n" + strings.Repeat("x", 40), "a 1\n", nil},
		{"a 1\nstop" + strings.Repeat("x", 40) + "\nb 2\n", "", errLong},
		// 32 bytes may be kept: 8 lines of 4.
		{strings.Repeat("abc\n", 8), strings.Repeat("abc\n", 8), nil},
		{strings.Repeat("abc\n", 8) + "d", "", errLarge},
	} {
		kept, err := keepAll(16, 32).Filter(strings.NewReader(c.in))
		if !errors.Is(err, c.err) {
			t.Errorf("%q: error %v, want %v", c.in, err, c.err)
			continue
		}
		if err == nil && kept.String() != c.want {
			t.Errorf("%q: kept %q, want %q", c.in, kept.String(), c.want)
		}
	}
}

func TestLineFilterDropsWhatKeepRefuses(t *testing.T) {
	f := keepAll(16, 32)
	f.Keep = func(line []byte) []byte {
		if bytes.HasPrefix(line, []byte("#")) {
			return nil
		}
		return bytes.TrimSpace(line)
	}
	kept, err := f.Filter(strings.NewReader("# HELP a\n  a 1 \n# TYPE a\n"))
	if err != nil || kept.String() != "a 1\n" {
		t.Errorf("kept %q, %v", kept, err)
	}
}

// Keeping every line, the filter gives back its input with a newline at the end, less the
// lines too long to read whole.
func FuzzLineFilter(f *testing.F) {
	f.Add("a 1\nb 2")
	f.Add("a 1\n" + strings.Repeat("x", 40) + "\n")
	f.Fuzz(func(t *testing.T, in string) {
		const maxLine = 16
		lines := keepAll(maxLine, 1<<20)
		lines.TooLong = func([]byte) error { return nil }
		kept, err := lines.Filter(strings.NewReader(in))
		if err != nil {
			t.Fatal(err)
		}
		var want strings.Builder
		for _, line := range strings.SplitAfter(in, "\n") {
			if line == "" || len(line) > maxLine || (len(line) == maxLine && !strings.HasSuffix(line, "\n")) {
				continue
			}
			want.WriteString(strings.TrimSuffix(line, "\n") + "\n")
		}
		if kept.String() != want.String() {
			t.Errorf("kept %q, want %q", kept, want.String())
		}
	})
}

func TestLineFamily(t *testing.T) {
	for _, tc := range []struct {
		line       string
		name       string
		sample, ok bool
	}{
		{`# TYPE envoy_cluster_upstream_rq_total counter`, "envoy_cluster_upstream_rq_total", false, true},
		{`# HELP request_total Total count of HTTP requests.`, "request_total", false, true},
		{"#\tHELP\trequest_total\tTotal.", "request_total", false, true},
		{`envoy_cluster_upstream_rq_total{cluster_name="inbound|8080||"} 7`, "envoy_cluster_upstream_rq_total", true, true},
		{`  process_start_time_seconds 1.7e9`, "process_start_time_seconds", true, true},
		{`# EOF`, "", false, false},
		{`# a comment`, "", false, false},
		{`# TYPE`, "", false, false},
		{``, "", false, false},
		{`{} 1`, "", false, false},
		{`stat.without.value:`, "", false, false},
	} {
		name, sample, ok := LineFamily([]byte(tc.line))
		if string(name) != tc.name || sample != tc.sample || ok != tc.ok {
			t.Errorf("LineFamily(%q) = %q, %v, %v; want %q, %v, %v", tc.line, name, sample, ok, tc.name, tc.sample, tc.ok)
		}
	}
}
