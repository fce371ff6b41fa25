package envoysim

import (
	"io"
	"net"
	"net/http"
	"testing"

	"golang.org/x/net/http2"

	"github.com/meshdrain/meshdrain/pkg/clock/clocktest"
)

// h2Conn is a client sidecar's HTTP/2 connection to the inbound port (h2c).
func h2Conn(t *testing.T, addr string) *http2.ClientConn {
	t.Helper()
	raw, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	cc, err := (&http2.Transport{AllowHTTP: true}).NewClientConn(raw)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

func h2Get(t *testing.T, cc *http2.ClientConn, addr string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/", nil)
	resp, err := cc.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(body) != "ok" {
		t.Fatalf("GET: %d %q", resp.StatusCode, body)
	}
}

// TestGRPCPortDrainSendsGoAway: a grpc port counts HTTP/2 connections and requests; during a
// graceful drain a connection that carries a request gets a GOAWAY (its client then opens no
// new stream on it), counted once per connection, and an idle one is told nothing.
func TestGRPCPortDrainSendsGoAway(t *testing.T) {
	app := startApp(t, nil)
	s := startSidecar(t, Config{Profile: ProfileEnvoy, Inbound: []InboundPort{{Port: 8080, AppAddr: appAddr(app), Protocol: ProtocolGRPC}}}, "")
	addr := s.InboundAddr(8080)
	busy, idle := h2Conn(t, addr), h2Conn(t, addr)
	h2Get(t, busy, addr)
	h2Get(t, idle, addr)
	if code, _ := adminDo(t, s, "POST", "/drain_listeners?inboundonly&graceful"); code != 200 {
		t.Fatalf("drain = %d", code)
	}
	h2Get(t, busy, addr)
	clocktest.Eventually(t, "the busy connection closed after its GOAWAY", func() bool { return busy.State().Closed })
	if st := idle.State(); st.Closing || st.Closed {
		t.Errorf("idle connection: %+v; a connection without a request is told nothing", st)
	}
	for name, want := range map[string]int{
		"http.ingress_http.downstream_rq_http2_total": 3,
		"http.ingress_http.downstream_cx_http2_total": 2,
		"http.ingress_http.downstream_cx_drain_close": 1,
	} {
		if v := statValue(t, s, name); v != want {
			t.Errorf("%s = %d, want %d", name, v, want)
		}
	}
}
