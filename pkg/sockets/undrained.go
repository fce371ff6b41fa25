package sockets

// The tracker's undrained mode (regime b: the pod's sidecar drains only once the app may
// stop), where a pooling client's close of any connection is a departure, and the drain that
// begins while the tracker watches (meshdrain status).

import "time"

// DrainBegins says, for the next Observe, that the pod's sidecar has begun to drain (its
// stats show connections told to close), for a tracker in the undrained mode that watched
// before the drain (meshdrain status): that read is judged as in a draining pod, where a
// close right after a request follows Connection: close and says nothing; and the
// connections open after it become drain-start connections, as at Begin, so that requests
// they carried before the drain do not count as sending after it. A client judged Left
// stays Left until it shows activity again.
func (t *Tracker) DrainBegins() { t.drainBegins = true }

// DrainedSince says that the pod's sidecar has drained since start, before the drain-start
// read: a drain-start connection the pod answered since then was told Connection: close, and
// its client closes it right after the response. Such a close says nothing, so the
// connection counts as used, not idle.
func (t *Tracker) DrainedSince(start time.Time) {
	for _, d := range t.drainList {
		if d.sentAt.After(start) {
			d.used = true
		}
	}
	t.judge(t.lastAt)
}

// Undrained says that the pod's sidecar is not draining (its drain is deferred until the
// app may stop: regime b). It then tells no connection to close, so a client's Envoy closes
// a pooled connection only when it drops the endpoint (idle ones at once, busy ones when their
// request ends; envoyproxy/envoy source/common/upstream/cluster_manager_impl.cc) or at its
// idle timeout (an hour by default). So, for a client that pools, a close of any of its
// connections is a departure, whether or not it carried requests; a client keeping an idle
// connection open is holding; a connection with a request in flight holds nothing (its
// client drops it after the request either way). A client pools once one of its connections
// has been seen carrying a second request, or answered and still open poolIdle later, in a
// read or in the kernel's record of its close (Closed): a client that opens a connection per
// request closes it right after the response, so its closes say nothing, however idle the
// connection was when the drain began. A connection opened and closed between two reads,
// gone without TIME_WAIT on the pod's side, was closed by its client. poolIdle is
// best the read interval: a loaded client may take tens of milliseconds to close. A client
// that sends on a new connection more than poolIdle after closing one is no pool that let go
// (cameBack), so a late close by a per-request client misleads only until its next request.
// Limits: a client whose idle timeout expires during the drain looks like one that let go;
// several clients behind one address (a NAT) are one. Sound only while nothing drains the
// pod: a draining Envoy's Connection: close makes clients close right after a request.
func (t *Tracker) Undrained(poolIdle time.Duration) {
	t.undrained, t.poolIdle = true, poolIdle
	for _, d := range t.drainList {
		d.client.pools = d.client.pools || t.pooled(d.start)
	}
	t.judge(time.Time{})
}

// pooled says whether an established connection shows a pool's use: carrying a request after
// an answered one, or answered and left open poolIdle (Undrained).
func (t *Tracker) pooled(s Socket) bool {
	return s.State == Established && (s.Reused() || s.Answered(t.poolIdle))
}

// pooledAtClose says whether the kernel's record of a connection its client closed (f) shows
// a pool's use that no read caught: data after a read that showed every request answered (a
// second request), or its last request answered poolIdle or more before the close (kept open
// idle: a client that opens a connection per request closes it within milliseconds). Reads
// while the stats move are BusyReads intervals apart, so a client that sends and then lets go
// between two of them is known to pool only from its record (Undrained).
func (t *Tracker) pooledAtClose(answeredBefore bool, before Received, f Socket) bool {
	if !t.undrained || !f.HasTCPInfo {
		return false
	}
	return (answeredBefore && before.InRecord(f)) || f.Answered(t.poolIdle)
}

// rebase makes the connections open now drain-start ones (DrainBegins): a request they
// carried before this read no longer counts; one seen in this read, or answered since the
// read before (its response may have said Connection: close), may have come after the drain
// began, and still does. Those opened in this read stay new connections.
func (t *Tracker) rebase() {
	for _, d := range t.drainList {
		if d.fate == stillOpen && d.usedRead < t.read {
			d.used, d.usedRead = d.busy || d.sentAt.After(t.lastAt), 0
		}
	}
	for c := range t.conns.All() {
		o := c.Of.other
		if o == nil || o.closed || o.state != Established || o.client == nil || c.FirstRead == t.read {
			continue
		}
		d := &drainConn{conn: c, client: o.client, busy: o.busy,
			answered: o.answered, start: Socket{State: Established}, sentAt: o.sentAt}
		d.used = o.busy || o.dataRead == t.read || o.sentAt.After(t.lastAt)
		if o.dataRead == t.read {
			d.usedRead = t.read
		}
		c.Of, c.Kept = tracked{drain: d}, true
		t.drainList = append(t.drainList, d)
		o.client.heldAtStart++
	}
}
