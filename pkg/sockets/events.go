package sockets

import "iter"

// Conns follows the connections of the ports the table is read on from read to read, and
// turns each read and the destruction records that came with it (GoneWatch.Take) into events:
// a connection accepted, shown again (with data or not), gone from the table, freed (its
// record), or opened and closed between two reads (a record no read explains). It is the one
// place that matches a record to the connection it is of. What a consumer keeps of each
// connection is T; where the consumers of the table differ (the per-client evidence of the
// sidecar meshes, the meshless backend), the difference is a ConnPolicy. It does no I/O and
// reads no clock. Not safe for concurrent use.
//
// A read is: NextRead, Show for each socket the consumer follows, Record for each record,
// then EndRead.
type Conns[T any] struct {
	policy ConnPolicy
	open   map[ConnKey]*Conn[T]
	// vanished are the connections gone from the table (or replaced on their ends) whose
	// record has not come, for VanishedReads reads.
	vanished VanishedConns[*Conn[T]]
	read     int
}

// ConnPolicy is what a consumer of the table decides that the others may decide otherwise.
type ConnPolicy struct {
	// CookieOnly: a connection is its cookie alone; a read from /proc (no cookie) shows the
	// same connection as long as its ends stay. Otherwise its inode tells two /proc
	// connections on the same ends apart too (ConnID.Same).
	CookieOnly bool
	// RestoreMissed: a connection gone from a read and shown again by a later one, by its
	// cookie, is the same connection (a dump resumes a hash bucket by position, and can skip
	// one when another in the bucket is freed meanwhile). Otherwise it is a new one.
	RestoreMissed bool
	// RecordByAddress is which connection on a record's ends, with another cookie, the record
	// is of.
	RecordByAddress AddressMatch
}

// AddressMatch is which open connection a record whose cookie no connection has is taken for,
// when it is on the same ends.
type AddressMatch uint8

const (
	// MatchUncookied: one a read showed without a cookie (/proc), which cannot be told apart.
	MatchUncookied AddressMatch = iota
	// MatchFirstTimeWait: one first seen in TIME_WAIT, once. A connection no read showed open
	// carries no cookie of its own into TIME_WAIT (the kernel makes one only when asked), so
	// its full socket's record, with another cookie, is matched by its ends.
	MatchFirstTimeWait
)

// Conn is one connection followed from read to read.
type Conn[T any] struct {
	ID   ConnID
	Recv Received // at the last read with tcp_info
	// FirstRead and Seen are the reads that first and last showed it.
	FirstRead, Seen int
	// TimeWait: first seen in TIME_WAIT, and no record matched by its ends yet
	// (MatchFirstTimeWait).
	TimeWait bool
	// Freed: its destruction record came, Final, at FreedRead.
	Freed     bool
	Final     Socket
	FreedRead int
	// Kept: the consumer follows it to the end. Gone from the table it stays, found again by
	// its ends (a read that missed it, a record by its ends), until another connection takes
	// them; no Gone is told of it.
	Kept bool
	// Of is what the consumer keeps of it.
	Of T
}

// ConnEventKind is what happened to a connection.
type ConnEventKind uint8

const (
	// Accepted: a read shows the connection for the first time.
	Accepted ConnEventKind = iota
	// Shown: a read shows it again.
	Shown
	// Freed: its destruction record came.
	Freed
	// Gone: the read no longer shows it (with its record, if that has come: Conn.Freed), and
	// it is no longer followed (unless Kept).
	Gone
	// Brief: a record of a connection no read showed: opened and closed between two reads.
	Brief
)

// ConnEvent is what a read, or a destruction record, says of one connection.
type ConnEvent[T any] struct {
	Kind ConnEventKind
	Conn *Conn[T] // nil for Brief
	// Socket is as the read showed it (Accepted, Shown) or the record (Freed, Brief; Gone
	// when the record came).
	Socket Socket
	// Data: new bytes since the last read that counted them (Shown: Received.Grew; Freed:
	// Received.InRecord), and Before what it had received until then.
	Data   bool
	Before Received
}

// Closer is which side of a connection closed it.
type Closer uint8

const (
	NotClosed Closer = iota
	ClosedByClient
	ClosedByPod
)

// ClosedBy is who closed the connection as the event shows it: a read in CLOSE_WAIT or
// LAST_ACK, its client; in FIN_WAIT, TIME_WAIT or CLOSING, the pod's side; gone from the table
// without TIME_WAIT on the pod's side, its client (or one side reset it).
func (e ConnEvent[T]) ClosedBy() Closer {
	switch e.Kind {
	case Gone, Brief:
		return ClosedByClient
	case Freed:
		return NotClosed
	}
	switch e.Socket.State {
	case CloseWait, LastAck:
		return ClosedByClient
	case FinWait1, FinWait2, TimeWait, Closing:
		return ClosedByPod
	}
	return NotClosed
}

// NewConns follows connections under policy p.
func NewConns[T any](p ConnPolicy) *Conns[T] {
	return &Conns[T]{policy: p, open: map[ConnKey]*Conn[T]{}}
}

// Read is the number of the current read: 0 until the first NextRead (a baseline read).
func (t *Conns[T]) Read() int { return t.read }

// NextRead begins a read.
func (t *Conns[T]) NextRead() { t.read++ }

// Len is how many connections the latest read left followed.
func (t *Conns[T]) Len() int { return len(t.open) }

// Lookup is the connection followed on these ends.
func (t *Conns[T]) Lookup(k ConnKey) (*Conn[T], bool) {
	c, ok := t.open[k]
	return c, ok
}

// All is every connection followed.
func (t *Conns[T]) All() iter.Seq[*Conn[T]] {
	return func(yield func(*Conn[T]) bool) {
		for _, c := range t.open {
			if !yield(c) {
				return
			}
		}
	}
}

func (t *Conns[T]) idOf(s Socket) ConnID {
	if t.policy.CookieOnly {
		return ConnID{Cookie: s.Cookie}
	}
	return IDOf(s)
}

// Show takes one socket of the current read.
func (t *Conns[T]) Show(s Socket) ConnEvent[T] {
	key := KeyOf(s)
	c, ok := t.open[key]
	if ok && !c.ID.Same(s) {
		// The same ends, a later connection: the earlier one's record, if still to come,
		// finds it among the vanished.
		t.vanish(c)
		ok = false
	}
	if !ok && t.policy.RestoreMissed {
		if gone, found := t.vanished.Take(s.Cookie); found {
			c, ok = gone, true
			t.open[key] = c
		}
	}
	if !ok {
		c = &Conn[T]{ID: t.idOf(s), Recv: ReceivedBy(s), FirstRead: t.read, Seen: t.read, TimeWait: s.State == TimeWait}
		t.open[key] = c
		return ConnEvent[T]{Kind: Accepted, Conn: c, Socket: s}
	}
	c.Seen = t.read
	if t.policy.CookieOnly {
		c.ID.Update(Socket{Cookie: s.Cookie})
	} else {
		c.ID.Update(s)
	}
	before := c.Recv
	return ConnEvent[T]{Kind: Shown, Conn: c, Socket: s, Data: c.Recv.Grew(s), Before: before}
}

// Record takes one destruction record of the current read. It says nothing (false) of a
// record without a cookie, nor of a second record of one connection.
func (t *Conns[T]) Record(f Socket) (ConnEvent[T], bool) {
	if f.Cookie == 0 {
		return ConnEvent[T]{}, false
	}
	c, ok := t.vanished.Take(f.Cookie)
	if !ok {
		c, ok = t.open[KeyOf(f)]
		if ok && !t.byAddress(c, f.Cookie) {
			ok = false
		}
		if ok {
			// Matched once: a later connection on the same ends is another.
			c.TimeWait = false
		}
	}
	if !ok {
		return ConnEvent[T]{Kind: Brief, Socket: f}, true
	}
	if c.Freed {
		return ConnEvent[T]{}, false
	}
	c.Freed, c.Final, c.FreedRead = true, f, t.read
	return ConnEvent[T]{Kind: Freed, Conn: c, Socket: f, Data: c.Recv.InRecord(f), Before: c.Recv}, true
}

// byAddress says whether the record with this cookie, on c's ends, is c's.
func (t *Conns[T]) byAddress(c *Conn[T], cookie uint64) bool {
	if c.ID.Cookie == cookie {
		return true
	}
	if t.policy.RecordByAddress == MatchFirstTimeWait {
		return c.TimeWait
	}
	return c.ID.Cookie == 0
}

// EndRead ends the current read: the connections it did not show are gone, each told to
// gone (nil: not told), and those whose record is still to come are remembered.
func (t *Conns[T]) EndRead(gone func(ConnEvent[T])) {
	for key, c := range t.open {
		if c.Seen == t.read || c.Kept {
			continue
		}
		delete(t.open, key)
		t.vanish(c)
		if gone != nil {
			gone(ConnEvent[T]{Kind: Gone, Conn: c, Socket: c.Final})
		}
	}
	t.vanished.Expire(t.read)
}

func (t *Conns[T]) vanish(c *Conn[T]) {
	if !c.Freed {
		t.vanished.Remember(c.ID.Cookie, c, t.read)
	}
}
