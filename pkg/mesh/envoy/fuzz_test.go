package envoy

import (
	"bufio"
	"bytes"
	"io"
	"math"
	"net/http"
	"strconv"
	"testing"

	"github.com/meshdrain/meshdrain/pkg/mesh"
)

var fuzzSelectors = []mesh.Selector{
	{},
	{Ports: []int{8080}},
	{Clusters: []string{"local_app"}, HTTPPrefixes: []string{"public_listener"}},
}

// FuzzReadResponse feeds arbitrary bytes, as they would arrive on the admin connection, through
// net/http's response parser and meshdrain's admin answer reader (status check, body cap,
// Prometheus parser, normaliser), all in memory. Whatever arrives, it must return (no panic,
// no hang) and never produce a reading that is not a number. Seeds: testdata/fuzz.
func FuzzReadResponse(f *testing.F) {
	f.Add([]byte("HTTP/1.1 200 OK\r\nContent-Length: " + strconv.Itoa(len(istioBody)) + "\r\n\r\n" + istioBody))
	f.Add([]byte("HTTP/1.1 405 Method Not Allowed\r\nContent-Length: 38\r\n\r\nMethod GET not allowed, POST required."))
	f.Fuzz(func(t *testing.T, data []byte) {
		resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(data)), &http.Request{Method: http.MethodGet})
		if err != nil {
			return
		}
		defer resp.Body.Close()
		err = ReadResponse(http.MethodGet, "http://127.0.0.1:15000/stats/prometheus", resp, func(body io.Reader) error {
			families, err := ReadStats(body)
			if err != nil {
				return err
			}
			for _, sel := range fuzzSelectors {
				r := Normalise(families, sel).Read()
				for _, v := range []*float64{r.Arrivals, r.Active, r.Connections} {
					if v != nil && math.IsNaN(*v) {
						t.Fatalf("reading holds NaN: %+v", r)
					}
				}
			}
			return nil
		})
		if err != nil && err.Error() == "" {
			t.Fatal("an error with no message")
		}
	})
}
