package sockets

import (
	"testing"
	"time"
)

// Regime (b): nothing drains the pod, so a client keeps using its pooled connection until it
// drops the endpoint, then closes it idle. That close is a departure in the undrained mode,
// and only sending in the default one (where a draining Envoy's Connection: close makes
// clients close right after a request).
func TestUndrainedPoolCloseIsADeparture(t *testing.T) {
	for _, undrained := range []bool{false, true} {
		tr := Begin(at(0), []Socket{withInfo(sock("10.1.0.1", 40000, Established, 11), 100, 0)})
		if undrained {
			tr.Undrained()
		}
		tr.Observe(at(1), []Socket{withInfo(sock("10.1.0.1", 40000, Established, 11), 300, 0)}) // a request
		wantState(t, clientOf(t, tr, "10.1.0.1"), map[bool]ClientState{false: Sending, true: Holding}[undrained])
		tr.Observe(at(2), []Socket{withInfo(sock("10.1.0.1", 40000, Established, 11), 300, time.Second)}) // idle
		tr.Observe(at(3), nil)                                                                            // closed by the client
		wantState(t, clientOf(t, tr, "10.1.0.1"), map[bool]ClientState{false: Sending, true: Left}[undrained])
	}
}

// One-request connections are not a pool's: seen in one read only, their close says nothing
// even when the pod is not draining; a pool's connection closed busy or idle is a departure.
func TestUndrainedOneRequestConnectionsAreNotDepartures(t *testing.T) {
	tr := Begin(at(0), nil)
	tr.Undrained()
	tr.Observe(at(1), []Socket{withInfo(sock("10.1.0.2", 41000, Established, 21), 200, 0)})
	wantState(t, clientOf(t, tr, "10.1.0.2"), Holding)
	tr.Observe(at(2), nil) // closed after one sighting
	wantState(t, clientOf(t, tr, "10.1.0.2"), Sending)

	// A pool's connection opened since the drain began, busy at both sightings, closed.
	tr.Observe(at(6), []Socket{withInfo(sock("10.1.0.2", 41002, Established, 23), 100, 0)})
	tr.Observe(at(7), []Socket{withInfo(sock("10.1.0.2", 41002, Established, 23), 400, 0)})
	tr.Observe(at(8), nil)
	wantState(t, clientOf(t, tr, "10.1.0.2"), Left)
}

// While the pod drains, an idle drain-start connection can carry a request, be told
// Connection: close and be closed by its client between two reads. If requests reached the
// pod meanwhile, its vanishing is no departure; if none did, it is.
func TestVanishedWhileRequestsArrivedIsNoDeparture(t *testing.T) {
	for _, arrived := range []bool{true, false} {
		tr := Begin(at(0), []Socket{withInfo(sock("10.1.0.3", 42000, Established, 31), 100, 0)})
		if arrived {
			tr.RequestsArrived()
		}
		tr.Observe(at(1), nil)
		want := map[bool]ClientState{true: Sending, false: Left}[arrived]
		wantState(t, clientOf(t, tr, "10.1.0.3"), want)
	}
}
