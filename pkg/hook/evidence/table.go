package evidence

import (
	"errors"
	"fmt"
	"time"

	"github.com/meshdrain/meshdrain/pkg/mesh"
	"github.com/meshdrain/meshdrain/pkg/sockets"
)

// clientTable is what prestop's Table and status's Watch share: the reads of the socket table
// on the inbound listener's ports, the kernel's records of the connections freed between two
// reads, and the one sockets.Tracker that judges each client from them. Both therefore say the
// same of a client given the same reads: one definition of its state.
type clientTable struct {
	reader  sockets.Reader
	ports   []uint16
	owned   *sockets.Owned // nil: every socket on the ports is the sidecar's
	gone    *sockets.GoneWatch
	tracker *sockets.Tracker

	// The read taken by read and not yet observed: the sockets, the records of connections
	// freed before it, and whether none was lost.
	socks    []sockets.Socket
	final    []sockets.Socket
	complete bool
}

// recordWait bounds how long a read waits for the records of drain-start connections it
// finds gone: the kernel broadcasts them within microseconds, from a work queue that a loaded
// node may run late.
const recordWait = 100 * time.Millisecond

// open settles the watched ports (given, or the inbound listener's as the stats name it) and
// whose sockets count, and starts watching the kernel's records of freed connections. Without
// those records (no inet_diag, an old kernel) a connection gone between two reads is judged
// by whether requests arrived meanwhile, as the tracker says.
func (c *clientTable) open(r sockets.Reader, given []int, listener *mesh.Listener) error {
	ports, err := watched(given, listener)
	if err != nil {
		return err
	}
	owned, err := sidecarsSockets(r, listener, ports)
	if err != nil {
		return err
	}
	c.reader, c.ports, c.owned = r, ports, owned
	if g, ok := r.(sockets.GoneWatcher); ok {
		// Before the first read: a connection freed after it must have its record.
		if gone, err := g.WatchGone(ports); err == nil {
			c.gone = gone
		}
	}
	return nil
}

// read takes the kernel's records of the connections freed so far, then reads the table, so
// that a connection a record names is already gone from the read. The owner filter (TPROXY)
// applies to both.
func (c *clientTable) read() error {
	var final []sockets.Socket
	complete := false
	if c.gone != nil && !c.withoutData() {
		final, complete = c.gone.Take()
	}
	socks, err := c.reader.Read(c.ports)
	if err != nil {
		return err
	}
	if c.owned != nil {
		socks, final = c.owned.KeepRead(socks, final)
	}
	if c.tracker != nil && complete {
		if missing := c.tracker.Vanished(socks, final); len(missing) > 0 {
			// A connection the client closed is dropped from the table just before the
			// kernel frees it and broadcasts its record: on a busy node that can take a
			// moment. A record coming later is judged a read later.
			c.gone.Await(missing, recordWait)
			more, ok := c.gone.Take()
			if c.owned != nil {
				more = c.owned.KeepLate(more)
			}
			final, complete = append(final, more...), ok
		}
	}
	c.socks, c.final, c.complete = socks, final, complete
	return nil
}

// begin starts the tracker from the last read: the connections open in it are the
// drain-start ones.
func (c *clientTable) begin(at time.Time) {
	c.tracker = sockets.Begin(at, c.socks)
	c.socks, c.final = nil, nil
}

// drainedBefore says the sidecar drained already as the first read was taken at at: its
// drain began with the hook, or before status's first sample. A response it sent then said
// Connection: close, and the client closes that connection right after, so a connection
// answered within a read interval of the first read is not taken for an idle one (a client's
// Envoy closes within milliseconds; one answered earlier and still open was not told to).
func (c *clientTable) drainedBefore(at time.Time, every time.Duration) {
	c.tracker.DrainedSince(at.Add(-every))
}

// observe judges the last read; arrived says requests reached the pod since the read before.
func (c *clientTable) observe(at time.Time, arrived bool) {
	if arrived {
		c.tracker.RequestsArrived()
	}
	if c.gone != nil && !c.withoutData() {
		c.tracker.Closed(c.final, c.complete)
	}
	c.tracker.Observe(at, c.socks)
	c.socks, c.final = nil, nil
}

// clients is each client's state after the last read, as prestop counts it and status shows
// it. Without tcp_info (the /proc fallback) a close cannot show that the connection was idle:
// a client's Envoy also closes a connection right after a response that said Connection:
// close, which the draining pod's Envoy puts on every one; such a client counts as sending.
func (c *clientTable) clients() []sockets.Client {
	clients := c.tracker.Clients()
	if c.withoutData() {
		for i := range clients {
			if clients[i].State == sockets.Left {
				clients[i].State, clients[i].LeftAt = sockets.Sending, time.Time{}
			}
		}
	}
	return clients
}

// withoutData says whether the reads carry no tcp_info (the /proc fallback): bytes
// received cannot be seen, so whether a closed connection carried a request is unknown.
func (c *clientTable) withoutData() bool {
	fb, ok := c.reader.(interface{ FellBack() error })
	return ok && fb.FellBack() != nil
}

// close stops watching the kernel's records; safe to call more than once, and from another
// goroutine than the reads' (GoneWatch is).
func (c *clientTable) close() {
	if c.gone != nil {
		_ = c.gone.Close()
	}
}

// NoListenerError says that nothing listens on the watched ports in this network namespace:
// the socket table read is another one than the pod's, or the ports are not the inbound
// listener's, and no client can be seen.
type NoListenerError struct {
	Ports []uint16
	// FromStats: the ports are the inbound listener's as the sidecar's stats name it, not
	// given (--inbound-listener-port).
	FromStats bool
}

func (e *NoListenerError) Error() string {
	where := "--inbound-listener-port"
	if e.FromStats {
		where = "the inbound listener the sidecar's stats name"
	}
	return fmt.Sprintf("no socket listens on port %s (%s) in this network namespace, so no client can be seen: run status in the pod (kubectl exec), or name the listener's port with --inbound-listener-port", portsText(e.Ports), where)
}

func portsText(ports []uint16) string {
	if len(ports) == 1 {
		return fmt.Sprint(ports[0])
	}
	return fmt.Sprint(ports)
}

// listening checks that something listens on the watched ports here, where the reader can
// tell: an error it cannot is no reason to show nothing.
func (c *clientTable) listening(fromStats bool) error {
	lr, ok := c.reader.(sockets.ListenerReader)
	if !ok {
		return nil
	}
	listeners, err := lr.Listeners(c.ports)
	if err != nil {
		if errors.Is(err, sockets.ErrUnavailable) {
			return err
		}
		return nil
	}
	if len(listeners) == 0 {
		return &NoListenerError{Ports: c.ports, FromStats: fromStats}
	}
	return nil
}
