package linkerdsim

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"sync"
)

// The proxy writes two kinds of output on /metrics: its legacy metrics (HELP and TYPE lines
// per family, samples labelled as in linkerd/app/core/src/metrics.rs and transport/labels.rs),
// then a prometheus-client registry (counters typed under their name without _total, OpenMetrics
// style, ending in "# EOF"). Families below are in the order the legacy report writes them.

// family is one metric family: a name, its HELP text and its series in first-seen order.
type family struct {
	name, help, kind string
	// openMetrics families are typed under name and sampled as name+"_total".
	openMetrics bool
	series      []*series
	byLabels    map[string]*series
}

type series struct {
	labels string
	value  float64
	// histograms only
	buckets []uint64
	count   uint64
	sum     float64
}

// latencyBoundsMs are the legacy latency histogram's bucket bounds
// (linkerd/metrics/src/latency.rs).
var latencyBoundsMs = []float64{1, 2, 3, 4, 5, 10, 20, 30, 40, 50, 100, 200, 300, 400, 500,
	1000, 2000, 3000, 4000, 5000, 10000, 20000, 30000, 40000, 50000}

// registry holds every family of one proxy.
type registry struct {
	mu sync.Mutex

	requests, latency, responses                               *family
	tcpOpened, tcpOpen, tcpReadBytes, tcpWriteBytes, tcpClosed *family
	buildInfo, routeRequests                                   *family
	legacy, prom                                               []*family
}

func newRegistry() *registry {
	r := &registry{
		requests:      &family{name: "request_total", help: "Total count of HTTP requests.", kind: "counter"},
		latency:       &family{name: "response_latency_ms", help: "Elapsed times between a request's headers being received and its response stream completing", kind: "histogram"},
		responses:     &family{name: "response_total", help: "Total count of HTTP responses.", kind: "counter"},
		tcpOpened:     &family{name: "tcp_open_total", help: "Total count of opened connections", kind: "counter"},
		tcpOpen:       &family{name: "tcp_open_connections", help: "Number of currently-open connections", kind: "gauge"},
		tcpReadBytes:  &family{name: "tcp_read_bytes_total", help: "Total count of bytes read from peers", kind: "counter"},
		tcpWriteBytes: &family{name: "tcp_write_bytes_total", help: "Total count of bytes written to peers", kind: "counter"},
		tcpClosed:     &family{name: "tcp_close_total", help: "Total count of closed connections", kind: "counter"},
		buildInfo:     &family{name: "proxy_build_info", help: "Proxy build info.", kind: "gauge"},
		routeRequests: &family{name: "inbound_http_requests", help: "The total number of requests dispatched.", kind: "counter", openMetrics: true},
	}
	r.legacy = []*family{r.requests, r.latency, r.responses, r.tcpOpened, r.tcpOpen, r.tcpReadBytes, r.tcpWriteBytes, r.tcpClosed}
	r.prom = []*family{r.buildInfo, r.routeRequests}
	for _, f := range append(append([]*family{}, r.legacy...), r.prom...) {
		f.byLabels = map[string]*series{}
	}
	return r
}

// get returns the series of f with labels, creating it.
func (f *family) get(labels string) *series {
	s, ok := f.byLabels[labels]
	if !ok {
		s = &series{labels: labels}
		if f.kind == "histogram" {
			s.buckets = make([]uint64, len(latencyBoundsMs))
		}
		f.byLabels[labels] = s
		f.series = append(f.series, s)
	}
	return s
}

// add adds delta to a counter or gauge series.
func (r *registry) add(f *family, labels string, delta float64) {
	r.mu.Lock()
	f.get(labels).value += delta
	r.mu.Unlock()
}

// set sets a gauge series.
func (r *registry) set(f *family, labels string, v float64) {
	r.mu.Lock()
	f.get(labels).value = v
	r.mu.Unlock()
}

// observe records a latency in milliseconds.
func (r *registry) observe(f *family, labels string, ms float64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := f.get(labels)
	for i, bound := range latencyBoundsMs {
		if ms <= bound {
			s.buckets[i]++
		}
	}
	s.count++
	s.sum += ms
}

// value reads a series (0 when absent), for tests.
func (r *registry) value(f *family, labels string) float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if s, ok := f.byLabels[labels]; ok {
		return s.value
	}
	return 0
}

// write renders the whole output. A legacy family with no series writes nothing at all, as
// the proxy's reports do when their registry is empty: a proxy that has served no inbound
// request has no request_total.
func (r *registry) write(w io.Writer) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	var b strings.Builder
	for _, f := range r.legacy {
		if len(f.series) == 0 {
			continue
		}
		fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s %s\n", f.name, f.help, f.name, f.kind)
		for _, s := range f.series {
			if f.kind == "histogram" {
				writeHistogram(&b, f.name, s)
				continue
			}
			fmt.Fprintf(&b, "%s{%s} %s\n", f.name, s.labels, formatValue(s.value))
		}
	}
	for _, f := range r.prom {
		fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s %s\n", f.name, f.help, f.name, f.kind)
		name := f.name
		if f.openMetrics {
			name += "_total"
		}
		for _, s := range f.series {
			fmt.Fprintf(&b, "%s{%s} %s\n", name, s.labels, formatValue(s.value))
		}
	}
	b.WriteString("# EOF\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func writeHistogram(b *strings.Builder, name string, s *series) {
	for i, bound := range latencyBoundsMs {
		fmt.Fprintf(b, "%s_bucket{%s,le=\"%s\"} %d\n", name, s.labels, formatValue(bound), s.buckets[i])
	}
	fmt.Fprintf(b, "%s_bucket{%s,le=\"+Inf\"} %d\n", name, s.labels, s.count)
	fmt.Fprintf(b, "%s_count{%s} %d\n", name, s.labels, s.count)
	fmt.Fprintf(b, "%s_sum{%s} %s\n", name, s.labels, formatValue(s.sum))
}

func formatValue(v float64) string {
	if v == math.Trunc(v) && math.Abs(v) < 1e15 {
		return strconv.FormatInt(int64(v), 10)
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

// labels builds the label sets the proxy writes, in its order.
type labels struct {
	clientID string
}

// target is TargetAddr's labels (transport/labels.rs).
func (l labels) target(ip string, port int) string {
	return fmt.Sprintf(`target_addr=%q,target_ip=%q,target_port="%d"`, hostPort(ip, port), ip, port)
}

// tls is TlsAccept's labels: a meshed client's identity, or plaintext.
func (l labels) tls() string {
	if l.clientID != "" {
		return fmt.Sprintf(`tls="true",client_id=%q`, l.clientID)
	}
	return `tls="no_identity",no_tls_reason="no_tls_from_remote"`
}

// server is the default policy server of a port.
func (l labels) server(port int) string {
	return fmt.Sprintf(`srv_group="",srv_kind="default",srv_name="all-unauthenticated",srv_port="%d"`, port)
}

func (l labels) route(route string) string {
	return fmt.Sprintf(`route_group="",route_kind="default",route_name=%q`, route)
}

const authz = `authz_group="",authz_kind="default",authz_name="all-unauthenticated"`

// endpoint is InboundEndpointLabels: direction, target, tls, then server, route, authz.
func (l labels) endpoint(ip string, port int, route string) string {
	return strings.Join([]string{`direction="inbound"`, l.target(ip, port), l.tls(), l.server(port), l.route(route), authz}, ",")
}

// response adds the status and class labels of response_total. Status 0 is a request that
// failed without a response (labelled with the error, no status_code); failed marks a
// response whose body ended in an error, a failure whatever its status.
func response(endpoint string, status int, failed bool, errText string) string {
	class := "success"
	if failed || status == 0 || status >= 500 {
		class = "failure"
	}
	if status == 0 {
		return fmt.Sprintf(`%s,classification=%q,grpc_status="",error=%q`, endpoint, class, errText)
	}
	return fmt.Sprintf(`%s,status_code="%d",classification=%q,grpc_status="",error=%q`, endpoint, status, class, errText)
}

// latency adds the status to response_latency_ms's labels.
func latency(endpoint string, status int) string {
	if status == 0 {
		return endpoint
	}
	return fmt.Sprintf(`%s,status_code="%d"`, endpoint, status)
}

// clientConn is ServerLabels for an accepted client connection (peer="src").
func (l labels) clientConn(ip string, port int) string {
	return strings.Join([]string{`direction="inbound",peer="src"`, l.target(ip, port), l.tls(), l.server(port)}, ",")
}

// appConn is Key::InboundClient, the proxy's own connection to the app.
const appConn = `direction="inbound",peer="dst",tls="no_identity",no_tls_reason="loopback"`

// closed adds the end-of-stream label of tcp_close_total.
func closed(conn string) string { return conn + `,errno=""` }

// routeRequest is the newer inbound route counter's label set.
func routeRequest(port int, route string) string {
	return fmt.Sprintf(`parent_group="",parent_kind="default",parent_name="all-unauthenticated",parent_port="%d",route_group="",route_kind="default",route_name=%q`, port, route)
}

func hostPort(ip string, port int) string {
	if strings.Contains(ip, ":") {
		return fmt.Sprintf("[%s]:%d", ip, port)
	}
	return fmt.Sprintf("%s:%d", ip, port)
}
