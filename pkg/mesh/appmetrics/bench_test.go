package appmetrics

import (
	"bytes"
	"fmt"
	"testing"
)

// BenchmarkReadPage is one poll's parse of a large app's metrics page: 2,000 series of other
// families (a JVM's or a Go runtime's and the app's own), of which the counter has 40.
func BenchmarkReadPage(b *testing.B) {
	var page bytes.Buffer
	for f := 0; f < 100; f++ {
		fmt.Fprintf(&page, "# HELP other_family_%d Something the app measures.\n# TYPE other_family_%d gauge\n", f, f)
		for i := 0; i < 20; i++ {
			fmt.Fprintf(&page, "other_family_%d{area=\"heap\",id=\"pool-%d\"} %d.0\n", f, i, f*i)
		}
	}
	fmt.Fprintf(&page, "# HELP http_requests_total Requests.\n# TYPE http_requests_total counter\n")
	for i := 0; i < 40; i++ {
		fmt.Fprintf(&page, "http_requests_total{code=\"200\",method=\"GET\",path=\"/api/v1/items/%d\"} %d\n", i, 1000+i)
	}
	sel, err := ParseSelector(`http_requests_total{path!~"/metrics|/healthz"}`)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(page.Len()))
	b.ReportAllocs()
	for b.Loop() {
		r, err := sel.read(bytes.NewReader(page.Bytes()))
		if err != nil || r.Matched != 40 {
			b.Fatalf("%+v, %v", r, err)
		}
	}
}
