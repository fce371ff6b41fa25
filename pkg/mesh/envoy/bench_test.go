package envoy

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/meshdrain/meshdrain/pkg/mesh"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// filteredPayload is what one poll of a sidecar with ports inbound ports returns through
// StatsFilter in Istio >= 1.23 naming: per port the HTTP and cluster stats, the
// virtualInbound listener, server.state, and istio_requests_total{reporter="destination"}
// for 5 callers × 3 response codes per port when completions are asked for.
func filteredPayload(ports int, completions bool) []byte {
	var b bytes.Buffer
	family := func(name, kind string, series func(port int) string) {
		fmt.Fprintf(&b, "# TYPE %s %s\n", name, kind)
		for p := 0; p < ports; p++ {
			b.WriteString(series(8080 + p))
		}
	}
	family("envoy_cluster_upstream_rq_total", "counter", func(port int) string {
		return fmt.Sprintf("envoy_cluster_upstream_rq_total{cluster_name=\"inbound|%d||\"} %d\n", port, 123456+port)
	})
	family("envoy_http_downstream_rq_total", "counter", func(port int) string {
		return fmt.Sprintf("envoy_http_downstream_rq_total{http_conn_manager_prefix=\"inbound_0.0.0.0_%d\"} %d\n", port, 123400+port)
	})
	fmt.Fprintf(&b, "# TYPE envoy_listener_downstream_cx_total counter\nenvoy_listener_downstream_cx_total{listener_address=\"0.0.0.0_15006\"} 98765\n")
	if completions {
		fmt.Fprintf(&b, "# TYPE istio_requests_total counter\n")
	}
	for p := 0; p < ports && completions; p++ {
		for caller := 0; caller < 5; caller++ {
			for _, code := range []int{200, 404, 503} {
				fmt.Fprintf(&b, "istio_requests_total{reporter=\"destination\",source_workload=\"caller-%d\",source_workload_namespace=\"default\",source_principal=\"spiffe://cluster.local/ns/default/sa/caller-%d\",source_app=\"caller-%d\",source_version=\"v1\",source_cluster=\"Kubernetes\",destination_workload=\"web\",destination_workload_namespace=\"default\",destination_principal=\"spiffe://cluster.local/ns/default/sa/web\",destination_app=\"web\",destination_version=\"v1\",destination_service=\"web-%d.default.svc.cluster.local\",destination_service_name=\"web-%d\",destination_service_namespace=\"default\",destination_cluster=\"Kubernetes\",request_protocol=\"http\",response_code=\"%d\",grpc_response_status=\"\",response_flags=\"-\",connection_security_policy=\"mutual_tls\"} %d\n",
					caller, caller, caller, p, p, code, 1000*caller+code)
			}
		}
	}
	family("envoy_cluster_upstream_cx_active", "gauge", func(port int) string {
		return fmt.Sprintf("envoy_cluster_upstream_cx_active{cluster_name=\"inbound|%d||\"} 12\n", port)
	})
	family("envoy_cluster_upstream_rq_active", "gauge", func(port int) string {
		return fmt.Sprintf("envoy_cluster_upstream_rq_active{cluster_name=\"inbound|%d||\"} 3\n", port)
	})
	family("envoy_http_downstream_cx_active", "gauge", func(port int) string {
		return fmt.Sprintf("envoy_http_downstream_cx_active{http_conn_manager_prefix=\"inbound_0.0.0.0_%d\"} 14\n", port)
	})
	family("envoy_http_downstream_rq_active", "gauge", func(port int) string {
		return fmt.Sprintf("envoy_http_downstream_rq_active{http_conn_manager_prefix=\"inbound_0.0.0.0_%d\"} 3\n", port)
	})
	fmt.Fprintf(&b, "# TYPE envoy_listener_downstream_cx_active gauge\nenvoy_listener_downstream_cx_active{listener_address=\"0.0.0.0_15006\"} 140\n")
	fmt.Fprintf(&b, "# TYPE envoy_server_state gauge\nenvoy_server_state{} 0\n")
	return b.Bytes()
}

func TestFilteredPayloadIsUnderBudget(t *testing.T) {
	payload := filteredPayload(10, false)
	if len(payload) > 64<<10 {
		t.Errorf("a 10-port poll is %d bytes, over the 64 KiB budget", len(payload))
	}
	snap, err := Parse(bytes.NewReader(payload), mesh.Selector{})
	if err != nil {
		t.Fatal(err)
	}
	if r := snap.Read(); len(snap.Endpoints) != 10 || r.Signal != mesh.SignalHTTPRequests || *r.Active != 30 {
		t.Errorf("endpoints %d reading %+v", len(snap.Endpoints), r)
	}
}

// BenchmarkPoll is one poll's CPU: parse plus normalise of a 10-port filtered response.
func BenchmarkPoll(b *testing.B) { benchmarkPoll(b, false) }

// BenchmarkPollCompletions is the fallback poll, when only istio_requests_total exists: it
// grows with the callers (here 5 callers × 3 codes × 10 ports = 150 series).
func BenchmarkPollCompletions(b *testing.B) { benchmarkPoll(b, true) }

func benchmarkPoll(b *testing.B, completions bool) {
	payload := filteredPayload(10, completions)
	b.SetBytes(int64(len(payload)))
	b.ReportAllocs()
	for b.Loop() {
		snap, err := Parse(bytes.NewReader(payload), mesh.Selector{})
		if err != nil {
			b.Fatal(err)
		}
		_ = snap.Read()
	}
	b.ReportMetric(float64(len(payload)), "bytes/poll")
}

// BenchmarkExpfmtAlone is expfmt's own share of a poll: the text parser, given the same
// payload and a reused parser, with nothing of meshdrain's around it. It is the floor of a
// poll's allocations as long as expfmt parses the Prometheus text (a fixed dependency).
func BenchmarkExpfmtAlone(b *testing.B) {
	payload := filteredPayload(10, false)
	parser := expfmt.NewTextParser(model.UTF8Validation)
	var series int
	b.ReportAllocs()
	for b.Loop() {
		families, err := parser.TextToMetricFamilies(bytes.NewReader(payload))
		if err != nil {
			b.Fatal(err)
		}
		series = 0
		for _, f := range families {
			series += len(f.GetMetric())
		}
	}
	b.ReportMetric(float64(series), "series/poll")
}
