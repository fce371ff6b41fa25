package kernel

import (
	"time"
)

// The activity counter the drain rule watches: what counts, per client, and how the lag
// bound changes it.

// boundAt is when the lag bound passes; zero when there is none.
func (k *Kernel) boundAt() time.Time {
	if k.opts.LagBound <= 0 {
		return time.Time{}
	}
	return k.opts.Start.Add(k.opts.LagBound)
}

// pastBound says whether t is past the lag bound.
func (k *Kernel) pastBound(t time.Time) bool {
	b := k.boundAt()
	return !b.IsZero() && !t.Before(b)
}

// addActivity counts n on port, the latest of it at at, found by the read r: first against
// the credit counted ahead of r, so that an activity is in the counter once. r has then found
// activity that counts, and the next credit goes to port.
func (k *Kernel) addActivity(r *readResult, port uint16, n float64, at time.Time) {
	paid := min(n, k.credit[port])
	k.credit[port] -= paid
	k.activity[port] += n - paid
	if n > paid {
		k.movedAt = r.countersAt
	}
	r.counted, k.creditPort = later(r.counted, at), port
}

// data counts new data on an open connection that the read r found (n segments, the last at
// at), unless it is an old connection's past the bound: its client never learns, and it is
// named instead.
func (k *Kernel) data(r *readResult, c *conn, at time.Time, n int) {
	if c.kind != clientConn {
		r.uncounted = true
		return
	}
	cl := c.client
	cl.lastData = later(cl.lastData, at)
	if k.old(c) {
		cl.oldData = later(cl.oldData, at)
		if k.pastBound(at) {
			if cl.sendingOldSince.IsZero() {
				cl.sendingOldSince = at
			}
			r.uncounted = true
			return
		}
		r.oldBefore = true
	} else if k.notWaitedFor(cl) {
		r.uncounted = true
		return
	} else {
		cl.lastCountedOther = later(cl.lastCountedOther, at)
	}
	r.data += n
	k.count(r, at, cl, c.port, ActivityData, n)
}

// notWaitedFor says whether cl's activity past the bound counts nothing: it addresses the
// pod directly (cadence.go), and --wait-past-bound-openers was not given. Only a client that
// opened past the bound can be one.
func (k *Kernel) notWaitedFor(cl *client) bool {
	return cl != nil && !k.opts.WaitPastBoundOpeners && cl.opens.direct()
}

func (k *Kernel) count(r *readResult, at time.Time, cl *client, port uint16, kind string, n int) {
	cl.counted = true
	cl.lastCountedAction = later(cl.lastCountedAction, at)
	k.addActivity(r, port, float64(n), at)
	if !at.Before(k.lastActivity) {
		k.lastKind, k.lastActivity = kind, at
	}
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
