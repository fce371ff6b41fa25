package linkerd

import (
	"maps"
	"strings"
	"testing"
)

// A public dump's only inbound series is a 503 on the admin port (the runbook fixture): named
// explicitly, the port shows it as one 5xx; outbound 503s never count.
func TestServerErrorsFromAPublicDump(t *testing.T) {
	snap := load(t, "linkerd-runbook-2026-response.prom", Selector{Ports: []int{4191}})
	if len(snap.Endpoints) != 1 {
		t.Fatalf("endpoints %+v", snap.Endpoints)
	}
	e := snap.Endpoints[0]
	if e.ServerErrorsTotal == nil || *e.ServerErrorsTotal != 1 || !maps.Equal(e.ServerErrorsByCode, map[int]float64{503: 1}) {
		t.Errorf("5xx %v by code %v, want 1 and 503: 1", e.ServerErrorsTotal, e.ServerErrorsByCode)
	}
	// The default selection leaves the proxy's own admin port out, 5xx included.
	if snap := load(t, "linkerd-runbook-2026-response.prom", Selector{}); len(snap.Endpoints) != 0 {
		t.Errorf("endpoints %+v, want none", snap.Endpoints)
	}
	// 200s only: no 5xx series, so unknown here; status reads it as 0 beside a response count.
	for _, e := range load(t, "linkerd2-issue-7861-response.prom", Selector{}).Endpoints {
		if e.ServerErrorsTotal != nil {
			t.Errorf("port %d: 5xx %v from a dump of 200s", *e.Port, *e.ServerErrorsTotal)
		}
	}
}

func TestServerErrorsByCodeProbesAndFailuresWithoutStatus(t *testing.T) {
	const target = `target_addr="10.0.0.1:8080",target_ip="10.0.0.1",target_port="8080"`
	prom := `# TYPE response_total counter
response_total{direction="inbound",` + target + `,route_name="default",status_code="502",classification="failure",grpc_status="",error=""} 4
response_total{direction="inbound",` + target + `,route_name="default",status_code="503",classification="failure",grpc_status="",error=""} 1
response_total{direction="inbound",` + target + `,route_name="default",status_code="200",classification="success",grpc_status="",error=""} 50
response_total{direction="inbound",` + target + `,route_name="default",status_code="200",classification="failure",grpc_status="14",error=""} 3
response_total{direction="inbound",` + target + `,route_name="default",classification="failure",grpc_status="",error="unclassified"} 2
response_total{direction="inbound",` + target + `,route_name="probe",status_code="500",classification="failure",grpc_status="",error=""} 7
response_total{direction="outbound",` + target + `,route_name="default",status_code="502",classification="failure",grpc_status="",error=""} 9
`
	snap, err := Parse(strings.NewReader(prom), Selector{})
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Endpoints) != 1 {
		t.Fatalf("endpoints %+v", snap.Endpoints)
	}
	e := snap.Endpoints[0]
	// A gRPC failure answered 200 and a stream that ended in an error were not answered with
	// a 5xx; the kubelet's probes and outbound responses are not this port's clients.
	if e.ServerErrorsTotal == nil || *e.ServerErrorsTotal != 5 || !maps.Equal(e.ServerErrorsByCode, map[int]float64{502: 4, 503: 1}) {
		t.Errorf("5xx %v by code %v, want 5: 502 4, 503 1", e.ServerErrorsTotal, e.ServerErrorsByCode)
	}
	if snap, _ := Parse(strings.NewReader(prom), Selector{IncludeProbes: true}); *snap.Endpoints[0].ServerErrorsTotal != 12 {
		t.Errorf("with probes: 5xx %v, want 12", *snap.Endpoints[0].ServerErrorsTotal)
	}
}
