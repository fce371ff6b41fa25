package kernel

import (
	"slices"
	"time"

	"github.com/meshdrain/meshdrain/pkg/sockets"
)

// The accepts PassiveOpens counts against those a read or a record named: what stays
// unnamed becomes an unknown client's.

// account sets what PassiveOpens counted against the accepts this read named (namedNew: shown
// by the table for the first time; namedLate: by a record, or first seen half open): one that
// stays unnamed for unnamedAfter (and at least one more read) is an unknown client's. The
// kernel broadcasts a freed socket's record from a work queue, so a connection opened and
// closed just before a read is named a little later; a read can come milliseconds after the
// last.
func (k *Kernel) account(r *readResult, counters sockets.TCPCounters, namedNew, namedLate int) {
	now := r.at
	opened := int64(0)
	if counters.PassiveOpens > k.atRead.PassiveOpens {
		opened = int64(counters.PassiveOpens - k.atRead.PassiveOpens)
	}
	// An accept that PassiveOpens counted at a read and that the next read did not name
	// either is an unknown client's once unnamedAfter has passed, before this read's names pay
	// for anything: a connection is named at the read whose counters hold its accept or at the
	// next (it was accepted between that read's table and its counters, or its record came a
	// little late), so a name now belongs to a recent accept, and paying an old one with it
	// would leave the recent one to count as an unknown client's later, stretching the wait.
	var unknown int64
	var unknownAt time.Time // the latest read whose counters held one of them
	for len(k.pending) > 0 && now.Sub(k.pending[0].at) >= unnamedAfter && k.reads > k.pending[0].read+1 {
		unknown += k.pending[0].n
		unknownAt = later(unknownAt, k.pending[0].at)
		k.pending = k.pending[1:]
	}
	// The named accepts pay for the oldest unnamed ones each can be first: what is left
	// unnamed is the least that can be, at the latest reads. A record may name an accept of
	// any earlier read. A connection the table shows for the first time is one of the
	// previous read's (accepted between its table and its counters) or of this one's, never
	// older: a kubelet probe answered and closed between two reads pays for its own accept,
	// not for an older one that no name will come for, which would leave its own unnamed with
	// a late time, to count as an arrival long after the traffic stopped.
	left := k.pay(int64(namedLate), 0) + k.pay(int64(namedNew), k.reads-1)
	if rest := opened - left; rest > 0 {
		k.pending = append(k.pending, unnamedAccepts{n: rest, at: r.countersAt, read: k.reads})
	}
	for len(k.pending) > 0 && now.Sub(k.pending[0].at) >= unnamedAfter && k.reads > k.pending[0].read {
		unknown += k.pending[0].n
		unknownAt = later(unknownAt, k.pending[0].at)
		k.pending = k.pending[1:]
	}
	k.unattributed = 0
	for _, p := range k.pending {
		k.unattributed += p.n
	}
	if unknown > 0 {
		// They came no later than unknownAt. Where the counter went up at a poll that read the
		// counters no earlier, the silence the rule measures began after them (the rule takes
		// a poll's time once it has returned): counting them now would move the
		// counter long after they came (names pay the oldest unnamed accepts first, so while
		// requests come the unnamed ones move on to the latest reads, and are known for
		// unknown only a while after the last request) and pass for a late arrival.
		k.unknownAccepts += int(unknown)
		k.lastUnknown = later(k.lastUnknown, unknownAt)
		if k.movedAt.Before(unknownAt) {
			k.addActivity(r, k.firstListeningWatched(), float64(unknown), unknownAt)
			k.lastKind, k.lastActivity = ActivityUnknownClient, unknownAt
		}
	}
}

// unnamedAccepts are accepts PassiveOpens counted at a read that no read or record named.
type unnamedAccepts struct {
	n    int64
	at   time.Time
	read int
}

// pay lets n names pay for the oldest unnamed accepts counted at read since or later, and
// returns the names left for this read's own accepts.
func (k *Kernel) pay(n int64, since int) int64 {
	for i := 0; i < len(k.pending) && n > 0; {
		p := &k.pending[i]
		if p.read < since {
			i++
			continue
		}
		m := min(n, p.n)
		p.n -= m
		n -= m
		if p.n == 0 {
			k.pending = slices.Delete(k.pending, i, i+1)
		}
	}
	return n
}

// unnamedAfter is how long an accept may stay unnamed before it counts as an unknown
// client's: the kernel's work queue sends a freed socket's record within milliseconds, far
// less on a machine that keeps its work queues running.
const unnamedAfter = 250 * time.Millisecond

func (k *Kernel) firstListeningWatched() uint16 {
	for _, p := range k.opts.Ports {
		if slices.Contains(k.listening, uint16(p)) {
			return uint16(p)
		}
	}
	return uint16(k.opts.Ports[0])
}

// accepted counts a new connection the read r named.
func (k *Kernel) accepted(r *readResult, c *conn) {
	now := r.at
	if c.kind != clientConn {
		r.uncounted = true
		return
	}
	cl := c.client
	cl.newConns++
	cl.lastNewConn = now
	cl.opens.open(now, k.pastBound(now))
	if k.pastBound(now) {
		cl.newPastBound++
		cl.lastNewPastBound = now
	}
	if k.notWaitedFor(cl) {
		r.uncounted = true
		return
	}
	cl.lastCountedOther = later(cl.lastCountedOther, now)
	r.accepts++
	k.count(r, now, cl, c.port, ActivityNewConnection, 1)
}
