package evidence

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/meshdrain/meshdrain/pkg/hook/drain"
	"github.com/meshdrain/meshdrain/pkg/mesh"
	"github.com/meshdrain/meshdrain/pkg/mesh/kernel"
	"github.com/meshdrain/meshdrain/pkg/sockets"
)

// The socket table's learners are the clients that let go of a pooled connection, at the
// read that saw it; a client that keeps its connection is none, nor a close the /proc
// fallback cannot tell from one after a response (no tcp_info).
func TestTableLearntAreTheClientsThatLetGo(t *testing.T) {
	start := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	pooled := func(client string, inode uint64) sockets.Socket {
		return sockets.Socket{Local: netip.MustParseAddrPort("10.0.0.1:15006"), Remote: netip.MustParseAddrPort(client + ":40000"), State: sockets.Established, Inode: inode}
	}
	for _, tc := range []struct {
		name   string
		reader sockets.Reader
		socks  *[]sockets.Socket
		want   []drain.Learnt
	}{
		{"tcp_info", &fakeReader{}, nil, []drain.Learnt{{Client: "10.0.0.7", At: start.Add(2 * time.Second), Evidence: drain.EvidenceLetGo}}},
		{"/proc", &procReader{}, nil, nil},
	} {
		switch r := tc.reader.(type) {
		case *fakeReader:
			tc.socks = &r.socks
		case *procReader:
			tc.socks = &r.socks
		}
		*tc.socks = []sockets.Socket{pooled("10.0.0.7", 1), pooled("10.0.0.8", 2)}
		now := start
		table := &Table{Reader: tc.reader, Ports: []int{15006}, Now: func() time.Time { return now }, Every: time.Nanosecond}
		if err := table.Begin(context.Background(), start, mesh.Snapshot{}); err != nil {
			t.Fatal(err)
		}
		now = now.Add(time.Second)
		if _, err := table.Counts(context.Background(), quiet); err != nil {
			t.Fatal(err)
		}
		*tc.socks = []sockets.Socket{pooled("10.0.0.8", 2)} // 10.0.0.7 lets go; 10.0.0.8 holds on
		now = now.Add(time.Second)
		if _, err := table.Counts(context.Background(), quiet); err != nil {
			t.Fatal(err)
		}
		got := table.Learnt()
		if len(got) != len(tc.want) || (len(got) == 1 && got[0] != tc.want[0]) {
			t.Errorf("%s: learnt %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

// Without a mesh: a pool routing per request learnt after its last request, a client
// routed per connection after its last new connection, also one that keeps sending on an
// old connection past the lag bound; a caller addressing the pod, an ignored source and a
// client that did nothing since the start are no learners.
func TestKernelLearnt(t *testing.T) {
	start := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return start.Add(time.Duration(ms) * time.Millisecond) }
	addr := netip.MustParseAddr
	got := KernelLearnt([]kernel.Client{
		{Addr: addr("10.0.0.1"), NewConns: 1, LastNewConn: at(300), LastData: at(2100), OldData: at(2100), Counted: true},         // a pool
		{Addr: addr("10.0.0.2"), NewConns: 9, LastNewConn: at(1600), LastData: at(1590), Counted: true},                           // one connection per request
		{Addr: addr("10.0.0.3"), NewConns: 2, LastNewConn: at(800), LastData: at(7000), SendingOldSince: at(5000), Counted: true}, // never learns its old connection
		{Addr: addr("10.0.0.4"), NewConns: 12, LastNewConn: at(9000), NewPastBound: 5, AddressesPod: true, Counted: true},         // a monitor
		{Addr: addr("10.0.0.5"), Ignored: true, NewConns: 3, LastNewConn: at(9000)},
		{Addr: addr("10.0.0.6"), Open: 1},
	})
	want := []drain.Learnt{
		{Client: "10.0.0.1", At: at(2100), Evidence: drain.EvidenceLastRequest},
		{Client: "10.0.0.2", At: at(1600), Evidence: drain.EvidenceLastNewConnection},
		{Client: "10.0.0.3", At: at(800), Evidence: drain.EvidenceLastNewConnection},
	}
	if len(got) != len(want) {
		t.Fatalf("learnt %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("learnt[%d] = %+v, want %+v", i, got[i], want[i])
		}
	}
}
