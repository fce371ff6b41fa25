package envoy

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/meshdrain/meshdrain/pkg/mesh"
)

// The filter may only keep too much: on every stats fixture (real public dumps and emulated
// answers) and selection, what Normalise reads of the kept lines is what it reads of all.
func TestInboundLinesChangeNothingNormaliseReads(t *testing.T) {
	files, err := filepath.Glob("testdata/*.prom")
	if err != nil || len(files) == 0 {
		t.Fatalf("no fixtures: %v", err)
	}
	selections := []mesh.Selector{
		{},
		{Ports: []int{8080}},
		{Ports: []int{9080, 15021}, Completions: true},
		{Clusters: []string{"local_app"}, HTTPPrefixes: []string{"public_listener"}},
		{Clusters: []string{"service_google"}},
		{HTTPPrefixes: []string{"ingress_http"}},
	}
	for _, file := range files {
		raw, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		whole, err := ParseFamilies(bytes.NewReader(raw))
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		for _, sel := range selections {
			lines := inboundLines(sel)
			kept, err := readStats(bytes.NewReader(raw), &lines)
			if err != nil {
				t.Fatalf("%s %+v: %v", file, sel, err)
			}
			if got, want := Normalise(kept, sel), Normalise(whole, sel); !reflect.DeepEqual(got, want) {
				t.Errorf("%s %+v: filtered\n%+v\nwhole\n%+v", file, sel, got, want)
			}
			if got, want := AdminRequests(kept), AdminRequests(whole); !reflect.DeepEqual(got, want) {
				t.Errorf("%s %+v: admin requests %v, want %v", file, sel, got, want)
			}
		}
	}
}

// A 2 MiB answer of other targets' series (what an Envoy that ignores the filter could send)
// is dropped as it is read, so the parse holds none of it.
func TestInboundLinesDropOtherTargets(t *testing.T) {
	var b strings.Builder
	b.WriteString("# TYPE envoy_cluster_upstream_rq_total counter\n")
	for i := 0; b.Len() < maxStatsBody-200; i++ {
		fmt.Fprintf(&b, "envoy_cluster_upstream_rq_total{cluster_name=\"outbound|80||s%d\"} %d\n", i, i)
	}
	b.WriteString("envoy_cluster_upstream_rq_total{cluster_name=\"inbound|8080||\"} 7\n")
	first := "envoy_cluster_upstream_rq_total{cluster_name=\"outbound|80||s0\"} 0\n"
	lines := inboundLines(mesh.Selector{Ports: []int{8080}})
	kept, err := lines.Filter(strings.NewReader(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	// The first sample stays: its labels' names tell the naming.
	want := "# TYPE envoy_cluster_upstream_rq_total counter\n" + first + "envoy_cluster_upstream_rq_total{cluster_name=\"inbound|8080||\"} 7\n"
	if kept.String() != want {
		t.Errorf("kept %q, want %q", kept.String(), want)
	}
}

// What is kept is bounded, and a line that is not Envoy's is refused, each with its reason.
func TestInboundLinesBounds(t *testing.T) {
	var b strings.Builder
	for i := 0; b.Len() <= maxKept; i++ {
		fmt.Fprintf(&b, "envoy_cluster_upstream_rq_total{cluster_name=\"inbound|%d||\"} 1\n", i)
	}
	lines := inboundLines(mesh.Selector{})
	if _, err := lines.Filter(strings.NewReader(b.String())); err == nil || !strings.Contains(err.Error(), "exceeds 1048576 bytes") {
		t.Errorf("over the kept bound: %v", err)
	}
	garbage := "\x00\x17\xfe<html>garbage: {not-a-stat\nstat.without.value:\n: 12\n}}}\n" // envoysim's FaultGarbage
	if _, err := lines.Filter(strings.NewReader(garbage)); !errors.Is(err, errNotStats) {
		t.Errorf("an answer in no stats format: %v", err)
	}
	long := "envoy_cluster_upstream_rq_total{cluster_name=\"inbound|8080||" + strings.Repeat("x", maxLine) + "\"} 1\n"
	if _, err := lines.Filter(strings.NewReader(long)); !errors.Is(err, errLineTooLong) {
		t.Errorf("a line over %d bytes: %v", maxLine, err)
	}
}
