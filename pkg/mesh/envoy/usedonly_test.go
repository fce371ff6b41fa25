package envoy

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/meshdrain/meshdrain/pkg/mesh"
)

// usedAdmin answers /stats/prometheus with complete or usedonly, and records which was asked.
type usedAdmin struct {
	mu             sync.Mutex
	complete, used string
	asked          []string
}

func (a *usedAdmin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := r.URL.Query()["usedonly"]; ok {
		a.asked = append(a.asked, "usedonly")
		fmt.Fprint(w, a.used)
		return
	}
	a.asked = append(a.asked, "complete")
	fmt.Fprint(w, a.complete)
}

func (a *usedAdmin) set(complete, used string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.complete, a.used = complete, used
}

// twoPorts is an Istio sidecar with HTTP ports 8080 and 8081.
func twoPorts(total8080, active8080, total8081 int) string {
	return fmt.Sprintf(`# TYPE envoy_http_downstream_rq_total counter
envoy_http_downstream_rq_total{http_conn_manager_prefix="inbound_0.0.0.0_8080"} %d
envoy_http_downstream_rq_total{http_conn_manager_prefix="inbound_0.0.0.0_8081"} %d
# TYPE envoy_http_downstream_rq_active gauge
envoy_http_downstream_rq_active{http_conn_manager_prefix="inbound_0.0.0.0_8080"} %d
envoy_http_downstream_rq_active{http_conn_manager_prefix="inbound_0.0.0.0_8081"} 0
`, total8080, total8081, active8080)
}

func endpoint(t *testing.T, snap mesh.Snapshot, port int) mesh.Endpoint {
	t.Helper()
	for _, e := range snap.Endpoints {
		if e.Port != nil && *e.Port == port {
			return e
		}
	}
	t.Fatalf("no endpoint for port %d in %+v", port, snap.Endpoints)
	return mesh.Endpoint{}
}

func valueOf(p *float64) any {
	if p == nil {
		return nil
	}
	return *p
}

// InboundUsed asks for usedonly only once it holds a complete picture of the selection, fills
// what the answer leaves out from that picture, and reads the complete stats again when the
// answer cannot be the same Envoy's (a counter went down).
func TestInboundUsedCompletesTheAnswer(t *testing.T) {
	admin := &usedAdmin{}
	srv := httptest.NewServer(admin)
	defer srv.Close()
	c := newClient(t, srv.URL)
	ctx := context.Background()
	sel := mesh.Selector{}

	admin.set(twoPorts(10, 1, 7), "")
	snap, err := c.InboundUsed(ctx, sel)
	if err != nil {
		t.Fatal(err)
	}
	if got := endpoint(t, snap, 8080).HTTPRequestsTotal; valueOf(got) != 10.0 {
		t.Errorf("first read: 8080 total %v, want 10", valueOf(got))
	}

	// Port 8080 moved (and is the only used series); 8081 and the gauges are left out.
	admin.set("unused", `# TYPE envoy_http_downstream_rq_total counter
envoy_http_downstream_rq_total{http_conn_manager_prefix="inbound_0.0.0.0_8080"} 15
envoy_http_downstream_rq_total{http_conn_manager_prefix="inbound_0.0.0.0_8082"} 2
`)
	if snap, err = c.InboundUsed(ctx, sel); err != nil {
		t.Fatal(err)
	}
	for _, want := range []struct {
		port  int
		field string
		got   *float64
		want  float64
	}{
		{8080, "total", endpoint(t, snap, 8080).HTTPRequestsTotal, 15},
		{8080, "active", endpoint(t, snap, 8080).HTTPRequestsActive, 1},
		{8081, "total", endpoint(t, snap, 8081).HTTPRequestsTotal, 7},
		{8082, "total", endpoint(t, snap, 8082).HTTPRequestsTotal, 2},
	} {
		if valueOf(want.got) != want.want {
			t.Errorf("usedonly: %d %s = %v, want %v", want.port, want.field, valueOf(want.got), want.want)
		}
	}

	// A counter below the picture's: Envoy restarted; the complete stats are read instead.
	admin.set(twoPorts(3, 0, 1), `# TYPE envoy_http_downstream_rq_total counter
envoy_http_downstream_rq_total{http_conn_manager_prefix="inbound_0.0.0.0_8080"} 3
`)
	if snap, err = c.InboundUsed(ctx, sel); err != nil {
		t.Fatal(err)
	}
	if got := endpoint(t, snap, 8081).HTTPRequestsTotal; valueOf(got) != 1.0 {
		t.Errorf("after a restart: 8081 total %v, want the complete read's 1", valueOf(got))
	}
	if got := strings.Join(admin.asked, ","); got != "complete,usedonly,usedonly,complete" {
		t.Errorf("asked %s", got)
	}

	// Another selection has no picture yet: a complete read first.
	admin.asked = nil
	if _, err := c.InboundUsed(ctx, mesh.Selector{Ports: []int{8080}}); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(admin.asked, ","); got != "complete" {
		t.Errorf("new selection: asked %s, want complete", got)
	}
}
