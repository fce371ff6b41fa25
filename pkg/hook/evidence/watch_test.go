package evidence

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/meshdrain/meshdrain/pkg/mesh"
	"github.com/meshdrain/meshdrain/pkg/sockets"
)

// silentReader lists no listener at all: the table read is another network namespace's
// than the sidecar's (status run outside the pod, or the stats name a port nothing listens
// on here).
type silentReader struct{ fakeReader }

func (*silentReader) Listeners([]uint16) ([]sockets.Socket, error) { return nil, nil }

// With no socket listening on the watched port here, status says why it shows no client, in
// one line that names the port and where it came from, at every sample; where one listens,
// it watches.
func TestWatchSaysWhyItSeesNoClient(t *testing.T) {
	istio := &mesh.Listener{Address: "0.0.0.0_15006"}
	for _, tc := range []struct {
		given []int
		want  string
	}{
		{nil, "no socket listens on port 15006 (the inbound listener the sidecar's stats name) in this network namespace"},
		{[]int{18006}, "no socket listens on port 18006 (--inbound-listener-port) in this network namespace"},
	} {
		w := &Watch{Reader: &silentReader{}, Ports: tc.given}
		for sample := range 2 {
			w.Read()
			_, err := w.Clients(time.Now(), istio, quiet, DrainSeen{Known: true})
			var none *NoListenerError
			if !errors.As(err, &none) || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
				t.Errorf("ports %v, sample %d: %v; want one line saying %q", tc.given, sample, err, tc.want)
			}
		}
	}
	w := &Watch{Reader: &listeningReader{fakeReader: *oneHolder()}}
	defer w.Close()
	clients, err := w.Clients(time.Now(), istio, quiet, DrainSeen{Known: true})
	if err != nil || len(clients) != 1 || clients[0].State != sockets.Holding {
		t.Errorf("with the listener here: %+v, %v; want its one client holding", clients, err)
	}
}

// The sidecar drains once it has told a connection to close; a sidecar whose stats do not
// say counts as draining for the clients' judgement, whose draining rules hold whoever drains.
func TestDrainSeen(t *testing.T) {
	closes := func(v float64) *float64 { return &v }
	for _, tc := range []struct {
		snap mesh.Snapshot
		want DrainSeen
	}{
		{mesh.Snapshot{Endpoints: []mesh.Endpoint{{HTTPRequestsTotal: closes(3)}}}, DrainSeen{Known: true}},
		{mesh.Snapshot{Endpoints: []mesh.Endpoint{{HTTPRequestsTotal: closes(3), HTTPDrainCloses: closes(2)}, {HTTPDrainCloses: closes(1)}}}, DrainSeen{Known: true, Closes: 3}},
		{mesh.Snapshot{Endpoints: []mesh.Endpoint{{ClusterRequestsTotal: closes(3)}}}, DrainSeen{}},
	} {
		if got := DrainOf(tc.snap); got != tc.want {
			t.Errorf("%+v: %+v, want %+v", tc.snap.Endpoints, got, tc.want)
		}
	}
	if (DrainSeen{Known: true}).Draining() || !(DrainSeen{Known: true, Closes: 1}).Draining() || !(DrainSeen{}).Draining() {
		t.Error("Draining: want false with no close told, true with one, true when unknown")
	}
}

// A watch started before the sidecar listens finds its clients once it does.
func TestWatchFindsTheListenerOnceItListens(t *testing.T) {
	r := &silentReader{fakeReader: *oneHolder()}
	w := &Watch{Reader: r, Ports: []int{15006}}
	defer w.Close()
	if _, err := w.Clients(time.Now(), nil, quiet, DrainSeen{Known: true}); err == nil {
		t.Fatal("no error before the listener listens")
	}
	w.Reader = &listeningReader{fakeReader: r.fakeReader} // the sidecar now listens
	w.Read()
	if clients, err := w.Clients(time.Now(), nil, quiet, DrainSeen{Known: true}); err != nil || len(clients) != 1 {
		t.Errorf("once it listens: %+v, %v; want its one client", clients, err)
	}
}
