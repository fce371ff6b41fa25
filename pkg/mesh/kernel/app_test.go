package kernel

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/meshdrain/meshdrain/pkg/mesh"
	"github.com/meshdrain/meshdrain/pkg/sockets"
)

// snapshotReading reads the kernel once more without moving the clock.
func (f *fixture) snapshotReading() mesh.Reading {
	f.t.Helper()
	snap, err := f.k.Inbound(context.Background(), mesh.Selector{Ports: []int{8080}})
	if err != nil {
		f.t.Fatal(err)
	}
	return snap.Read()
}

// fakeCounter is the app's request counter as the test sets it.
type fakeCounter struct {
	total float64
	err   error
}

func (c *fakeCounter) Requests(context.Context) (float64, error) { return c.total, c.err }

// newAppFixture is newFixture with the app's request counter read beside the kernel.
func newAppFixture(t *testing.T, lagBound time.Duration, app RequestCounter, initial ...sockets.Socket) *fixture {
	return newFixtureWith(t, lagBound, func(o *Options) { o.AppRequests = app }, initial...)
}

// What the app counts beyond the kernel is activity, and what both count is counted once:
// the activity is at least the app's requests, never their sum with the kernel's.
func TestAppRequestsCountWhatTheKernelDidNotSee(t *testing.T) {
	app := &fakeCounter{total: 1000}
	f := newAppFixture(t, 0, app)
	base := f.poll()
	app.total += 5 // five requests on a connection whose data the kernel cannot see (/proc)
	if got := f.poll(); got != base+5 {
		t.Fatalf("five requests only the app counted: activity %v, want %v", got, base+5)
	}
	if s := f.k.Summary(); s.LastActivity != ActivityAppRequest || s.App == nil || s.App.Added != 5 || s.App.Requests != 5 {
		t.Fatalf("summary %+v, app %+v: want the app's requests named as the last activity", s, s.App)
	}
	f.traffic(1, sock(t, "10.1.0.2:40000", 8080, 1, 0, 0))
	app.total++ // the same request, counted by both
	if got := f.poll(); got != base+6 {
		t.Fatalf("a request both counted: activity %v, want %v (once)", got, base+6)
	}
	app.total += 3 // the app answers three more; the kernel saw none of them
	if got := f.poll(); got != base+9 {
		t.Fatalf("three more the app counted: activity %v, want %v", got, base+9)
	}
	// The app counted 8 the kernel did not, within the last second: two new connections the
	// kernel counts now pay for two of them (a read naming late what the app answered first);
	// their own requests, answered later, move the counter then.
	f.traffic(2, sock(t, "10.1.0.2:40000", 8080, 1, 0, 0), sock(t, "10.1.0.3:40000", 8080, 2, 0, 0), sock(t, "10.1.0.4:40000", 8080, 3, 0, 0))
	if got := f.poll(); got != base+9 {
		t.Fatalf("two accepts within the app's lead: activity %v, want %v", got, base+9)
	}
	app.total += 2
	if got := f.poll(); got != base+11 {
		t.Fatalf("the app's answers to them: activity %v, want %v", got, base+11)
	}
}

// The kernel that counts a read late catches up on what the app counted first: a request both
// count moves the counter once, not twice.
func TestKernelCatchingUpOnTheAppCountsNothingMore(t *testing.T) {
	conn := sock(t, "10.1.0.2:40000", 8080, 1, 100, 1)
	app := &fakeCounter{total: 50}
	f := newAppFixture(t, 0, app, conn)
	base := f.poll()
	app.total += 5 // five requests answered before a read shows their data
	if got := f.poll(); got != base+5 {
		t.Fatalf("five requests the app counted first: activity %v, want %v", got, base+5)
	}
	f.traffic(0, withData(conn, 600, 6))
	if got := f.poll(); got != base+5 {
		t.Fatalf("the kernel's five data segments of the same requests: activity %v, want %v (not their sum)", got, base+5)
	}
	f.traffic(0, withData(conn, 700, 7))
	if got := f.poll(); got != base+6 {
		t.Fatalf("a sixth request the kernel saw first: activity %v, want %v", got, base+6)
	}
}

// Past the lag bound the app's counter is not read: its requests there are the holders',
// which never learn; a connection opened past the bound is the kernel's to count.
func TestAppRequestsPastTheBoundCountNothing(t *testing.T) {
	app := &fakeCounter{total: 10}
	f := newAppFixture(t, time.Second, app)
	app.total += 2
	before := f.poll()
	learning := f.k.Summary().LastLearning
	for f.now.Before(f.k.opts.Start.Add(time.Second)) {
		f.poll()
	}
	reads := f.k.Summary().App.Reads
	app.total += 50
	if got := f.poll(); got != before {
		t.Fatalf("requests past the bound: activity %v → %v", before, got)
	}
	if s := f.k.Summary(); !s.LastLearning.Equal(learning) || s.App.Reads != reads || s.App.Requests != 2 || s.App.Added != 2 {
		t.Fatalf("past the bound: last learning %v (want %v), app %+v (read %d times before it): want no read", s.LastLearning, learning, s.App, reads)
	}
}

// A read of the app's metrics that fails counts nothing and stops nothing; the next read
// catches up, the counter being cumulative; a counter that goes back counts nothing either.
func TestAppRequestsReadFailures(t *testing.T) {
	app := &fakeCounter{total: 7}
	f := newAppFixture(t, 0, app)
	base := f.poll()
	app.total, app.err = 9, errors.New("GET http://127.0.0.1:9090/metrics: connection refused")
	if got := f.poll(); got != base {
		t.Fatalf("a failed read: activity %v → %v", base, got)
	}
	app.err = nil
	if got := f.poll(); got != base+2 {
		t.Fatalf("the read after a failure: activity %v, want %v", got, base+2)
	}
	app.total = 1 // the app reset its counter
	if got := f.poll(); got != base+2 {
		t.Fatalf("a counter that went back: activity %v, want %v", got, base+2)
	}
	app.total = 4
	if got := f.poll(); got != base+5 {
		t.Fatalf("three requests after the reset: activity %v, want %v", got, base+5)
	}
	app.total = math.Inf(1)
	if got := f.poll(); got != base+5 {
		t.Fatalf("an infinite counter: activity %v, want %v", got, base+5)
	}
	if r := f.snapshotReading(); r.Arrivals == nil {
		t.Fatal("an infinite counter left the activity unknown")
	}
	s := f.k.Summary().App
	// Failed: the refused connection, and two reads of +Inf.
	if s.Failed != 3 || !strings.Contains(s.LastError, "+Inf") || s.Requests != 5 || s.Added != 5 {
		t.Fatalf("app summary %+v", s)
	}
}

// The hook's own reads of the app's metrics, on a watched port, are never a client's: their
// accept is paid and nothing counts.
func TestOwnConnectionsAreNoClients(t *testing.T) {
	own := netip.MustParseAddrPort("10.1.0.2:41000")
	f := newFixtureWith(t, 0, func(o *Options) { o.Own = func(remote netip.AddrPort) bool { return remote == own } })
	base := f.poll()
	f.traffic(1, sock(t, own.String(), 8080, 1, 0, 0))
	if got := f.poll(); got != base {
		t.Fatalf("the hook's own connection: activity %v → %v", base, got)
	}
	f.traffic(0, sock(t, own.String(), 8080, 1, 300, 3))
	f.poll()
	if got := f.poll(); got != base {
		t.Fatalf("data on the hook's own connection: activity %v → %v", base, got)
	}
	if s := f.k.Summary(); s.UnknownAccepts != 0 {
		t.Fatalf("the own connection's accept left unpaid: %+v", s)
	}
	// A proxy of the pod forwarding to the app from the same address stays a client.
	f.traffic(1, sock(t, own.String(), 8080, 1, 300, 3), sock(t, "10.1.0.2:41001", 8080, 2, 0, 0))
	if got := f.poll(); got != base+1 {
		t.Fatalf("a client's connection from the same address: activity %v, want %v", got, base+1)
	}
	clients := f.k.Clients()
	if len(clients) != 1 || clients[0].Ignored || !clients[0].Counted || clients[0].NewConns != 1 {
		t.Fatalf("clients %+v: want 10.1.0.2 a client, with one connection", clients)
	}
	if s := f.k.Summary(); !s.LastLearning.Equal(f.now) {
		t.Fatalf("last learning %v, want the client's connection at %v", s.LastLearning, f.now)
	}
}

// A connection a read showed before the hook had recorded it as its own (a dial that ended
// after its request gave up) counts nothing more once it is known.
func TestOwnConnectionKnownLate(t *testing.T) {
	late := netip.MustParseAddrPort("10.1.0.2:41000")
	known := false
	f := newFixtureWith(t, 0, func(o *Options) { o.Own = func(remote netip.AddrPort) bool { return known && remote == late } })
	base := f.poll()
	f.traffic(1, sock(t, late.String(), 8080, 1, 0, 0))
	if got := f.poll(); got != base+1 {
		t.Fatalf("a connection not known as the hook's yet: activity %v, want %v", got, base+1)
	}
	known = true
	f.traffic(0, sock(t, late.String(), 8080, 1, 300, 3))
	if got := f.poll(); got != base+1 {
		t.Fatalf("data on the hook's own connection, known late: activity %v, want %v", got, base+1)
	}
}

// What the app counted beyond the kernel is a learning client's activity only where the table
// shows no data on open connections: with tcp_info, a read attributes each of those requests
// to its client, and the app's lead is one of timing.
func TestAppLeadAndLastLearning(t *testing.T) {
	for _, tcpInfo := range []bool{false, true} {
		conn := sock(t, "10.1.0.2:40000", 8080, 1, 100, 1)
		conn.HasTCPInfo = tcpInfo
		app := &fakeCounter{total: 50}
		f := newAppFixture(t, time.Minute, app, conn)
		f.poll()
		app.total += 3
		f.poll()
		s := f.k.Summary()
		if want := map[bool]time.Time{false: f.now, true: f.k.opts.Start}[tcpInfo]; !s.LastLearning.Equal(want) || s.App.Added != 3 {
			t.Errorf("tcp_info %v: last learning %v, want %v; app %+v", tcpInfo, s.LastLearning, want, s.App)
		}
	}
}

// A count of one signal pays for the other's only within AppPairing: a kernel count long
// after the app's lead moves the counter, and so does an app count long after the kernel's.
func TestAppPairingExpires(t *testing.T) {
	app := &fakeCounter{total: 10}
	f := newAppFixture(t, 0, app)
	base := f.poll()
	app.total += 5
	f.poll()
	for i := 0; i < 11; i++ { // 1.1 s of polls at 100 ms
		f.poll()
	}
	f.traffic(1, sock(t, "10.1.0.2:40000", 8080, 1, 0, 0))
	if got := f.poll(); got != base+6 {
		t.Fatalf("an accept 1.2 s after the app's lead: activity %v, want %v", got, base+6)
	}
	for i := 0; i < 11; i++ {
		f.poll()
	}
	app.total++
	if got := f.poll(); got != base+7 {
		t.Fatalf("an app count 1.2 s after the kernel's: activity %v, want %v", got, base+7)
	}
}

// Whatever the two signals do (counts, failed reads, resets, a port that is not listening),
// the activity never goes back, and never falls behind the kernel's own count.
func TestAppActivityNeverGoesBack(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 28))
	app := &fakeCounter{total: 100}
	f := newAppFixture(t, 0, app)
	f.table.listeners = append(f.table.listeners, sockets.Socket{Local: netip.MustParseAddrPort("0.0.0.0:9090"), State: sockets.Listen})
	prev := f.poll()
	var socks []sockets.Socket
	cookie := uint64(1)
	for i := 0; i < 400; i++ {
		switch rng.IntN(6) {
		case 0, 1: // a client connects
			socks = append(socks, sock(t, fmt.Sprintf("10.1.%d.%d:40000", rng.IntN(4), rng.IntN(200)+1), 8080, cookie, 0, 0))
			cookie++
			f.traffic(1, socks...)
		case 2: // the app answers some
			app.total += float64(rng.IntN(4))
		case 3: // a read fails
			app.err = errors.New("timeout")
		case 4: // the app's counter resets
			app.total = float64(rng.IntN(3))
		default:
			app.err = nil
		}
		got := f.poll()
		if got < prev {
			t.Fatalf("step %d: activity went back %v → %v", i, prev, got)
		}
		if kernel := f.k.shownActivity(); got < kernel {
			t.Fatalf("step %d: activity %v behind the kernel's own %v", i, got, kernel)
		}
		prev = got
	}
}
