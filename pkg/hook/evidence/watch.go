package evidence

import (
	"time"

	"github.com/meshdrain/meshdrain/pkg/hook/drain"
	"github.com/meshdrain/meshdrain/pkg/hook/regime"
	"github.com/meshdrain/meshdrain/pkg/mesh"
	"github.com/meshdrain/meshdrain/pkg/sockets"
)

// Watch follows the clients of a live sidecar for `meshdrain status`, judged as prestop judges
// them (the same clientTable and tracker): the first read is the baseline (what the drain's
// start is to Table), and every later read says which clients still hold the connections they
// had then, which send, which have let go. Until the sidecar is seen draining it judges as
// prestop with --drain-at end does (nothing tells a client to close, so a pooling client's
// close is a departure); from the read at which it is seen draining, as prestop does in a
// draining pod, with the connections open then as the drain-start ones
// (sockets.Tracker.DrainBegins). Not safe for concurrent use; Close ends it.
type Watch struct {
	Reader sockets.Reader
	// Ports are the inbound listener's ports; empty takes them from the first sample's
	// listener.
	Ports []int
	// Every is the time between two samples (status --interval): how long an answered
	// connection must stay open to show a pool, as prestop's read interval is.
	Every time.Duration

	table    clientTable
	began    bool
	draining bool
	arrivals *float64
	// read: Read took this sample's read; readErr is why it failed.
	read    bool
	readErr error
	// failed: the sidecar's sockets cannot be told apart on the watched ports (open
	// failed); said at every sample.
	failed error
}

// DrainSeen is what the sidecar's stats say of its drain: whether they count the connections
// it told to close because it drains (its HTTP connection manager's stats are exposed), and
// how many.
type DrainSeen struct {
	Known  bool
	Closes float64
}

// DrainOf reads the drain from a snapshot: known where an inbound endpoint has HTTP
// connection manager stats (http.<prefix>.*), whose drain-close counter a usedonly poll
// leaves out until it is used.
func DrainOf(snap mesh.Snapshot) DrainSeen {
	d := DrainSeen{Known: regime.DrainClosesExposed(snap)}
	for _, e := range snap.Endpoints {
		if e.HTTPDrainCloses != nil {
			d.Closes += *e.HTTPDrainCloses
		}
	}
	return d
}

// Draining says whether the sidecar is seen draining: it has told connections to close
// (regime.SidecarDrains, since it started). Unknown counts as draining for the clients'
// judgement: the draining rules are sound whoever drains, the undrained ones only while
// nothing does.
func (d DrainSeen) Draining() bool { return !d.Known || regime.SidecarDrains(nil, &d.Closes) }

// Read reads the table now, before the sample's stats are fetched: a close this read shows
// after a response that said Connection: close had that response counted in the stats that
// follow, so the sample that shows the close also shows the drain. The first sample reads in
// Clients (its listener names the ports).
func (w *Watch) Read() {
	w.read, w.readErr = false, nil
	if !w.began || w.failed != nil {
		return
	}
	w.readErr = w.table.read()
	w.read = true
}

// Clients judges this sample's read (Read, or now on the first sample): listener is the
// sample's inbound listener (its port is watched when Ports is empty), traffic what its stats
// say of arrivals, drain what they say of the sidecar's drain.
func (w *Watch) Clients(now time.Time, listener *mesh.Listener, traffic drain.Traffic, drainSeen DrainSeen) ([]sockets.Client, error) {
	if w.failed != nil {
		return nil, w.failed
	}
	if !w.began {
		if err := w.begin(now, listener, drainSeen); err != nil {
			return nil, err
		}
		w.arrivals = traffic.Arrivals
		return w.table.clients(), nil
	}
	if !w.read {
		w.Read()
	}
	w.read = false
	if w.readErr != nil {
		return nil, w.readErr
	}
	if !w.draining && drainSeen.Draining() {
		w.draining = true
		w.table.tracker.DrainBegins()
	}
	w.table.observe(now, moved(traffic.Arrivals, w.arrivals))
	w.arrivals = traffic.Arrivals
	return w.table.clients(), nil
}

func (w *Watch) begin(now time.Time, listener *mesh.Listener, drainSeen DrainSeen) error {
	if err := w.table.open(w.Reader, w.Ports, listener); err != nil {
		w.failed = err
		return err
	}
	if err := w.table.listening(len(w.Ports) == 0); err != nil {
		// The next sample looks again: a watch may start before the sidecar listens.
		w.table.close()
		return err
	}
	if err := w.table.read(); err != nil {
		w.table.close()
		return err // the next sample tries again
	}
	w.table.begin(now)
	w.began = true
	w.draining = drainSeen.Draining()
	every := w.Every
	if every <= 0 {
		every = time.Second
	}
	if w.draining {
		w.table.drainedBefore(now, every)
	} else {
		w.table.tracker.Undrained(every)
	}
	return nil
}

// Close stops watching the kernel's records of freed connections.
func (w *Watch) Close() { w.table.close() }
