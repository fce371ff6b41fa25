package evidence

import (
	"cmp"
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/meshdrain/meshdrain/pkg/hook/drain"
	"github.com/meshdrain/meshdrain/pkg/mesh"
	"github.com/meshdrain/meshdrain/pkg/sim/loopback"
	"github.com/meshdrain/meshdrain/pkg/sockets"
)

func TestListenerPortFromTheStats(t *testing.T) {
	for addr, want := range map[string]int{"0.0.0.0_15006": 15006, "[::]_15006": 15006, "10.38.36.249_8080": 8080} {
		if got, err := listenerPort(mesh.Snapshot{Listener: &mesh.Listener{Address: addr}}); err != nil || got != want {
			t.Errorf("%s: %d, %v; want %d", addr, got, err, want)
		}
	}
	for _, snap := range []mesh.Snapshot{{}, {Listener: &mesh.Listener{Address: "virtualInbound"}}} {
		if _, err := listenerPort(snap); err == nil {
			t.Errorf("%+v: no error", snap.Listener)
		}
	}
}

// Against this machine's kernel: three clients (distinct loopback addresses) hold idle
// connections at the drain's start; one closes its connection itself and has left, the
// others still hold.
func TestTableOnTheRealKernel(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 8)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	var clients []net.Conn
	for _, ip := range []string{"127.0.0.2", "127.0.0.3", "127.0.0.4"} {
		d := loopback.Dialer(net.ParseIP(ip), 0)
		c, err := d.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		clients = append(clients, c)
		defer func() { (<-accepted).Close() }()
	}
	port := ln.Addr().(*net.TCPAddr).Port
	table := &Table{Reader: sockets.NewReader(), Ports: []int{port}, Now: time.Now, Every: time.Nanosecond}
	if err := table.Begin(context.Background(), time.Time{}, mesh.Snapshot{}); err != nil {
		t.Skipf("the socket table cannot be read here: %v", err)
	}
	counts, err := table.Counts(context.Background(), quiet)
	if err != nil || counts.Holding != 3 {
		t.Fatalf("at the start: %+v, %v; want 3 holding", counts, err)
	}
	clients[0].Close() // the client applies the removal: its sidecar closes the idle connection
	deadline := time.Now().Add(5 * time.Second)
	for {
		counts, err = table.Counts(context.Background(), quiet)
		if err == nil && counts.Left == 1 && counts.Holding == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after one client closed: %+v, %v; want 1 left, 2 holding", counts, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, h := range HoldersOf(counts) {
		if a := netip.MustParseAddr(h); a.String() == "127.0.0.2" {
			t.Errorf("the client that left is still named holding: %v", HoldersOf(counts))
		}
	}
}

// fakeReader serves scripted reads and counts them.
type fakeReader struct {
	reads int
	socks []sockets.Socket
}

func (f *fakeReader) Read([]uint16) ([]sockets.Socket, error) { f.reads++; return f.socks, nil }

// oneHolder is a reader whose table holds one client's idle connection.
func oneHolder() *fakeReader {
	return &fakeReader{socks: []sockets.Socket{{
		Local:  netip.MustParseAddrPort("10.0.0.1:15006"),
		Remote: netip.MustParseAddrPort("10.0.0.7:40000"),
		State:  sockets.Established,
		Inode:  1,
	}}}
}

// The table is read at most every Every; polls in between get the last counts, the ones of
// the drain's start first.
func TestTableReadsAtMostEvery(t *testing.T) {
	now := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	r := oneHolder()
	table := &Table{Reader: r, Ports: []int{15006}, Now: func() time.Time { return now }}
	if err := table.Begin(context.Background(), time.Time{}, mesh.Snapshot{}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 4; i++ { // 4 polls of 200ms: one second not yet passed
		now = now.Add(200 * time.Millisecond)
		if c, _ := table.Counts(context.Background(), quiet); c.Holding != 1 || r.reads != 1 {
			t.Fatalf("poll %d: %+v after %d reads; want the start's counts, no read", i, c, r.reads)
		}
	}
	now = now.Add(200 * time.Millisecond)
	if _, _ = table.Counts(context.Background(), quiet); r.reads != 2 {
		t.Errorf("after a second: %d reads, want 2", r.reads)
	}
}

// procReader is a reader that fell back to /proc: no tcp_info.
type procReader struct{ fakeReader }

func (p *procReader) FellBack() error { return errors.New("netlink: operation not permitted") }

// Without tcp_info a client's close cannot show its connection was idle (its Envoy closes
// right after a Connection: close response too): it is never counted as having left.
func TestNoDepartureWithoutTCPInfo(t *testing.T) {
	now := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	open := sockets.Socket{Local: netip.MustParseAddrPort("10.0.0.1:15006"), Remote: netip.MustParseAddrPort("10.0.0.7:40000"), State: sockets.Established, Inode: 1}
	for _, tc := range []struct {
		reader interface {
			sockets.Reader
		}
		wantLeft int
	}{{&fakeReader{}, 1}, {&procReader{}, 0}} {
		var socks *[]sockets.Socket
		switch r := tc.reader.(type) {
		case *fakeReader:
			socks = &r.socks
		case *procReader:
			socks = &r.socks
		}
		*socks = []sockets.Socket{open}
		table := &Table{Reader: tc.reader, Ports: []int{15006}, Now: func() time.Time { return now }, Every: time.Nanosecond}
		if err := table.Begin(context.Background(), time.Time{}, mesh.Snapshot{}); err != nil {
			t.Fatal(err)
		}
		now = now.Add(time.Second)
		if _, err := table.Counts(context.Background(), quiet); err != nil { // the counter's baseline
			t.Fatal(err)
		}
		*socks = nil // the client closed it, and no request reached the pod meanwhile
		now = now.Add(time.Second)
		c, _ := table.Counts(context.Background(), quiet)
		if c.Left != tc.wantLeft || c.Left+c.Sending != 1 {
			t.Errorf("%T: %+v, want %d left", tc.reader, c, tc.wantLeft)
		}
	}
}

// quiet is the traffic of a poll where no request reached the pod; the listener's
// connection counts are unknown.
var quiet = drain.Traffic{Arrivals: num(0)}

func num(v float64) *float64 { return &v }

// The table is read only when the sidecar's stats say something arrived, opened or closed
// since the last read: idle clients cost no read. Between reads, counts after new arrivals
// are marked stale.
func TestTableReadsOnlyWhenTheStatsMoved(t *testing.T) {
	now := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	r := oneHolder()
	table := &Table{Reader: r, Ports: []int{15006}, Now: func() time.Time { return now }, Every: time.Second}
	snap := mesh.Snapshot{
		Endpoints: []mesh.Endpoint{{Name: "inbound_8080", HTTPRequestsTotal: num(0), HTTPRequestsActive: num(0)}},
		Listener:  &mesh.Listener{Address: "0.0.0.0_15006", ConnectionsTotal: num(1), ConnectionsActive: num(1)},
	}
	if err := table.Begin(context.Background(), time.Time{}, snap); err != nil {
		t.Fatal(err)
	}
	idle := drain.Traffic{Arrivals: num(0), Opened: num(1), Open: num(1)}
	poll := func(tr drain.Traffic) drain.ClientCounts {
		now = now.Add(200 * time.Millisecond)
		c, err := table.Counts(context.Background(), tr)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	for range 50 {
		if c := poll(idle); r.reads != 1 || c.Holding != 1 || c.Stale {
			t.Fatalf("nothing moved: %d reads, counts %+v; want the start's read only", r.reads, c)
		}
	}
	if poll(drain.Traffic{Arrivals: num(0), Opened: num(1), Open: num(0)}); r.reads != 2 {
		t.Errorf("a connection closed: %d reads, want 2", r.reads)
	}
	if poll(drain.Traffic{Arrivals: num(0), Opened: num(2), Open: num(1)}); r.reads != 2 {
		t.Errorf("within a second of the last read: %d reads, want 2", r.reads)
	}
	arrived := drain.Traffic{Arrivals: num(5), Opened: num(2), Open: num(1)}
	if c := poll(arrived); r.reads != 2 || !c.Stale {
		t.Errorf("requests arrived within a second of the last read: %d reads, counts %+v; want no read, stale counts", r.reads, c)
	}
	for range 3 {
		poll(arrived)
	}
	if c := poll(arrived); r.reads != 3 || c.Stale {
		t.Errorf("a second after the last read, requests arrived: %d reads, counts %+v; want 3 reads, fresh counts", r.reads, c)
	}
	// Requests arriving at every poll: a read every BusyReads seconds, and at once when
	// the traffic pauses.
	n := 5.0
	for i := range 23 { // the last read was a poll before the first of these
		n++
		if c := poll(drain.Traffic{Arrivals: num(n), Opened: num(2), Open: num(1)}); r.reads != 3 || !c.Stale {
			t.Fatalf("poll %d of flowing traffic: %d reads, counts %+v; want no read, stale counts", i, r.reads, c)
		}
	}
	n++
	if poll(drain.Traffic{Arrivals: num(n), Opened: num(2), Open: num(1)}); r.reads != 4 {
		t.Errorf("%v of flowing traffic: %d reads, want 4", BusyReads*time.Second, r.reads)
	}
	for range 5 {
		n++
		poll(drain.Traffic{Arrivals: num(n), Opened: num(2), Open: num(1)})
	}
	if c := poll(drain.Traffic{Arrivals: num(n), Opened: num(2), Open: num(1)}); r.reads != 5 || c.Stale {
		t.Errorf("the traffic paused a second after the last read: %d reads, counts %+v; want 5 reads, fresh counts", r.reads, c)
	}
	// Connections closing at every poll (clients leaving) are read as rarely; the first
	// poll at which nothing closes reads at once.
	open := 1000.0
	leaving := func() drain.Traffic { open--; return drain.Traffic{Arrivals: num(n), Opened: num(2), Open: num(open)} }
	for i := range 24 {
		if poll(leaving()); r.reads != 5 {
			t.Fatalf("poll %d of clients leaving: %d reads, want 5", i, r.reads)
		}
	}
	if poll(leaving()); r.reads != 6 {
		t.Errorf("%v of clients leaving: %d reads, want 6", BusyReads*time.Second, r.reads)
	}
	for range 4 {
		poll(leaving())
	}
	if poll(drain.Traffic{Arrivals: num(n), Opened: num(2), Open: num(open)}); r.reads != 7 {
		t.Errorf("the closes stopped a second after the last read: %d reads, want 7", r.reads)
	}
}

// With the drain deferred (--drain-at end), the sidecar must not drain: if it tells
// connections to close, a client's close may follow that and not its endpoint update, and
// the evidence gives up (the coordinator then judges by silence). Not deferred, the sidecar's
// drain closes are expected and change nothing.
func TestUndrainedEvidenceGivesUpWhenTheSidecarDrains(t *testing.T) {
	for _, undrained := range []bool{false, true} {
		now := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
		table := &Table{Reader: oneHolder(), Ports: []int{15006}, Now: func() time.Time { return now }, Undrained: undrained}
		if err := table.Begin(context.Background(), time.Time{}, mesh.Snapshot{}); err != nil {
			t.Fatal(err)
		}
		now = now.Add(time.Second)
		if _, err := table.Counts(context.Background(), drain.Traffic{Arrivals: num(0)}); err != nil {
			t.Fatalf("undrained %v, no drain close: %v", undrained, err)
		}
		now = now.Add(time.Second)
		_, err := table.Counts(context.Background(), drain.Traffic{Arrivals: num(0), DrainCloses: num(3)})
		if undrained && (err == nil || !strings.Contains(err.Error(), "--drain-at end")) {
			t.Errorf("deferred drain, the sidecar closed 3 connections: error %v, want one naming --drain-at end", err)
		}
		if !undrained && err != nil {
			t.Errorf("the sidecar's own drain: %v", err)
		}
	}
}

// A drain-close count already above zero at the first read, with the drain deferred: the
// sidecar told connections to close before meshdrain looked, now (its own drain at the
// deletion came first) or long ago (a listener update). A pooling client's close must then
// not pass for a departure, as a close that followed the Connection: close of a drain begun
// before the first read would (issue 27), until the sidecar is seen answering a request that
// arrived since without telling its connection to close. If it does tell it, the evidence is
// given up as when the count rises from zero.
func TestUndrainedEvidenceWhenTheSidecarDrainedBeforeTheFirstRead(t *testing.T) {
	pooled := sockets.Socket{
		Local: netip.MustParseAddrPort("10.0.0.1:15006"), Remote: netip.MustParseAddrPort("10.0.0.7:40000"), State: sockets.Established, Inode: 1,
		// Answered two seconds ago and idle since: a pool's connection.
		HasTCPInfo: true, BytesReceived: 300, SinceLastDataRecv: 2 * time.Second, SinceLastDataSent: 2 * time.Second,
	}
	traffic := func(arrivals, active, closes float64) drain.Traffic {
		return drain.Traffic{Arrivals: num(arrivals), Active: num(active), DrainCloses: num(closes)}
	}
	for _, tc := range []struct {
		name   string
		before float64 // the drain closes at the first read
	}{{"nothing drained before", 0}, {"drained before the first read", 2}} {
		now := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
		r := &fakeReader{socks: []sockets.Socket{pooled}}
		table := &Table{Reader: r, Ports: []int{15006}, Now: func() time.Time { return now }, Every: time.Second, Undrained: true}
		snap := mesh.Snapshot{Endpoints: []mesh.Endpoint{{Name: "inbound_8080", HTTPRequestsTotal: num(10), HTTPRequestsActive: num(0), HTTPDrainCloses: num(tc.before)}}}
		if err := table.Begin(context.Background(), time.Time{}, snap); err != nil {
			t.Fatal(err)
		}
		poll := func(tr drain.Traffic) (drain.ClientCounts, error) {
			now = now.Add(time.Second)
			return table.Counts(context.Background(), tr)
		}
		r.socks = nil // the client closes its pooled connection; no request arrived
		c, err := poll(traffic(10, 0, tc.before))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if tc.before == 0 && c.Left != 1 {
			t.Errorf("%s: %+v, want the client's close taken for a departure", tc.name, c)
		}
		if tc.before > 0 && (c.Left != 0 || c.Sending != 1) {
			t.Errorf("%s: %+v, want the client judged by silence, not left", tc.name, c)
		}
		if tc.before == 0 {
			continue
		}
		// A request that arrived since is answered, and the counter stands: after one more
		// poll that shows it still standing, the sidecar is known not to drain.
		if c, err = poll(traffic(11, 0, tc.before)); err != nil || c.Left != 0 {
			t.Errorf("%s, a request answered: %+v, %v; want still no departure until the next poll", tc.name, c, err)
		}
		if c, err = poll(traffic(11, 0, tc.before)); err != nil || c.Left != 1 {
			t.Errorf("%s, the counter stood after an answer: %+v, %v; want the close taken for a departure", tc.name, c, err)
		}
	}
	// The sidecar drains now: its next answer tells a connection to close, and the evidence
	// is given up.
	now := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	table := &Table{Reader: &fakeReader{socks: []sockets.Socket{pooled}}, Ports: []int{15006}, Now: func() time.Time { return now }, Every: time.Second, Undrained: true}
	snap := mesh.Snapshot{Endpoints: []mesh.Endpoint{{Name: "inbound_8080", HTTPRequestsTotal: num(10), HTTPRequestsActive: num(0), HTTPDrainCloses: num(2)}}}
	if err := table.Begin(context.Background(), time.Time{}, snap); err != nil {
		t.Fatal(err)
	}
	now = now.Add(time.Second)
	if _, err := table.Counts(context.Background(), traffic(11, 0, 3)); err == nil || !strings.Contains(err.Error(), "told 1 connections to close") {
		t.Errorf("the sidecar drains now: error %v, want the evidence given up", err)
	}
}

// listeningReader is a fakeReader that also lists listeners: the inbound one (15006) owned by
// owner (and a second one there owned by second, when set), the app's owned by app (1000
// unless set).
type listeningReader struct {
	fakeReader
	owner, app, second uint32
	err                error
}

func (l *listeningReader) Listeners(ports []uint16) ([]sockets.Socket, error) {
	if l.err != nil {
		return nil, l.err
	}
	var out []sockets.Socket
	for _, p := range ports {
		uid := l.owner
		if p != 15006 {
			uid = cmp.Or(l.app, 1000)
		}
		out = append(out, sockets.Socket{Local: netip.AddrPortFrom(netip.IPv4Unspecified(), p), State: sockets.Listen, UID: uid})
		if p == 15006 && l.second != 0 {
			out = append(out, sockets.Socket{Local: netip.AddrPortFrom(netip.IPv6Unspecified(), p), State: sockets.Listen, UID: l.second})
		}
	}
	return out, nil
}

// Under TPROXY the clients' connections are on the app's port, owned by the proxy (the owner
// of 15006), beside the app's own connections from its sidecar, which keep the client's
// address (original_src) and are owned by the app. The client's close of its idle connection
// is a departure even though the sidecar's idle connection to the app, with the same address,
// stays open; were the app's connections read as the client's, it would be holding.
func TestTPROXYAppPortsCountOnlyTheSidecarsConnections(t *testing.T) {
	now := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	conn := func(port uint16, uid uint32, inode uint64) sockets.Socket {
		return sockets.Socket{
			Local: netip.MustParseAddrPort("10.0.0.1:8080"), Remote: netip.AddrPortFrom(netip.MustParseAddr("10.0.0.7"), port),
			State: sockets.Established, UID: uid, Inode: inode,
			HasTCPInfo: true, BytesReceived: 100, SinceLastDataRecv: 3 * time.Second, SinceLastDataSent: 3 * time.Second,
		}
	}
	clients := conn(40000, 1337, 1)
	appsOwn := conn(40001, 1000, 2)
	snap := mesh.Snapshot{Listener: &mesh.Listener{Address: "0.0.0.0_15006"}}
	r := &listeningReader{fakeReader: fakeReader{socks: []sockets.Socket{clients, appsOwn}}, owner: 1337}
	table := &Table{Reader: r, Ports: []int{8080}, Now: func() time.Time { return now }, Every: time.Nanosecond}
	if err := table.Begin(context.Background(), time.Time{}, snap); err != nil {
		t.Fatal(err)
	}
	now = now.Add(time.Second)
	if _, err := table.Counts(context.Background(), quiet); err != nil {
		t.Fatal(err)
	}
	r.socks = []sockets.Socket{appsOwn} // the client lets go; its sidecar's pool to the app stays
	now = now.Add(time.Second)
	if c, err := table.Counts(context.Background(), quiet); err != nil || c.Left != 1 || c.Holding != 0 {
		t.Errorf("counts %+v (%v), want the client left", c, err)
	}

	// The listener's owner cannot be read: on the app's ports the two cannot be told apart.
	r = &listeningReader{fakeReader: fakeReader{socks: []sockets.Socket{clients, appsOwn}}, err: errors.New("netlink: operation not permitted")}
	table = &Table{Reader: r, Ports: []int{8080}, Now: func() time.Time { return now }}
	err := table.Begin(context.Background(), time.Time{}, snap)
	if err == nil || !strings.Contains(err.Error(), "owner") {
		t.Errorf("Begin: %v, want an error saying the owner is unknown", err)
	}
	// The app runs as the sidecar's user: its own connections would pass for the clients'.
	r = &listeningReader{fakeReader: fakeReader{socks: []sockets.Socket{clients, appsOwn}}, owner: 1337, app: 1337}
	table = &Table{Reader: r, Ports: []int{8080}, Now: func() time.Time { return now }}
	if err := table.Begin(context.Background(), time.Time{}, snap); err == nil || !strings.Contains(err.Error(), "runs as the sidecar's user") {
		t.Errorf("Begin with the app as the sidecar's user: %v, want an error saying so", err)
	}
	// Two listeners on 15006 with different owners: which is the sidecar's is unknown.
	r = &listeningReader{fakeReader: fakeReader{socks: []sockets.Socket{clients, appsOwn}}, owner: 1337, second: 2000}
	table = &Table{Reader: r, Ports: []int{8080}, Now: func() time.Time { return now }}
	if err := table.Begin(context.Background(), time.Time{}, snap); err == nil || !strings.Contains(err.Error(), "different users") {
		t.Errorf("Begin with two owners of 15006: %v, want an error saying so", err)
	}
	// On the listener's own port every socket is the sidecar's: no owner needed.
	r = &listeningReader{fakeReader: fakeReader{socks: []sockets.Socket{clients, appsOwn}}, err: errors.New("netlink: operation not permitted")}
	table = &Table{Reader: r, Ports: []int{15006}, Now: func() time.Time { return now }}
	if err := table.Begin(context.Background(), time.Time{}, snap); err != nil {
		t.Errorf("Begin on the listener's own port: %v", err)
	}
}

// The counts say when the latest of the sending clients sent, from tcp_info: the rule judges
// such clients by their own silence since (drain.RuleConfig.ClientQuiet).
func TestCountsSayWhenTheLastSenderSent(t *testing.T) {
	now := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	r := &fakeReader{}
	table := &Table{Reader: r, Ports: []int{15006}, Now: func() time.Time { return now }, Every: time.Nanosecond}
	if err := table.Begin(context.Background(), time.Time{}, mesh.Snapshot{}); err != nil {
		t.Fatal(err)
	}
	newConn := func(client string, sinceRecv time.Duration) sockets.Socket {
		return sockets.Socket{Local: netip.MustParseAddrPort("10.0.0.1:15006"), Remote: netip.MustParseAddrPort(client), State: sockets.Established,
			Inode: 1, HasTCPInfo: true, BytesReceived: 100, SinceLastDataRecv: sinceRecv, SinceLastDataSent: sinceRecv - time.Millisecond}
	}
	now = now.Add(time.Second)
	r.socks = []sockets.Socket{newConn("10.0.0.7:40000", 700*time.Millisecond), newConn("10.0.0.8:40000", 300*time.Millisecond)}
	c, err := table.Counts(context.Background(), quiet)
	if err != nil {
		t.Fatal(err)
	}
	if c.Sending != 2 || !c.LastSent.Equal(now.Add(-300*time.Millisecond)) {
		t.Errorf("%+v; want 2 sending, the last at %v", c, now.Add(-300*time.Millisecond))
	}
}
