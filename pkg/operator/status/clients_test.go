package status

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/meshdrain/meshdrain/pkg/hook/evidence"
	"github.com/meshdrain/meshdrain/pkg/mesh"
	"github.com/meshdrain/meshdrain/pkg/sim/envoysim"
	"github.com/meshdrain/meshdrain/pkg/sim/loopback"
	"github.com/meshdrain/meshdrain/pkg/sockets"
)

// keepAliveClient is a client pod (its own loopback address) with a keep-alive pool.
func keepAliveClient(ip string) *http.Client {
	d := loopback.Dialer(net.ParseIP(ip), 0)
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{Proxy: nil, DialContext: d.DialContext}}
}

// status shows the inbound listener's clients from this machine's socket table: three client
// pods hold idle pooled connections; one closes its pool (its sidecar applied the removal)
// and shows as left, the others as holding.
func TestStatusShowsWhichClientsHoldOn(t *testing.T) {
	e := startEmulated(t, envoysim.Config{})
	_, portText, _ := net.SplitHostPort(e.sim.InboundAddr(8080))
	port, _ := strconv.Atoi(portText)
	clients := map[string]*http.Client{}
	for _, ip := range []string{"127.0.0.22", "127.0.0.23", "127.0.0.24"} {
		c := keepAliveClient(ip)
		resp, err := c.Get("http://" + e.sim.InboundAddr(8080) + "/")
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		clients[ip] = c
	}
	// Nothing drains this sidecar, so the watch judges as prestop --drain-at end does: a close
	// is a departure for a client seen to pool, its connection answered and open a sample
	// interval later. Wait that long before the baseline: more only helps.
	const every = 50 * time.Millisecond
	time.Sleep(2 * every)
	watch := &evidence.Watch{Reader: sockets.NewReader(), Ports: []int{port}, Every: every}
	defer watch.Close()
	sampleClients := func() map[string]string {
		var out bytes.Buffer
		if err := Run(context.Background(), Envoy(e.client), &out, Options{AdminURL: e.sim.AdminURL(), Selector: mesh.Selector{Ports: []int{8080}},
			Output: OutputJSON, Clients: watch}); err != nil {
			t.Fatal(err)
		}
		var r Report
		if err := json.Unmarshal(out.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		if r.ClientsError != "" {
			t.Skipf("the socket table cannot be read here: %s", r.ClientsError)
		}
		states := map[string]string{}
		for _, c := range r.Clients {
			if _, ours := clients[c.Address]; ours {
				states[c.Address] = c.State
			}
		}
		return states
	}
	if got := sampleClients(); got["127.0.0.22"] != "holding" || got["127.0.0.23"] != "holding" || got["127.0.0.24"] != "holding" {
		t.Fatalf("baseline: %v, want every client holding", got)
	}
	clients["127.0.0.22"].CloseIdleConnections()
	deadline := time.Now().Add(5 * time.Second)
	for {
		got := sampleClients()
		if got["127.0.0.22"] == "left" && got["127.0.0.23"] == "holding" && got["127.0.0.24"] == "holding" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 127.0.0.22 closed its pool: %v", got)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, c := range clients {
		c.CloseIdleConnections()
	}
}
