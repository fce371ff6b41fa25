package appmetrics

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"
)

func TestParseSelector(t *testing.T) {
	for _, tc := range []struct {
		in, want, err string
	}{
		{in: "http_requests_total", want: "http_requests_total"},
		{in: ` http_server_requests_seconds_count{uri!~"/actuator.*", method = "GET",} `, want: `http_server_requests_seconds_count{uri!~"/actuator.*",method="GET"}`},
		{in: `http_requests_total{handler!="/healthz",code=~"2..|3.."}`, want: `http_requests_total{handler!="/healthz",code=~"2..|3.."}`},
		{in: `x{path="C:\\DIR\"quoted\""}`, want: `x{path="C:\\DIR\"quoted\""}`},
		{in: "", err: "not a metric name"},
		{in: "2xx_total", err: "not a metric name"},
		{in: `{code="200"}`, err: "not a metric name"},
		{in: `x{code="200"`, err: "no closing }"},
		{in: `x{code}`, err: "no operator"},
		{in: `x{code=200}`, err: "not double-quoted"},
		{in: `x{code="200}`, err: "no closing quote"},
		{in: `x{code<"200"}`, err: "no operator"},
		{in: `x{code=~"("}`, err: "missing closing )"},
		{in: `x{a="1" b="2"}`, err: "want , between matchers"},
		{in: `x{0a="1"}`, err: "not a label name"},
	} {
		sel, err := ParseSelector(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseSelector(%q) = %v, %v: want an error with %q", tc.in, sel, err, tc.err)
			}
			continue
		}
		if err != nil || sel.String() != tc.want {
			t.Errorf("ParseSelector(%q) = %q, %v: want %q", tc.in, sel.String(), err, tc.want)
		}
	}
}

func readFixture(t *testing.T, name, selector string) (Reading, error) {
	t.Helper()
	sel, err := ParseSelector(selector)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	return sel.read(f)
}

// The counter is read from real answers: Prometheus's own example of the text format, and a
// Spring Boot application's (testdata/README.md names both).
func TestReadRealAnswers(t *testing.T) {
	const docs, spring = "prometheus-docs-exposition.txt", "spring-boot-actuator-prometheus.txt"
	for _, tc := range []struct {
		file, selector  string
		total           float64
		series, matched int
	}{
		{docs, "http_requests_total", 1030, 2, 2},
		{docs, `http_requests_total{code!="400"}`, 1027, 2, 1},
		{docs, `http_requests_total{code=~"4.."}`, 3, 2, 1},
		{docs, `http_requests_total{code=~"4"}`, 0, 2, 0},     // anchored, as in PromQL
		{docs, `http_requests_total{handler=""}`, 1030, 2, 2}, // a label a series lacks is ""
		{docs, "http_request_duration_seconds_count", 144320, 1, 1},
		{docs, "telemetry_requests_metrics_latency_microseconds_count", 2693, 1, 1},
		{docs, "metric_without_timestamp_and_labels", 12.47, 1, 1},
		{docs, "requests_nobody_counted_yet_total", 0, 0, 0},
		{spring, "http_server_requests_seconds_count", 1, 1, 1},
		{spring, `http_server_requests_seconds_count{uri!~"/actuator.*"}`, 0, 1, 0},
		{spring, `logback_events_total{level=~"warn|error"}`, 0, 5, 2},
		{spring, `logback_events_total{level="info"}`, 5, 5, 1},
	} {
		r, err := readFixture(t, tc.file, tc.selector)
		if err != nil || r.Total != tc.total || r.Series != tc.series || r.Matched != tc.matched {
			t.Errorf("%s %s: %+v, %v: want total %v, %d series, %d matched", tc.file, tc.selector, r, err, tc.total, tc.series, tc.matched)
		}
	}
}

// A name the app types as anything but a count is refused, saying what it is.
func TestReadRefusesWhatIsNotACount(t *testing.T) {
	for _, tc := range []struct{ file, selector, want string }{
		{"prometheus-docs-exposition.txt", "http_request_duration_seconds", "is a histogram: not a request counter; name its count, http_request_duration_seconds_count"},
		{"prometheus-docs-exposition.txt", "http_request_duration_seconds_bucket", "is the bucket of a histogram"},
		{"prometheus-docs-exposition.txt", "http_request_duration_seconds_sum", "is the sum of a histogram"},
		{"spring-boot-actuator-prometheus.txt", "http_server_requests_seconds_max", "is a gauge"},
		{"spring-boot-actuator-prometheus.txt", "executor_queued_tasks", "is a gauge"},
	} {
		_, err := readFixture(t, tc.file, tc.selector)
		if !errors.Is(err, ErrNotACounter) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v: want %q", tc.selector, err, tc.want)
		}
	}
}

// The source reads over HTTP on the loopback, asking for the text format, and says what
// went wrong; it refuses another host unless told.
func TestSourceOverHTTP(t *testing.T) {
	body, err := os.ReadFile("testdata/spring-boot-actuator-prometheus.txt")
	if err != nil {
		t.Fatal(err)
	}
	status := http.StatusOK
	var accept, remote string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		accept, remote = r.Header.Get("Accept"), r.RemoteAddr
		if r.URL.Path != "/actuator/prometheus" {
			http.NotFound(w, r)
			return
		}
		w.WriteHeader(status)
		w.Write(body)
	}))
	defer srv.Close()
	sel, _ := ParseSelector("http_server_requests_seconds_count")
	src, err := New(srv.URL+"/actuator/prometheus", sel, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := src.Read(context.Background()); err != nil || r.Total != 1 {
		t.Fatalf("read %+v, %v: want a total of 1", r, err)
	}
	if !strings.HasPrefix(accept, "text/plain;version=0.0.4") {
		t.Fatalf("Accept %q: want the text format first", accept)
	}
	// The app sees the source's own connection: on a port the kernel watches, it is the
	// hook's, never a client's.
	if from := netip.MustParseAddrPort(remote); !src.Own(from) || src.Own(netip.AddrPortFrom(from.Addr(), from.Port()+1)) {
		t.Fatalf("Own(%v) false, or another port's true", from)
	}
	status = http.StatusServiceUnavailable
	if _, err := src.Read(context.Background()); err == nil || !strings.Contains(err.Error(), "503") {
		t.Fatalf("a 503: %v", err)
	}
	if _, err := New("http://10.0.0.1:9090/metrics", sel, Options{}); err == nil || !strings.Contains(err.Error(), "--allow-remote") {
		t.Fatalf("a remote URL: %v", err)
	}
}

// A read never outlasts its timeout, whatever the app does.
func TestSourceTimeout(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("http_requests_total 1\n"))
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)
	sel, _ := ParseSelector(DefaultCounter)
	src, err := New(srv.URL+"/metrics", sel, Options{Timeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := src.Requests(context.Background()); err == nil {
		t.Fatal("a body that never ends was read")
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("the read took %v with a 100ms timeout", took)
	}
}

// A series that grew by exactly one between two reads is named; anything else is not.
func TestGrewByOne(t *testing.T) {
	sel, _ := ParseSelector(DefaultCounter)
	read := func(text string) Reading {
		r, err := sel.read(strings.NewReader(text))
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	before := read("http_requests_total{path=\"/\"} 40\nhttp_requests_total{path=\"/metrics\"} 7\n")
	for _, c := range []struct{ after, want string }{
		{"http_requests_total{path=\"/\"} 40\nhttp_requests_total{path=\"/metrics\"} 8\n", `{path="/metrics"}`},
		{"http_requests_total{path=\"/\"} 41\nhttp_requests_total{path=\"/metrics\"} 8\n", ""},
		{"http_requests_total{path=\"/\"} 40\nhttp_requests_total{path=\"/metrics\"} 7\n", ""},
		{"http_requests_total{path=\"/\"} 40\nhttp_requests_total{path=\"/metrics\"} 7\nhttp_requests_total{path=\"/new\"} 1\n", `{path="/new"}`},
	} {
		if got := read(c.after).GrewByOne(before); got != c.want {
			t.Errorf("%q: GrewByOne %q, want %q", c.after, got, c.want)
		}
	}
}

// Requests counts the matching series' increases, as Prometheus's increase() does: a reset
// series counts its new value, a new one its value, a gone one nothing more.
func TestRequestsCountsIncreases(t *testing.T) {
	pages := []string{
		`http_requests_total{path="/a"} 10` + "\n" + `http_requests_total{path="/b"} 5` + "\n",
		`http_requests_total{path="/a"} 13` + "\n" + `http_requests_total{path="/b"} 5` + "\n", // +3
		`http_requests_total{path="/a"} 2` + "\n" + `http_requests_total{path="/b"} 6` + "\n",  // /a reset: +2, /b +1
		`http_requests_total{path="/b"} 6` + "\n" + `http_requests_total{path="/c"} 4` + "\n",  // /a gone, /c new: +4
		`http_requests_total{path="/b"} 7` + "\n" + `http_requests_total{path="/c"} 4` + "\n",  // +1
	}
	want := []float64{0, 3, 6, 10, 11}
	page := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(pages[page]))
	}))
	defer srv.Close()
	sel, _ := ParseSelector(DefaultCounter)
	src, err := New(srv.URL, sel, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for page = range pages {
		if got, err := src.Requests(context.Background()); err != nil || got != want[page] {
			t.Fatalf("page %d: requests %v, %v: want %v", page, got, err, want[page])
		}
	}
}

// OpenMetrics exemplars after a value are no timestamp; a long line of another family is
// skipped, one of the counter's refused; a value that is no count is refused.
func TestReadOddLines(t *testing.T) {
	sel, _ := ParseSelector(DefaultCounter)
	long := "# HELP other " + strings.Repeat("x", 100<<10) + "\n"
	for _, c := range []struct {
		page  string
		total float64
		err   string
	}{
		{`http_requests_total{path="/a # }"} 7 # {trace_id="KOO5S4vxi0o"} 1 1520879607.789` + "\n" + "http_requests_total 2 # {} 1\n", 9, ""},
		{"http_requests_total{code=\"200\"} 3 1520879607.789\nhttp_requests_total{code=\"500\"} 1\t# {trace_id=\"x\"} 1\n", 4, ""},
		{"http_requests_total{code=\"200\"}\t5\t1395066363000\r\n", 5, ""},
		{long + "http_requests_total 3\n", 3, ""},
		{"http_requests_total 3\n" + long, 3, ""},
		{`http_requests_total{path="` + strings.Repeat("x", 100<<10) + `"} 1` + "\n", 0, "is longer than 64 KiB"},
		{"http_requests_total +Inf\n", 0, "+Inf: not a count"},
		{"http_requests_total NaN\n", 0, "NaN: not a count"},
		{"http_requests_total -1\n", 0, "-1: not a count"},
	} {
		r, err := sel.read(strings.NewReader(c.page))
		switch {
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%.60q: %+v, %v: want an error with %q", c.page, r, err, c.err)
		case c.err == "" && (err != nil || r.Total != c.total):
			t.Errorf("%.60q: %+v, %v: want a total of %v", c.page, r, err, c.total)
		}
	}
}
