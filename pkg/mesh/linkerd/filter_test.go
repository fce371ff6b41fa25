package linkerd

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// The filter may only drop what Normalise never reads: every fixture normalises to the same
// snapshot with and without it, for every port selection.
func TestFilterKeepsWhatNormaliseReads(t *testing.T) {
	fixtures, err := filepath.Glob(filepath.Join("testdata", "*.prom"))
	if err != nil || len(fixtures) == 0 {
		t.Fatalf("fixtures: %v %v", fixtures, err)
	}
	texts := map[string]string{"modern": modern}
	for _, path := range fixtures {
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		texts[filepath.Base(path)] = string(raw)
	}
	for name, text := range texts {
		for _, sel := range []Selector{{}, {Ports: []int{8080}}, {IncludeProbes: true}, {AdminPort: 4191}} {
			whole := parseText(t, text, sel)
			kept, err := FilterMetrics(strings.NewReader(text))
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			filtered, err := Parse(kept, sel)
			if err != nil {
				t.Fatalf("%s filtered: %v", name, err)
			}
			if !reflect.DeepEqual(whole, filtered) {
				t.Errorf("%s %+v: filtered %+v\nwhole %+v", name, sel, filtered, whole)
			}
		}
	}
}

func TestFilterDropsOutboundAndOtherFamilies(t *testing.T) {
	kept, err := FilterMetrics(strings.NewReader(modern + "# HELP response_latency_ms x\n# TYPE response_latency_ms histogram\n" +
		`response_latency_ms_bucket{direction="inbound",le="1"} 3` + "\nno_newline_at_the_end 1"))
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(kept)
	text := string(raw)
	for _, gone := range []string{`direction="outbound"`, "response_latency_ms", "# EOF", "no_newline", "# HELP inbound_http_requests"} {
		if strings.Contains(text, gone) {
			t.Errorf("kept %q", gone)
		}
	}
	for _, kept := range []string{"inbound_http_requests_total{", "proxy_build_info{", `peer="dst"`, "# TYPE request_total counter"} {
		if !strings.Contains(text, kept) {
			t.Errorf("dropped %q", kept)
		}
	}
}

// A large mesh's outbound series cost reading time, not memory: 8 MiB of them leave a few
// kilobytes to parse. An endless line, or more inbound series than a proxy can have, fail.
func TestFilterBounds(t *testing.T) {
	var big bytes.Buffer
	big.WriteString(modern)
	for i := 0; big.Len() < 8<<20; i++ {
		fmt.Fprintf(&big, "request_total{direction=\"outbound\",authority=\"svc-%d.ns.svc.cluster.local:80\",target_port=\"80\"} %d\n", i, i)
	}
	kept, err := FilterMetrics(&big)
	if err != nil {
		t.Fatal(err)
	}
	if n := kept.(*bytes.Buffer).Len(); n > 16<<10 {
		t.Errorf("kept %d bytes of 8 MiB of outbound series", n)
	}

	if _, err := FilterMetrics(strings.NewReader(strings.Repeat("x", 100<<10))); !errors.Is(err, ErrLineTooLong) {
		t.Errorf("endless line: %v", err)
	}
	var inbound bytes.Buffer
	for i := 0; inbound.Len() < 3<<20; i++ {
		fmt.Fprintf(&inbound, "request_total{direction=\"inbound\",target_port=\"8080\",client_id=\"c%d\"} 1\n", i)
	}
	if _, err := FilterMetrics(&inbound); err == nil || !strings.Contains(err.Error(), "exceeds") {
		t.Errorf("3 MiB of inbound series: %v", err)
	}
}
