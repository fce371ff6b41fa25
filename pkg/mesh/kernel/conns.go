package kernel

import (
	"net/netip"
	"time"

	"github.com/meshdrain/meshdrain/pkg/sockets"
)

// The connections on the ports the table is read on, from read to read: which are a
// client's, and what each event of the sockets package's table (sockets.Conns) counts: an
// accept named, data on an open connection, a record of one opened and closed unseen. The
// table's policy is this backend's: a connection is its cookie alone, one a read missed is
// the same when shown again, and a record with another cookie is matched by its ends to a
// connection first seen in TIME_WAIT (connPolicy).

// connPolicy is how this backend follows connections (sockets.ConnPolicy). By cookie only: a
// read from /proc (no cookie) shows the same connection as long as its ends stay, as this
// backend has always counted it (the per-client evidence's tracker tells /proc connections
// apart by inode too); an accept no read named is then PassiveOpens' unknown one.
var connPolicy = sockets.ConnPolicy{CookieOnly: true, RestoreMissed: true, RecordByAddress: sockets.MatchFirstTimeWait}

type connKind uint8

const (
	clientConn  connKind = iota // a watched port, from a client that counts
	ignoredConn                 // a watched port, from --ignore-source or the pod itself
	otherPort                   // another listening port: not a client's (ztunnel's own, a metrics port)
)

// conn is what this backend keeps of a connection on a port the table is read on (its
// identity, bytes and record are the table's: sockets.Conn).
type conn struct {
	kind     connKind
	port     uint16
	client   *client
	opened   time.Time
	baseline bool // open when the watch began
}

type client struct {
	addr              netip.Addr
	ignored           bool
	firstSeen         time.Time
	open              int
	newConns          int
	lastNewConn       time.Time
	newPastBound      int
	lastNewPastBound  time.Time
	lastData          time.Time
	oldData           time.Time // latest data on a connection opened before the bound (or the watch)
	sendingOldSince   time.Time // first data past the bound on such a connection
	counted           bool      // showed activity that counted
	lastCountedAction time.Time
	// lastCountedOther is its latest counted activity but the data on connections opened
	// before the bound: once it is seen to never learn (sendingOldSince), that data was no
	// learning client's (Summary.LastLearning).
	lastCountedOther time.Time
	// opens is how it opens connections: past the bound, at the period it had before, it
	// addresses the pod directly (cadence.go).
	opens cadence
}

// skipped are the sockets that are no connection yet: a handshake in progress is not
// counted in PassiveOpens until it completes.
func skipped(s sockets.Socket) bool {
	return s.State == sockets.SynRecv || s.State == sockets.NewSynRecv || s.State == sockets.Listen
}

// own says whether a connection from remote is the hook's own (Options.Own).
func (k *Kernel) own(remote netip.AddrPort) bool {
	return k.opts.Own != nil && k.opts.Own(remote)
}

func (k *Kernel) ignored(addr netip.Addr) bool {
	for _, p := range k.opts.Ignore {
		if p.Contains(addr) {
			return true
		}
	}
	return false
}

func (k *Kernel) newConn(now time.Time, s sockets.Socket) *conn {
	c := &conn{port: s.Local.Port(), opened: now}
	switch {
	case !k.watched[c.port] || k.own(s.Remote):
		// The hook's own reads of the app's metrics are no client's, nor is their address:
		// a proxy of the pod that forwards to the app from the same loopback address stays
		// a client.
		c.kind = otherPort
	case s.FromThePod() || k.ignored(s.Remote.Addr()):
		c.kind = ignoredConn
		c.client = k.client(s.Remote.Addr(), now, true)
	default:
		c.client = k.client(s.Remote.Addr(), now, false)
	}
	return c
}

func (k *Kernel) client(addr netip.Addr, now time.Time, ignored bool) *client {
	c, ok := k.clients[addr]
	if !ok {
		c = &client{addr: addr, firstSeen: now, ignored: ignored}
		k.clients[addr] = c
	}
	return c
}

// old says whether c was opened before the lag bound (with none, before the watch began):
// routed per connection, it goes on to this pod whatever its client's routing learns.
func (k *Kernel) old(c *conn) bool {
	if b := k.boundAt(); !b.IsZero() {
		return c.baseline || c.opened.Before(b)
	}
	return c.baseline
}

// countedOpen says whether a connection still open at the latest read counts: a client's
// that is not old (opened past the lag bound, or with none, since the watch began), nor a
// caller's that addresses the pod directly.
func (k *Kernel) countedOpen() bool {
	for tc := range k.conns.All() {
		if c := tc.Of; c.kind == clientConn && !tc.Freed && !tc.TimeWait && !k.old(c) && !k.notWaitedFor(c.client) {
			return true
		}
	}
	return false
}

// observe takes one socket of the read r and returns 1 if it names an accept.
func (k *Kernel) observe(r *readResult, s sockets.Socket) int {
	now := r.at
	ev := k.conns.Show(s)
	if ev.Kind == sockets.Accepted {
		// A TIME_WAIT socket no read showed open (the pod's side closed first, between two
		// reads) is named here, at the read whose counters hold its accept; its full
		// socket's record, now or at the next read, finds it and names nothing more.
		c := k.newConn(now, s)
		ev.Conn.Of = c
		k.accepted(r, c)
		k.countOpen(c, s)
		k.inFlight(r, c, s)
		return 1
	}
	c := ev.Conn.Of
	if c.kind == clientConn && k.own(s.Remote) {
		// The hook's own connection, recorded only once a read had shown it (a dial that
		// finished after its request gave up): what it counted stays counted, nothing more.
		c.kind, c.client = otherPort, nil
	}
	k.countOpen(c, s)
	if ev.Data {
		k.data(r, c, s.DataAt(now), segments(ev.Before.Segs, s.DataSegsIn))
	}
	k.inFlight(r, c, s)
	return 0
}

func (k *Kernel) countOpen(c *conn, s sockets.Socket) {
	if c.client != nil && s.State == sockets.Established {
		c.client.open++
	}
}

// inFlight counts a request not yet answered, at the read r, on a connection that counts.
func (k *Kernel) inFlight(r *readResult, c *conn, s sockets.Socket) {
	if c.kind == clientConn && s.State == sockets.Established && s.InFlight() && !(k.old(c) && k.pastBound(r.at)) && !k.notWaitedFor(c.client) {
		k.active[c.port]++
	}
}

// record takes one destruction record, with the read r, and returns 1 if it names an accept
// no read showed.
func (k *Kernel) record(r *readResult, f sockets.Socket) int {
	now := r.at
	ev, ok := k.conns.Record(f)
	switch {
	case !ok:
		return 0
	case ev.Kind == sockets.Brief:
		if f.DataBefore(k.baselineAt) {
			// Freed just before the baseline read, its record late: an accept of before the
			// watch, in the baseline's PassiveOpens, and no activity of the drain.
			return 0
		}
		// Opened and closed between two reads.
		k.accepted(r, k.newConn(now, f))
		return 1
	case ev.Data:
		// More than the FIN the record's count may hold: data since the last read.
		k.data(r, ev.Conn.Of, f.DataAt(now), segments(ev.Before.Segs, f.DataSegsIn))
	}
	return 0
}

// segments is how many requests new data stands for: the data segments received since the
// last read (a small request is one), at least one.
func segments(then, now uint32) int {
	if now > then && then > 0 {
		return int(now - then)
	}
	return 1
}

// observeTable takes the sockets of the read r and returns the accepts they name: namedNew
// those the table shows for the first time, namedLate those that may be older. A connection
// the table shows for the first time was accepted after the previous read's table (it would
// have been in it), unless that read skipped it half open (synRecv) or the table comes
// without cookies (/proc); a record can come any number of reads after its accept.
func (k *Kernel) observeTable(r *readResult, socks []sockets.Socket) (namedNew, namedLate int) {
	for _, cl := range k.clients {
		cl.open = 0
	}
	clear(k.active)
	for _, s := range socks {
		if skipped(s) {
			if s.State == sockets.SynRecv {
				k.synRecv.Remember(s.Cookie, struct{}{}, k.reads)
			}
			continue
		}
		if s.HasTCPInfo {
			k.tcpInfo = true
		}
		n := k.observe(r, s)
		if _, half := k.synRecv.Take(s.Cookie); half || s.Cookie == 0 {
			// Half open at an earlier read, or read from /proc (no cookie: a connection a
			// read missed cannot be told from a new one): possibly an older accept.
			namedLate += n
		} else {
			namedNew += n
		}
	}
	return namedNew, namedLate
}

// forgetUnseen drops the connections the latest read did not show, remembering those whose
// record is still to come (sockets.Conns.EndRead).
func (k *Kernel) forgetUnseen() { k.conns.EndRead(nil) }
