// Package evidence is the per-client evidence in a pod: it reads the pod's own socket table
// on the sidecar's inbound listener (package sockets), with the kernel's records of the
// connections freed between two reads, and tracks each client address from the drain's
// start. Table is prestop's (drain.ClientEvidence); Watch is what meshdrain status shows. Both
// judge through one clientTable and one sockets.Tracker, so that status shows each client as
// prestop counts it. The app container shares the pod's network namespace, and the table
// needs no privilege (docs/facts.md §6).
package evidence

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/meshdrain/meshdrain/pkg/hook/drain"
	"github.com/meshdrain/meshdrain/pkg/hook/regime"
	"github.com/meshdrain/meshdrain/pkg/mesh"
	"github.com/meshdrain/meshdrain/pkg/sockets"
	"go.uber.org/zap"
)

// maxHolders is how many holding clients the counts name: enough for a log line.
const maxHolders = 8

// Table is the evidence of one drain.
type Table struct {
	// Reader reads the socket table (sockets.NewReader in a pod).
	Reader sockets.Reader
	// Ports are the inbound listener's ports; empty takes them from the sidecar's stats at
	// Begin (the listener the stats name, Istio's virtualInbound on 15006).
	Ports []int
	// Now is the clock (time.Now in a pod).
	Now func() time.Time
	// Every is the least time between two reads (default ReadEvery; prestop gives ReadPolls
	// polls); polls in between get the last read's counts.
	Every time.Duration
	// Undrained: the sidecar's own drain is deferred until meshdrain decides (--drain-at
	// end), so a client's close of an idle pooled connection is a departure even if it
	// carried requests since the start (sockets.Tracker.Undrained).
	Undrained bool

	table    clientTable
	lastRead time.Time
	last     drain.ClientCounts
	// atRead is the traffic at the last read.
	atRead drain.Traffic
	// regime follows the sidecar's drain closes from the drain's start (regime.Watch,
	// the definition of the final event's drain_regime): Undrained, a rise gives the evidence
	// up, and a count above zero at the start keeps every close from passing for a departure
	// until the sidecar is seen answering without telling a connection to close (unconfirmed).
	regime regime.Watch
	// prevPoll is the traffic at the previous poll.
	prevPoll drain.Traffic
}

// ReadPolls is how many polls apart the table is read. A read walks the node's whole
// established-connection hash in the kernel, whatever the pod holds (2.8–4 ms of CPU on a
// 2-core test machine with a few connections, about 7 ms with 2,000): every fifth poll keeps
// the hook's CPU near what it was without evidence, and a client's close is still seen
// within five polls of it (a second at the default 200 ms poll). Tied to the poll, the
// interval follows a simulator's time scale as every other duration does.
const ReadPolls = 5

// ReadEvery is the read interval at the default poll.
const ReadEvery = ReadPolls * drain.DefaultPoll

// BusyReads is how many read intervals apart the table is read while the stats move at every
// poll (requests arrive, connections open or close). What a read would add is cumulative
// (bytes received, connections gone), counts read before the latest arrivals shorten no
// window (Stale), holders not yet seen to close only hold longer, and the first poll at which
// the stats stand still reads again: reading less costs nothing in when the evidence is
// ready.
const BusyReads = 5

var _ drain.ClientEvidence = (*Table)(nil)

// Begin reads the table once, as the drain begins: the connections open now are the ones
// whose fate is the evidence. The kernel's records of connections it frees are watched from
// here until ctx ends (sockets.GoneWatch).
func (t *Table) Begin(ctx context.Context, start time.Time, snap mesh.Snapshot) error {
	if err := t.table.open(t.Reader, t.Ports, snap.Listener); err != nil {
		return err
	}
	context.AfterFunc(ctx, t.table.close)
	if err := t.table.read(); err != nil {
		return err
	}
	t.lastRead = t.Now()
	t.atRead = drain.TrafficOf(snap, snap.Read())
	// A drain-close count already above zero: the sidecar told connections to close before
	// this first read, either now (its own drain at the deletion, which --drain-at end
	// assumes turned off, came first) or long ago (a listener update drains the connections
	// of a changed filter chain). Taken for a baseline, a drain of now would show no rise
	// until the clients send again, and the closes it caused before this read would pass
	// for departures meanwhile (drainedBefore).
	t.regime.Observe(t.atRead, regime.DrainClosesExposed(snap))
	t.table.begin(t.lastRead)
	// Data a client sent since the hook started is the drain's, read or not.
	t.table.tracker.BeganAt(start)
	if t.Undrained {
		// A connection answered and still open a read interval later is a pool's: a client
		// that opens one per request closes it within milliseconds, even loaded.
		t.table.tracker.Undrained(t.every())
	} else {
		t.table.drainedBefore(t.lastRead, t.every())
	}
	t.last = t.count()
	return nil
}

// Counts reads the table again, at most every Every and only if something arrived, opened
// or closed since the last read, and sums the clients by state. Between reads it returns the
// last read's counts, marked Stale once requests have arrived since.
func (t *Table) Counts(_ context.Context, now drain.Traffic) (drain.ClientCounts, error) {
	t.regime.Observe(now, now.DrainCloses != nil)
	if seen := t.regime.Seen(); t.Undrained && seen.Rise > 0 {
		// Its clients close right after a response that said Connection: close: a close
		// is no longer a departure. The coordinator drops the evidence and says why.
		t.table.close()
		return drain.ClientCounts{}, fmt.Errorf("the sidecar drains although meshdrain defers its drain (--drain-at end): it told %.0f connections to close (http.<prefix>.downstream_cx_drain_close), so a client's close may follow that and not its endpoint update; check that the sidecar's own drain at the deletion is turned off (docs/decision-rule.md)", seen.Rise)
	}
	at := t.Now()
	arrived := moved(now.Arrivals, t.atRead.Arrivals)
	busy := changed(now, t.prevPoll)
	t.prevPoll = now
	if !t.due(at, now, arrived, busy) {
		c := t.last
		c.Stale = arrived
		return t.unconfirmed(c), nil
	}
	if err := t.table.read(); err != nil {
		return drain.ClientCounts{}, err
	}
	t.atRead = now
	t.table.observe(at, arrived)
	t.lastRead = at
	t.last = t.count()
	return t.unconfirmed(t.last), nil
}

// drainedBefore says, Undrained, that the sidecar had told connections to close before the
// drain began, and has not been seen answering without doing so since (a poll showed a
// request that arrived after the drain began answered, and a later one that the counter still
// stands: regime.Watch). A draining sidecar tells one on every answer with Istio's
// immediate drain strategy (docs/facts.md §2).
func (t *Table) drainedBefore() bool {
	seen := t.regime.Seen()
	return t.Undrained && seen.AtFirst > 0 && !seen.Answered
}

// unconfirmed counts the clients that left as sending while drainedBefore: their closes may
// have followed the sidecar's Connection: close, and silence judges them.
func (t *Table) unconfirmed(c drain.ClientCounts) drain.ClientCounts {
	if t.drainedBefore() {
		c.Sending += c.Left
		c.Left = 0
	}
	return c
}

var _ drain.Learners = (*Table)(nil)

// Learnt are the clients that let go of a pooled connection they had when the drain began,
// each at the read that first saw it (a read interval late at most). None while
// drainedBefore: their closes may have followed the sidecar's Connection: close. A client
// that sent and then stopped shows no learning here, however quiet it fell: silence is not
// evidence of a route.
func (t *Table) Learnt() []drain.Learnt {
	if t.table.tracker == nil || t.drainedBefore() {
		return nil
	}
	var out []drain.Learnt
	for _, cl := range t.table.clients() {
		if cl.State == sockets.Left && !cl.LeftAt.IsZero() {
			out = append(out, drain.Learnt{Client: cl.Addr.String(), At: cl.LeftAt, Evidence: drain.EvidenceLetGo})
		}
	}
	return out
}

// Close stops watching the kernel's records of freed connections; Begin's context ending
// does it too.
func (t *Table) Close() { t.table.close() }

// sidecarsSockets says which of the sockets on ports are the sidecar's: those owned by the
// user that owns the inbound listener the stats name (Istio's 15006, owned by the proxy's
// uid). Under REDIRECT every socket accepted there is; under TPROXY the clients' connections
// are on the app's ports, given with --inbound-listener-port, beside the app's own
// connections from its sidecar, with the same client addresses (Envoy's original_src), and
// the owner is what tells them apart. Where the stats name no listener, or one that does not
// listen in this network namespace (the simulator names Istio's 15006 and listens elsewhere),
// the ports given are taken for the listener's own and every socket counts. Where its owner
// cannot be read, every socket counts if the ports are the listener's; otherwise the evidence
// cannot be had, nor where an app listens on a watched port as the sidecar's user (the
// sockets it accepts from its sidecar would pass for the sidecar's).
func sidecarsSockets(r sockets.Reader, listener *mesh.Listener, ports []uint16) (*sockets.Owned, error) {
	port, err := listenerPort(mesh.Snapshot{Listener: listener})
	if err != nil {
		return nil, nil
	}
	onlyTheListeners := len(ports) == 1 && int(ports[0]) == port
	lr, ok := r.(sockets.ListenerReader)
	var listening []sockets.Socket
	if ok {
		// The inbound listener and, on the other watched ports, the app's, in one read.
		listening, err = lr.Listeners(append([]uint16{uint16(port)}, ports...))
	} else {
		err = errors.New("the socket table reader cannot read listening sockets")
	}
	if err != nil {
		if onlyTheListeners {
			return nil, nil
		}
		return nil, fmt.Errorf("the watched ports %v are not the inbound listener's (%d), and its owner, which tells the sidecar's connections from the app's own there, cannot be read: %w", ports, port, err)
	}
	var sidecar, apps []sockets.Socket
	for _, l := range listening {
		if int(l.Local.Port()) == port {
			sidecar = append(sidecar, l)
		} else {
			apps = append(apps, l)
		}
	}
	if len(sidecar) == 0 {
		return nil, nil
	}
	uid := sidecar[0].UID
	for _, s := range sidecar[1:] {
		if s.UID != uid {
			return nil, fmt.Errorf("the listeners on port %d belong to different users (%d and %d): which is the sidecar's is unknown", port, uid, s.UID)
		}
	}
	for _, a := range apps {
		if a.UID == uid {
			return nil, fmt.Errorf("the app listening on %v runs as the sidecar's user (uid %d, the owner of the inbound listener on port %d): the connections it accepts from its sidecar cannot be told from the clients' to the sidecar", a.Local, uid, port)
		}
	}
	return &sockets.Owned{UID: uid}, nil
}

// due says whether the table is to be read at at. Not before Every has passed (with a tenth
// of slack: the poll that is due reads even if its timer fired a little early); not while
// the sidecar's stats show no request arrived and no connection was opened or closed since
// the last read: the table would say the same (a client's close is seen by its Envoy at once,
// and a connection's fate is all the tracker follows); and only every BusyReads intervals
// while the stats move at every poll (busy). A read walks the node's whole connection hash,
// so clients holding idle connections cost nothing to watch.
func (t *Table) due(at time.Time, now drain.Traffic, arrived, busy bool) bool {
	every := t.every()
	since := at.Sub(t.lastRead)
	switch {
	case since < every-every/10:
		return false
	case busy && since < BusyReads*every-every/10:
		return false
	}
	return arrived || moved(now.Opened, t.atRead.Opened) || moved(now.Open, t.atRead.Open)
}

// changed says whether the stats, all known in both polls, moved from then to now.
func changed(now, then drain.Traffic) bool {
	for _, v := range [][2]*float64{{now.Arrivals, then.Arrivals}, {now.Opened, then.Opened}, {now.Open, then.Open}} {
		if v[0] != nil && v[1] != nil && *v[0] != *v[1] {
			return true
		}
	}
	return false
}

// every is the read interval: Every, or ReadEvery.
func (t *Table) every() time.Duration {
	if t.Every > 0 {
		return t.Every
	}
	return ReadEvery
}

// moved says whether a counter or gauge differs from its value at the last read, or either
// is unknown.
func moved(now, then *float64) bool {
	return now == nil || then == nil || *now != *then
}

// count sums the clients by state, and names a few holders for the final event.
func (t *Table) count() drain.ClientCounts {
	clients := t.table.clients()
	c := CountClients(clients)
	var holders Holders
	for _, cl := range clients {
		if cl.State == sockets.Holding && len(holders) < maxHolders {
			holders = append(holders, cl.Addr.String())
		}
	}
	if len(holders) > 0 {
		c.Named = holders
	}
	return c
}

// CountClients sums clients by state as the rule reads them: prestop's table at each read,
// and status's Watch at each sample, so that both judge the same evidence alike.
func CountClients(clients []sockets.Client) drain.ClientCounts {
	var c drain.ClientCounts
	for _, cl := range clients {
		switch cl.State {
		case sockets.Holding:
			c.Holding++
		case sockets.Sending:
			c.Sending++
			if cl.LastData.After(c.LastSent) {
				c.LastSent = cl.LastData
			}
		case sockets.Left:
			c.Left++
		default:
			c.NoEvidence++
		}
	}
	return c
}

// Holders are the holding clients' addresses (a few, for the log), the socket table's own
// account of its clients in the final event (drain.ClientCounts.Named).
type Holders []string

// FinalFields is the final event's clients_held_on.
func (h Holders) FinalFields() []zap.Field {
	// Past the lag bound these did not let go on their own: not mesh sidecars (an ingress
	// controller's keep-alive pool, a client without a sidecar).
	return []zap.Field{zap.Strings("clients_held_on", h)}
}

// HoldersOf are the holding clients the counts name; nil for none.
func HoldersOf(c drain.ClientCounts) []string {
	h, _ := c.Named.(Holders)
	return h
}

// watched are the ports whose connections are the clients': the ones given, or the inbound
// listener's as the sidecar's stats name it.
func watched(given []int, listener *mesh.Listener) ([]uint16, error) {
	ports := given
	if len(ports) == 0 {
		p, err := listenerPort(mesh.Snapshot{Listener: listener})
		if err != nil {
			return nil, err
		}
		ports = []int{p}
	}
	out := make([]uint16, len(ports))
	for i, p := range ports {
		out[i] = uint16(p)
	}
	return out, nil
}

// listenerPort is the inbound listener's port as the sidecar's stats name it
// ("0.0.0.0_15006", "[::]_15006").
func listenerPort(snap mesh.Snapshot) (int, error) {
	if snap.Listener == nil || snap.Listener.Address == "" {
		return 0, fmt.Errorf("the sidecar's stats name no inbound listener (Istio: listener.0.0.0.0_15006 in statsInclusionPrefixes); name its port with --inbound-listener-port")
	}
	addr := snap.Listener.Address
	i := strings.LastIndexByte(addr, '_')
	p, err := strconv.Atoi(addr[i+1:])
	if i < 0 || err != nil || p < 1 || p > 65535 {
		return 0, fmt.Errorf("inbound listener address %q has no port; name it with --inbound-listener-port", addr)
	}
	return p, nil
}
