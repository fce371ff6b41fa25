package sockets

import (
	"slices"
	"testing"
)

// Under TPROXY a client's connection to the sidecar (owned by the proxy, 1337) and the
// sidecar's connection to the app on its behalf (owned by the app, 1000) share the client's
// address and the app's port. Only the sidecar's are kept, into TIME_WAIT too, where the
// kernel reports no owner; a TIME_WAIT never seen owned is kept.
func TestOwnedKeepsTheSidecarsSockets(t *testing.T) {
	conn := func(local, remote string, state State, uid uint32, cookie uint64) Socket {
		s := Socket{Local: ap(local), Remote: ap(remote), State: state, UID: uid, Cookie: cookie}
		if uid != 0 {
			s.Inode = 100 + cookie
		}
		return s
	}
	client := conn("10.0.0.9:8080", "10.1.0.1:40000", Established, 1337, 1)
	toApp := conn("10.0.0.9:8080", "10.1.0.1:40001", Established, 1000, 2)
	toAppClosed := conn("10.0.0.9:8080", "10.1.0.1:40001", TimeWait, 0, 2)
	unseen := conn("10.0.0.9:8080", "10.1.0.2:40002", TimeWait, 0, 3)
	o := &Owned{UID: 1337}

	if got := o.Keep([]Socket{client, toApp}); !slices.Equal(got, []Socket{client}) {
		t.Errorf("first read kept %v, want the client's connection", got)
	}
	if got := o.Keep([]Socket{client, toAppClosed, unseen}); !slices.Equal(got, []Socket{client, unseen}) {
		t.Errorf("second read kept %v, want the client's connection and the unseen TIME_WAIT", got)
	}
	// Once the app's connection is gone from a read, its memory goes: a later connection on
	// the same four-tuple, in TIME_WAIT from the start, is kept.
	o.Keep([]Socket{client})
	reused := conn("10.0.0.9:8080", "10.1.0.1:40001", TimeWait, 0, 4)
	if got := o.Keep([]Socket{reused}); !slices.Equal(got, []Socket{reused}) {
		t.Errorf("kept %v, want the TIME_WAIT of a connection never seen owned by the app", got)
	}
}

// A connection the sidecar closed itself, its FIN acknowledged, shows FIN_WAIT2 owned by 0 with
// no inode: it is still the sidecar's (its fate, closed by the pod, is evidence), not another
// user's.
func TestOwnedKeepsTheSidecarsClosedConnection(t *testing.T) {
	open := Socket{Local: ap("10.0.0.9:15006"), Remote: ap("10.1.0.1:40000"), State: Established, UID: 1337, Inode: 7, Cookie: 1}
	closed := Socket{Local: ap("10.0.0.9:15006"), Remote: ap("10.1.0.1:40000"), State: FinWait2, Cookie: 1}
	o := &Owned{UID: 1337}
	o.Keep([]Socket{open})
	if got := o.Keep([]Socket{closed}); !slices.Equal(got, []Socket{closed}) {
		t.Errorf("kept %v, want the sidecar's closed connection", got)
	}
}
