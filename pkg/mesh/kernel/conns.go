package kernel

import (
	"net/netip"
	"time"

	"github.com/meshdrain/meshdrain/pkg/sockets"
)

// The connections on the ports the table is read on, from read to read: which are a
// client's, when one is new (an accept named), when one is the same as before (restored from
// the forgotten), and what their destruction records add. Identity, bytes received and the
// memory of a gone connection are the sockets package's (sockets.ConnKey, Received,
// VanishedConns), shared with the per-client evidence of the sidecar meshes.

type connKind uint8

const (
	clientConn  connKind = iota // a watched port, from a client that counts
	ignoredConn                 // a watched port, from --ignore-source or the pod itself
	otherPort                   // another listening port: not a client's (ztunnel's own, a metrics port)
)

// conn is a connection on a port the table is read on. Its identity is its cookie alone
// (id): the backend does not tell apart, by inode, two connections on the same ends that a
// read from /proc shows (see id).
type conn struct {
	cookie    uint64
	kind      connKind
	port      uint16
	client    *client
	opened    time.Time
	baseline  bool // open when the watch began
	recv      sockets.Received
	seen      int
	destroyed bool
	// timeWait: first seen as TIME_WAIT. A connection no read showed open carries no cookie
	// of its own into TIME_WAIT (the kernel makes one only when asked), so its full socket's
	// record, with another cookie, is matched by its addresses.
	timeWait bool
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
	c := &conn{cookie: s.Cookie, port: s.Local.Port(), opened: now, recv: sockets.ReceivedBy(s), seen: k.reads}
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
	for _, c := range k.conns {
		if c.kind == clientConn && !c.destroyed && !c.timeWait && !k.old(c) && !k.notWaitedFor(c.client) {
			return true
		}
	}
	return false
}

// observe takes one socket of the read r and returns 1 if it names an accept.
func (k *Kernel) observe(r *readResult, s sockets.Socket) int {
	now := r.at
	key := sockets.KeyOf(s)
	c, ok := k.conns[key]
	if ok && !c.id().Same(s) {
		// The same addresses, a later connection: the earlier one's record, if still to
		// come, finds it among the forgotten and names nothing.
		if !c.destroyed {
			k.forgotten.Remember(c.cookie, c, k.reads)
		}
		ok = false
	}
	if !ok {
		if gone, found := k.forgotten.Take(s.Cookie); found {
			// A connection a read missed (a dump resumes a hash bucket by position, and can
			// skip one when another in the bucket is freed meanwhile), shown again: the same.
			c, ok = gone, true
			k.conns[key] = c
		}
	}
	if !ok {
		// A TIME_WAIT socket no read showed open (the pod's side closed first, between two
		// reads) is named here, at the read whose counters hold its accept; its full
		// socket's record, now or at the next read, finds it and names nothing more.
		c = k.newConn(now, s)
		c.timeWait = s.State == sockets.TimeWait
		k.conns[key] = c
		c.seen = k.reads
		k.accepted(r, c)
		k.countOpen(c, s)
		k.inFlight(r, c, s)
		return 1
	}
	c.seen = k.reads
	if s.Cookie != 0 {
		c.cookie = s.Cookie
	}
	if c.kind == clientConn && k.own(s.Remote) {
		// The hook's own connection, recorded only once a read had shown it (a dial that
		// finished after its request gave up): what it counted stays counted, nothing more.
		c.kind, c.client = otherPort, nil
	}
	k.countOpen(c, s)
	if segsBefore := c.recv.Segs; c.recv.Grew(s) {
		k.data(r, c, s.DataAt(now), segments(segsBefore, s.DataSegsIn))
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
	if f.Cookie == 0 {
		return 0
	}
	var c *conn
	if gone, ok := k.forgotten.Take(f.Cookie); ok {
		c = gone
	} else if known, ok := k.conns[sockets.KeyOf(f)]; ok && (known.cookie == f.Cookie || known.timeWait) {
		// Matched once: a later connection on the same addresses is another.
		c, known.timeWait = known, false
	}
	if c == nil {
		if f.DataBefore(k.baselineAt) {
			// Freed just before the baseline read, its record late: an accept of before the
			// watch, in the baseline's PassiveOpens, and no activity of the drain.
			return 0
		}
		// Opened and closed between two reads.
		c = k.newConn(now, f)
		c.destroyed = true
		k.accepted(r, c)
		return 1
	}
	if c.destroyed {
		return 0
	}
	c.destroyed = true
	// More than the FIN the record's count may hold: data since the last read.
	if c.recv.InRecord(f) {
		k.data(r, c, f.DataAt(now), segments(c.recv.Segs, f.DataSegsIn))
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

// id is c's identity for sockets.ConnID.Same, by cookie only: a read from /proc (no cookie)
// shows the same connection as long as its ends stay, as this backend has always counted it
// (the per-client evidence's tracker tells /proc connections apart by inode too); an accept
// no read named is then PassiveOpens' unknown one.
func (c *conn) id() sockets.ConnID { return sockets.ConnID{Cookie: c.cookie} }

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
// record is still to come (forgotten).
func (k *Kernel) forgetUnseen() {
	for key, c := range k.conns {
		if c.seen == k.reads {
			continue
		}
		delete(k.conns, key)
		if !c.destroyed {
			k.forgotten.Remember(c.cookie, c, k.reads)
		}
	}
	k.forgotten.Expire(k.reads)
}
