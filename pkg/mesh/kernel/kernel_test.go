package kernel

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshdrain/meshdrain/pkg/mesh"
	"github.com/meshdrain/meshdrain/pkg/sockets"
)

// fakeTable is a socket table and a namespace's counters the test writes.
type fakeTable struct {
	socks     []sockets.Socket
	listeners []sockets.Socket
	snmp      string
	passive   uint64
	inSegs    uint64
}

func (f *fakeTable) Read([]uint16) ([]sockets.Socket, error) { return f.socks, nil }
func (f *fakeTable) Listeners(ports []uint16) ([]sockets.Socket, error) {
	var out []sockets.Socket
	for _, l := range f.listeners {
		if len(ports) == 0 || containsPort(ports, l.Local.Port()) {
			out = append(out, l)
		}
	}
	return out, nil
}

func containsPort(ports []uint16, p uint16) bool {
	for _, x := range ports {
		if x == p {
			return true
		}
	}
	return false
}

// counters writes PassiveOpens and InSegs as /proc/net/snmp does.
func (f *fakeTable) counters(t *testing.T) {
	t.Helper()
	content := fmt.Sprintf("Tcp: ActiveOpens PassiveOpens InSegs\nTcp: 0 %d %d\n", f.passive, f.inSegs)
	if err := os.WriteFile(f.snmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func sock(t *testing.T, from string, port uint16, cookie uint64, bytes uint64, segs uint32) sockets.Socket {
	t.Helper()
	return sockets.Socket{Local: netip.MustParseAddrPort(fmt.Sprintf("10.0.0.1:%d", port)), Remote: netip.MustParseAddrPort(from),
		State: sockets.Established, Cookie: cookie, Inode: cookie, HasTCPInfo: true, BytesReceived: bytes, DataSegsIn: segs}
}

// withData is s once bytes and segs have been received on it.
func withData(s sockets.Socket, bytes uint64, segs uint32) sockets.Socket {
	s.BytesReceived, s.DataSegsIn = bytes, segs
	return s
}

type fixture struct {
	t     *testing.T
	table *fakeTable
	k     *Kernel
	now   time.Time
}

func newFixture(t *testing.T, lagBound time.Duration, initial ...sockets.Socket) *fixture {
	return newFixtureWith(t, lagBound, nil, initial...)
}

// newFixtureWith is newFixture with options changed by with (the app's request counter).
func newFixtureWith(t *testing.T, lagBound time.Duration, with func(*Options), initial ...sockets.Socket) *fixture {
	table := &fakeTable{snmp: filepath.Join(t.TempDir(), "snmp"), socks: initial,
		listeners: []sockets.Socket{{Local: netip.MustParseAddrPort("0.0.0.0:8080"), State: sockets.Listen}, {Local: netip.MustParseAddrPort("0.0.0.0:15008"), State: sockets.Listen}}}
	table.counters(t)
	f := &fixture{t: t, table: table, now: time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)}
	opts := Options{Ports: []int{8080}, Ignore: []netip.Prefix{netip.MustParsePrefix("10.9.0.0/16")}, LagBound: lagBound,
		Start: f.now, Reader: table, SNMPPath: table.snmp, Now: func() time.Time { return f.now }}
	if with != nil {
		with(&opts)
	}
	k, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	f.k = k
	f.poll()
	return f
}

// poll moves the clock a poll on and reads; it returns the activity counter.
func (f *fixture) poll() float64 {
	f.t.Helper()
	f.now = f.now.Add(100 * time.Millisecond)
	snap, err := f.k.Inbound(context.Background(), mesh.Selector{Ports: []int{8080}})
	if err != nil {
		f.t.Fatal(err)
	}
	r := snap.Read()
	if r.Signal != mesh.SignalKernel {
		f.t.Fatalf("signal %s", r.Signal)
	}
	return *r.Arrivals
}

func (f *fixture) traffic(passive uint64, socks ...sockets.Socket) {
	f.table.passive += passive
	f.table.inSegs += 10
	f.table.socks = socks
	f.table.counters(f.t)
}

// Every accept counts once: from the table, and, where nothing names it, from PassiveOpens a
// read later as an unknown client's; an ignored source's and another port's do not.
func TestAcceptsCountedWithoutMisses(t *testing.T) {
	f := newFixture(t, 0)
	f.traffic(1, sock(t, "10.1.0.2:40000", 8080, 1, 0, 0))
	if got := f.poll(); got != 1 {
		t.Fatalf("a named accept: activity %v, want 1", got)
	}
	f.traffic(2, sock(t, "10.1.0.2:40000", 8080, 1, 0, 0), sock(t, "10.9.0.1:5000", 8080, 2, 0, 0), sock(t, "10.1.0.7:6000", 15008, 3, 0, 0))
	if got := f.poll(); got != 1 {
		t.Fatalf("an ignored probe and ztunnel's own accept counted: activity %v, want 1", got)
	}
	// An accept the table never shows (opened and closed unseen, no destroy records here).
	f.traffic(1, sock(t, "10.1.0.2:40000", 8080, 1, 0, 0))
	if got := f.poll(); got != 1 {
		t.Fatalf("an unnamed accept counted at once: activity %v, want 1 (it gets a read to be named)", got)
	}
	f.traffic(0, sock(t, "10.1.0.2:40000", 8080, 1, 0, 0))
	if got := f.poll(); got != 1 {
		t.Fatalf("an unnamed accept, a read and 100ms later: activity %v, want 1 (its record may still come)", got)
	}
	f.poll()
	f.traffic(0, sock(t, "10.1.0.2:40000", 8080, 1, 0, 0))
	if got := f.poll(); got != 2 {
		t.Fatalf("an unnamed accept, 300ms later: activity %v, want 2", got)
	}
	if s := f.k.Summary(); s.UnknownAccepts != 1 || s.LastActivity != ActivityUnknownClient {
		t.Fatalf("summary %+v", s)
	}
}

// Data on an open connection counts by its data segments, until the lag bound; past it, an
// old connection's data names its client as one that never learns and counts nothing, while
// a connection opened past the bound still counts and names its client too.
func TestHoldersPastTheBound(t *testing.T) {
	old := sock(t, "10.1.0.2:40000", 8080, 1, 100, 1)
	f := newFixture(t, time.Second, old)
	f.traffic(0, withData(old, 400, 4))
	if got := f.poll(); got != 3 {
		t.Fatalf("three requests on an open connection: activity %v, want 3", got)
	}
	for f.now.Before(f.k.opts.Start.Add(time.Second)) {
		f.traffic(0, withData(old, 400, 4))
		f.poll()
	}
	before := f.poll()
	f.traffic(0, withData(old, 500, 5))
	if got := f.poll(); got != before {
		t.Fatalf("data past the bound on a connection opened before it counted: %v → %v", before, got)
	}
	late := sock(t, "10.1.0.3:41000", 8080, 2, 50, 1)
	f.traffic(1, withData(old, 500, 5), late)
	if got := f.poll(); got != before+1 {
		t.Fatalf("a connection opened past the bound: activity %v, want %v", got, before+1)
	}
	var never, opening []string
	for _, c := range f.k.Clients() {
		if c.NeverLearns() {
			never = append(never, c.Addr.String())
		}
		if c.NewPastBound > 0 {
			opening = append(opening, c.Addr.String())
		}
	}
	if strings.Join(never, ",") != "10.1.0.2" || strings.Join(opening, ",") != "10.1.0.3" {
		t.Fatalf("never learn %v, opening past the bound %v", never, opening)
	}
}

// The counters stand still: the table is not read (a read walks the node's connection hash).
func TestNoReadWhileTheCountersStandStill(t *testing.T) {
	f := newFixture(t, 0)
	reads := f.k.reads
	f.table.socks = []sockets.Socket{sock(t, "10.1.0.2:40000", 8080, 1, 0, 0)} // unseen: no counter moved
	f.poll()
	if f.k.reads != reads {
		t.Fatalf("the table was read although the counters stood still")
	}
}

func TestNewNeedsPorts(t *testing.T) {
	if _, err := New(Options{}); err == nil || !strings.Contains(err.Error(), "--port") {
		t.Fatalf("error %v does not name --port", err)
	}
}

// A missing /proc/net/snmp is an error naming --mesh none at the first read.
func TestUnreadableCounters(t *testing.T) {
	k, err := New(Options{Ports: []int{8080}, Reader: &fakeTable{}, SNMPPath: "/nonexistent/snmp"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := k.Inbound(context.Background(), mesh.Selector{Ports: []int{8080}}); err == nil || !strings.Contains(err.Error(), "--mesh none") {
		t.Fatalf("error %v", err)
	}
	if err := CheckCounters("/nonexistent/snmp"); err == nil || !strings.Contains(err.Error(), "--mesh none") {
		t.Fatalf("CheckCounters: %v", err)
	}
}

// The kubelet's listener in the table is the node's namespace.
func TestCheckNamespaceRefusesTheNodes(t *testing.T) {
	node := &fakeTable{listeners: []sockets.Socket{{Local: netip.MustParseAddrPort("0.0.0.0:10250"), State: sockets.Listen}}}
	if err := CheckNamespace(node, nil); !errors.Is(err, ErrHostNetwork) {
		t.Fatalf("error %v, want ErrHostNetwork", err)
	}
	if err := CheckNamespace(&fakeTable{}, []netip.Prefix{netip.MustParsePrefix("192.0.2.1/32")}); err != nil {
		t.Fatalf("a pod's namespace refused: %v", err)
	}
}

func TestParseIgnoreSource(t *testing.T) {
	env := map[string]string{"HOST_IP": "10.0.5.4"}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	for in, want := range map[string]string{"10.0.0.0/8": "10.0.0.0/8", "10.1.2.3": "10.1.2.3/32", "$(HOST_IP)": "10.0.5.4/32", "fd00::1": "fd00::1/128"} {
		p, err := ParseIgnoreSource(in, lookup)
		if err != nil || p.String() != want {
			t.Errorf("%s: %v %v, want %s", in, p, err, want)
		}
	}
	for _, bad := range []string{"$(NODE_IP)", "nonsense", ""} {
		if _, err := ParseIgnoreSource(bad, lookup); err == nil || !strings.Contains(err.Error(), "--ignore-source") {
			t.Errorf("%q: error %v", bad, err)
		}
	}
}

// Dense traffic: a client sends at every poll. After two reads that found only its data, the
// table is read every DenseReadPolls polls, and the counter still moves at every poll; the
// first poll at which the counters stand still reads at once and adds nothing twice. Then a
// probe from an ignored source ends the dense reading: the next busy polls read again.
func TestDenseTrafficReadsEveryFewPolls(t *testing.T) {
	conn := sock(t, "10.1.0.2:40000", 8080, 1, 100, 1)
	f := newFixture(t, 0, conn)
	bytes, segs := uint64(100), uint32(1)
	send := func() {
		bytes, segs = bytes+100, segs+1
		conn.BytesReceived, conn.DataSegsIn, conn.SinceLastDataRecv = bytes, segs, 0
		f.traffic(0, conn)
	}
	last := f.poll()
	readsAt := []int{}
	for i := range 20 {
		send()
		reads := f.k.reads
		got := f.poll()
		if got <= last {
			t.Fatalf("poll %d: a request and the counter stood at %v", i, got)
		}
		last = got
		if f.k.reads != reads {
			readsAt = append(readsAt, i)
		}
	}
	if want := []int{0, 1, 9, 17}; fmt.Sprint(readsAt) != fmt.Sprint(want) {
		t.Fatalf("reads at polls %v, want %v", readsAt, want)
	}
	// 20 requests, and no more than one poll's credit the reads did not confirm.
	if last < 20 || last > 21 {
		t.Fatalf("counter %v after 20 requests", last)
	}
	reads := f.k.reads
	f.table.counters(t) // nothing new
	if got := f.poll(); f.k.reads != reads+1 || got != last {
		t.Fatalf("a still poll: %d reads (want one), counter %v → %v", f.k.reads-reads, last, got)
	}

	probe := sock(t, "10.9.0.1:5000", 8080, 9, 0, 0)
	for range 3 {
		send()
		f.poll()
	}
	send()
	f.table.passive++
	f.table.socks = append(f.table.socks, probe)
	f.table.counters(t)
	for reads = f.k.reads; f.k.reads == reads; {
		f.poll() // until the read that finds the probe
		send()
		f.table.socks = append(f.table.socks, probe)
		f.table.counters(t)
	}
	reads = f.k.reads
	f.poll()
	if f.k.reads == reads {
		t.Fatalf("the poll after a read that found a probe did not read")
	}
}

// Dense traffic on new connections, one per request: only an accept counts ahead of a read.
// Once the requests stop, the last connections' closing segments still move InSegs; a poll
// that shows only them reads the table, which finds nothing new, instead of counting one more
// activity ahead (which held the hook up to DenseReadPolls polls past the last request).
func TestAcceptDenseTrafficCountsAheadOnlyOnAccepts(t *testing.T) {
	f := newFixture(t, 0)
	var open []sockets.Socket
	last := f.poll()
	for i := range 12 {
		open = append(open, sock(t, fmt.Sprintf("10.1.0.2:%d", 40000+i), 8080, uint64(100+i), 100, 1))
		f.traffic(1, open...)
		last = f.poll()
	}
	if f.k.schedule.mode != readDenseAccepts || f.k.schedule.denseReads < denseAfterReads {
		t.Fatalf("after 12 polls with an accept each: onAccepts %v, dense reads %d", f.k.schedule.mode == readDenseAccepts, f.k.schedule.denseReads)
	}
	for range 3 {
		reads := f.k.reads
		f.traffic(0, open...) // segments, no accept: the connections closing
		got := f.poll()
		if f.k.reads != reads+1 {
			t.Fatalf("a poll with segments and no accept counted ahead instead of reading")
		}
		if got != last {
			t.Fatalf("counter %v → %v with no request", last, got)
		}
	}
}

// Past the lag bound, once the holders that send have been named and no connection that
// counts is open, the table is not read while only their segments move the counters: a read
// walks the whole connection table. An accept reads again.
func TestHoldersAloneAreNotReadPastTheBound(t *testing.T) {
	holder := sock(t, "10.1.0.2:40000", 8080, 1, 100, 1)
	f := newFixture(t, time.Second, holder)
	bytes, segs := uint64(100), uint32(1)
	send := func(others ...sockets.Socket) {
		bytes, segs = bytes+100, segs+1
		holder.BytesReceived, holder.DataSegsIn, holder.SinceLastDataRecv = bytes, segs, 0
		f.traffic(0, append([]sockets.Socket{holder}, others...)...)
	}
	for f.now.Before(f.k.opts.Start.Add(time.Second)) {
		send()
		f.poll()
	}
	var counter float64
	for range 2 { // past the bound: the first read there names the holder
		send()
		counter = f.poll()
	}
	named := false
	for _, c := range f.k.Clients() {
		named = named || (c.Addr == netip.MustParseAddr("10.1.0.2") && c.NeverLearns())
	}
	if !named || f.k.schedule.mode != readHoldersOnly {
		t.Fatalf("past the bound: holder named %v, holders only %v", named, f.k.schedule.mode == readHoldersOnly)
	}
	reads := f.k.reads
	for range 5 {
		send()
		if got := f.poll(); got != counter {
			t.Fatalf("a holder's data past the bound moved the counter %v → %v", counter, got)
		}
	}
	if f.k.reads != reads {
		t.Fatalf("%d reads while only the holder sent past the bound, want none", f.k.reads-reads)
	}
	late := sock(t, "10.1.0.3:41000", 8080, 2, 50, 1)
	f.table.passive++
	send(late)
	if got := f.poll(); f.k.reads != reads+1 || got <= counter {
		t.Fatalf("an accept past the bound: %d reads (want 1), counter %v → %v", f.k.reads-reads, counter, got)
	}
}

// Past the lag bound nothing is counted ahead: a holder that never learns keeps sending and
// moving the counters, and reads between its sends can find only a client that still counts
// (here one opening past the bound); counting ahead then would count the holder's next data
// and hold the hook for it.
func TestNoCountingAheadPastTheBound(t *testing.T) {
	holder := sock(t, "10.1.0.2:40000", 8080, 1, 100, 1)
	f := newFixture(t, time.Second, holder)
	bytes, segs := uint64(100), uint32(1)
	for f.now.Before(f.k.opts.Start.Add(time.Second)) {
		bytes, segs = bytes+100, segs+1
		holder.BytesReceived, holder.DataSegsIn = bytes, segs
		f.traffic(0, holder)
		f.poll()
	}
	// Past the bound: a late opener's connection shows new data at every poll, the holder's
	// at every third.
	late := sock(t, "10.1.0.3:41000", 8080, 2, 50, 1)
	lateBytes := uint64(50)
	f.traffic(1, holder, late)
	f.poll()
	for i := range 10 {
		if i%3 == 0 {
			bytes, segs = bytes+100, segs+1
			holder.BytesReceived, holder.DataSegsIn = bytes, segs
		}
		lateBytes += 50
		late.BytesReceived, late.SinceLastDataRecv = lateBytes, 0
		f.traffic(0, holder, late)
		reads := f.k.reads
		f.poll()
		if f.k.reads != reads+1 {
			t.Fatalf("poll %d past the bound did not read the table", i)
		}
	}
}

// LastLearning leaves out, once a client is seen to never learn, the data it sent before the
// bound on the connection it goes on sending on past it; its other activity, and every other
// client's, stays.
func TestLastLearningLeavesOutTheDataOfClientsThatNeverLearn(t *testing.T) {
	old := sock(t, "10.1.0.2:40000", 8080, 1, 100, 1)
	f := newFixture(t, time.Second, old)
	newcomer := sock(t, "10.1.0.3:41000", 8080, 2, 50, 1)
	f.traffic(1, withData(old, 200, 2), newcomer)
	f.poll()
	accepted := f.now
	bytes := uint64(200)
	for f.now.Add(100 * time.Millisecond).Before(f.k.opts.Start.Add(time.Second)) {
		bytes += 100
		f.traffic(0, withData(old, bytes, uint32(bytes/100)), newcomer)
		f.poll()
	}
	if got := f.k.Summary().LastLearning; !got.After(accepted) {
		t.Fatalf("before the bound: LastLearning %v, want the holder's data, after the newcomer's accept %v", got.Sub(f.k.opts.Start), accepted.Sub(f.k.opts.Start))
	}
	f.traffic(0, withData(old, bytes+100, uint32(bytes/100)+1), newcomer)
	f.poll()
	if got := f.k.Summary().LastLearning; !got.Equal(accepted) {
		t.Fatalf("past the bound: LastLearning %v, want the newcomer's accept %v", got.Sub(f.k.opts.Start), accepted.Sub(f.k.opts.Start))
	}
}

// An accept that neither its read nor the next named counts as an unknown client's once
// unnamedAfter has passed, before a later name (a probe's, from an ignored source) can pay
// for it: paid with the probe's name, it would leave the probe's own accept to count as an
// unknown client's later, and stretch the wait.
func TestLaterNamedAcceptDoesNotPayForAnOlderUnnamedOne(t *testing.T) {
	f := newFixture(t, 0)
	f.traffic(1) // an accept the table never shows
	f.poll()
	for _, at := range []string{"100ms", "200ms"} {
		f.traffic(0)
		if got := f.poll(); got != 0 {
			t.Fatalf("%s later: activity %v, want 0 (its record may still come)", at, got)
		}
	}
	f.traffic(1, sock(t, "10.9.0.1:5000", 8080, 9, 0, 0)) // an ignored probe's accept, named
	if got := f.poll(); got != 1 {
		t.Fatalf("300ms later, with a probe's named accept: activity %v, want 1 (the unnamed accept, an unknown client's)", got)
	}
	for range 5 {
		f.traffic(0)
		f.poll()
	}
	if s := f.k.Summary(); s.UnknownAccepts != 1 {
		t.Fatalf("unknown accepts %d, want 1: the probe's is no client's", s.UnknownAccepts)
	}
}

// An accept known for an unknown client's only after activity that came later has been
// counted moves the counter no more: the silence the rule measures began after it. Counted
// then, it passed for an arrival a whole unnamedAfter after the last request.
func TestUnknownAcceptOlderThanCountedActivityIsNoArrival(t *testing.T) {
	conn := sock(t, "10.1.0.2:40000", 8080, 1, 100, 1)
	f := newFixture(t, 0, conn)
	f.traffic(1, conn) // an accept the table never shows
	f.poll()
	f.traffic(0, withData(conn, 200, 2)) // then a request on the open connection
	counted := f.poll()
	for range 4 {
		f.traffic(0, withData(conn, 200, 2))
		if got := f.poll(); got != counted {
			t.Fatalf("the unnamed accept, known for an unknown client's later: activity %v → %v", counted, got)
		}
	}
	if s := f.k.Summary(); s.UnknownAccepts != 1 {
		t.Fatalf("unknown accepts %d, want 1 (still named in the final event)", s.UnknownAccepts)
	}
}

// Dense traffic on new connections: the read that follows the polls that counted accepts
// ahead names them, and the credit pays for them, so the counter does not move at that read;
// an accept its counters hold and nothing names may have come after the counter last moved.
// Known for an unknown client's later, it moves the counter then.
func TestUnknownAcceptAfterTheLastMoveCounts(t *testing.T) {
	f := newFixture(t, 0)
	var open []sockets.Socket
	accept := func(i int) {
		open = append(open, sock(t, fmt.Sprintf("10.1.0.2:%d", 40000+i), 8080, uint64(100+i), 100, 1))
	}
	for range 12 {
		accept(len(open))
		f.traffic(1, open...)
		f.poll()
	}
	for f.k.schedule.unread < DenseReadPolls-1 { // up to the poll before a read
		accept(len(open))
		f.traffic(1, open...)
		f.poll()
	}
	if f.k.schedule.unread == 0 {
		t.Fatalf("no counting ahead: the test needs dense reading")
	}
	f.traffic(1, open...) // an accept the table never shows; the credit pays for the rest
	counted := f.poll()
	for range 3 {
		f.traffic(0, open...)
		f.poll()
	}
	if got := f.poll(); got != counted+1 {
		t.Fatalf("an unknown client's accept after the last move of the counter: activity %v → %v, want one more", counted, got)
	}
}

// A kubelet probe answered and closed between two reads shows only as TIME_WAIT, at the read
// whose counters hold its accept (or the next): it pays for its own accept, not for a
// client's accept of two reads before that nothing named. Paid with the probe's name, that
// older accept would leave the probe's own unnamed, to be known for an unknown client's with
// the probe's late time, after the counter's last move: an arrival long after the traffic
// stopped (the simulator's per-request shape, seed 1, ran to its lag bound).
func TestProbePaysForItsOwnAccept(t *testing.T) {
	conn := sock(t, "10.1.0.2:40000", 8080, 1, 100, 1)
	f := newFixture(t, 0)
	f.traffic(2, conn) // a client's accept the table shows, and one it never will
	counted := f.poll()
	f.traffic(0, conn)
	f.poll()
	probe := sock(t, "10.9.0.1:5000", 8080, 2, 0, 0)
	probe.State, probe.HasTCPInfo = sockets.TimeWait, false
	f.traffic(1, conn, probe)
	for range 6 {
		if got := f.poll(); got != counted {
			t.Fatalf("after the probe's accept: activity %v → %v, want no arrival", counted, got)
		}
		f.traffic(0, conn, probe)
	}
	if s := f.k.Summary(); s.UnknownAccepts != 1 {
		t.Fatalf("unknown accepts %d, want 1 (the client's, still named in the final event)", s.UnknownAccepts)
	}
}

// A TCP Fast Open accept is counted at its SYN, and a read skips it while it is half open: when
// the table first shows it established, reads later, it pays for that older accept.
func TestHalfOpenAcceptPaysForItsCount(t *testing.T) {
	f := newFixture(t, 0)
	half := sock(t, "10.1.0.2:40000", 8080, 7, 100, 1)
	half.State = sockets.SynRecv
	f.traffic(1, half)
	f.poll()
	f.traffic(0, half)
	f.poll()
	f.traffic(0, sock(t, "10.1.0.2:40000", 8080, 7, 100, 1))
	for range 6 {
		f.poll()
	}
	if s := f.k.Summary(); s.UnknownAccepts != 0 {
		t.Fatalf("unknown accepts %d, want 0: the half-open accept, named once established, was taken for an unknown client's", s.UnknownAccepts)
	}
}

// A connection one read missed (a dump resumes a hash bucket by position) and the next shows
// again is the same connection, however long it stays: never a second accept.
func TestConnectionMissedByAReadIsNoNewAccept(t *testing.T) {
	conn := sock(t, "10.1.0.2:40000", 8080, 1, 100, 1)
	f := newFixture(t, 0)
	f.traffic(1, conn)
	counted := f.poll()
	f.traffic(0) // the read misses it
	f.poll()
	for range sockets.VanishedReads + 3 {
		f.traffic(0, conn)
		if got := f.poll(); got != counted {
			t.Fatalf("the connection shown again: activity %v → %v, want no arrival", counted, got)
		}
	}
}

// A later connection on the same addresses, shown before the earlier one's record came: that
// record names nothing.
func TestLateRecordOfAReplacedConnectionNamesNothing(t *testing.T) {
	f := newFixture(t, 0)
	first := sock(t, "10.1.0.2:40000", 8080, 1, 100, 1)
	f.traffic(1, first)
	f.poll()
	f.traffic(1, sock(t, "10.1.0.2:40000", 8080, 2, 100, 1))
	f.poll()
	if got := f.k.record(&readResult{at: f.now}, withData(first, 101, 1)); got != 0 {
		t.Fatalf("the replaced connection's record named an accept (%d)", got)
	}
}

// A connection the pod closed first between two reads shows only as TIME_WAIT: it is named at
// the read that shows it, and its full socket's record, whose cookie the TIME_WAIT socket need
// not carry, names nothing more.
func TestTimeWaitNamedOnce(t *testing.T) {
	f := newFixture(t, 0)
	tw := sock(t, "10.1.0.5:42000", 8080, 21, 0, 0)
	tw.State, tw.HasTCPInfo = sockets.TimeWait, false
	f.traffic(1, tw)
	if got := f.poll(); got != 1 {
		t.Fatalf("a TIME_WAIT connection no read showed: activity %v, want 1", got)
	}
	c, ok := f.k.conns.Lookup(sockets.KeyOf(tw))
	if !ok || !c.TimeWait {
		t.Fatalf("not kept as first seen in TIME_WAIT: %+v", c)
	}
	full := sock(t, "10.1.0.5:42000", 8080, 99, 120, 1) // its record, another cookie
	if got := f.k.record(&readResult{at: f.now}, full); got != 0 {
		t.Fatalf("its record named it again (%d)", got)
	}
	later := sock(t, "10.1.0.5:42000", 8080, 100, 120, 1) // a later connection on the same addresses
	if got := f.k.record(&readResult{at: f.now}, later); got != 1 {
		t.Fatalf("a later connection on the same addresses was taken for the first (%d)", got)
	}
}

// Read from /proc (no cookie), a connection is its ends: another inode on them is the same
// connection, as this backend has always counted it (connPolicy), and names no accept.
func TestProcConnectionIsItsEnds(t *testing.T) {
	proc := func(inode uint64) sockets.Socket {
		s := sock(t, "10.1.0.2:40000", 8080, 0, 0, 0)
		s.Inode, s.HasTCPInfo = inode, false
		return s
	}
	f := newFixture(t, 0)
	f.traffic(1, proc(11))
	counted := f.poll()
	f.traffic(0, proc(12))
	if got := f.poll(); got != counted {
		t.Fatalf("another inode on the same ends: activity %v → %v, want no arrival", counted, got)
	}
}
