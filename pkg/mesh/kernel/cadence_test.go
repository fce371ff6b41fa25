package kernel

import (
	"net/netip"
	"testing"
	"time"
)

// opener drives one client of the fixture that opens a connection at each poll open says;
// the table shows its latest connection until the next (in TIME_WAIT, say). It returns the
// activity counter after each poll, from the fixture's first poll (100ms) to until.
func (f *fixture) opener(from string, until time.Duration, open func(at time.Duration) bool) map[time.Duration]float64 {
	f.t.Helper()
	counter := map[time.Duration]float64{}
	for i := 0; ; i++ {
		at := f.now.Add(100 * time.Millisecond).Sub(f.k.opts.Start)
		if at > until {
			return counter
		}
		if open(at) {
			addr := netip.MustParseAddrPort(from)
			c := sock(f.t, netip.AddrPortFrom(addr.Addr(), addr.Port()+uint16(i)).String(), 8080, uint64(1000+i), 80, 1)
			f.traffic(1, c)
		}
		counter[at] = f.poll()
	}
}

// everySecond opens at 0.5s, 1.5s, ...: a monitor's period.
func everySecond(at time.Duration) bool { return at%time.Second == 500*time.Millisecond }

func (f *fixture) client(addr string) Client {
	f.t.Helper()
	for _, c := range f.k.Clients() {
		if c.Addr == netip.MustParseAddr(addr) {
			return c
		}
	}
	f.t.Fatalf("client %s never seen", addr)
	return Client{}
}

// A monitor opening a connection every second, before the lag bound (5s) and past it at the
// same period, is taken for a caller that addresses the pod directly at its third open past
// the bound (7.5s; the first, 5.5s, spans the bound): from then on its opens move the
// activity counter no more. Before, every open counted, to the deadline.
func TestMonitorAtItsPeriodStopsCountingPastTheBound(t *testing.T) {
	f := newFixture(t, 5*time.Second)
	counter := f.opener("10.1.0.2:40000", 20*time.Second, everySecond)
	if got, want := counter[6500*time.Millisecond], float64(7); got != want {
		t.Fatalf("at 6.5s, after its second open past the bound: activity %v, want %v (every open so far counted)", got, want)
	}
	if got, want := counter[20*time.Second], counter[6500*time.Millisecond]; got != want {
		t.Fatalf("activity %v at 20s, %v at 6.5s: the monitor's opens past 7.5s still counted", got, want)
	}
	c := f.client("10.1.0.2")
	if !c.AddressesPod || c.NewPastBound != 15 {
		t.Fatalf("monitor: addresses the pod %v, %d opens past the bound; want true, 15", c.AddressesPod, c.NewPastBound)
	}
	if s := f.k.Summary(); s.LastActivityAt.Sub(f.k.opts.Start) != 6500*time.Millisecond {
		t.Fatalf("last counted activity at %v, want its open at 6.5s", s.LastActivityAt.Sub(f.k.opts.Start))
	}
}

// With --wait-past-bound-openers the monitor is named all the same, and every open counts.
func TestWaitPastBoundOpenersCountsTheMonitor(t *testing.T) {
	f := newFixtureWith(t, 5*time.Second, func(o *Options) { o.WaitPastBoundOpeners = true })
	counter := f.opener("10.1.0.2:40000", 20*time.Second, everySecond)
	if got := counter[20*time.Second]; got != 20 {
		t.Fatalf("activity %v after 20 opens, want 20", got)
	}
	if !f.client("10.1.0.2").AddressesPod {
		t.Fatalf("the monitor is not named as addressing the pod")
	}
}

// A client that opens only past the bound, one whose period past it is not the one before,
// and one that opens several times a second (traffic, not a monitor) hold as before: each of
// their opens counts, and none is named as addressing the pod.
func TestOtherOpenersPastTheBoundStillCount(t *testing.T) {
	for name, open := range map[string]func(time.Duration) bool{
		"opening only past the bound": func(at time.Duration) bool { return at >= 5*time.Second && everySecond(at) },
		"faster past the bound": func(at time.Duration) bool {
			return everySecond(at) || (at >= 5*time.Second && at%time.Second == 0)
		},
		"slower past the bound": func(at time.Duration) bool {
			return (at < 5*time.Second && everySecond(at)) || at%(3*time.Second) == 500*time.Millisecond
		},
		"every 300ms": func(at time.Duration) bool { return at%(300*time.Millisecond) == 0 },
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, 5*time.Second)
			counter := f.opener("10.1.0.2:40000", 20*time.Second, open)
			c := f.client("10.1.0.2")
			if c.AddressesPod || float64(c.NewConns) != counter[20*time.Second] {
				t.Fatalf("addresses the pod %v, activity %v after %d opens: want false, every open counted", c.AddressesPod, counter[20*time.Second], c.NewConns)
			}
		})
	}
}

// Once taken for a caller that addresses the pod directly, the data on its connections
// opened past the bound counts nothing, and its requests in flight are not the app's to wait
// for; another client's new connection still counts.
func TestDirectCallersConnectionsCountNothing(t *testing.T) {
	f := newFixture(t, 5*time.Second)
	counter := f.opener("10.1.0.2:40000", 8*time.Second, everySecond)
	before := counter[8*time.Second]
	lingering := sock(t, "10.1.0.2:39000", 8080, 500, 80, 1)
	f.traffic(1, lingering)
	f.poll()
	sending := withData(lingering, 400, 3)
	sending.SinceLastDataRecv, sending.SinceLastDataSent = 0, 50*time.Millisecond // a request not yet answered
	f.traffic(0, sending)
	if got := f.poll(); got != before || f.k.active[8080] != 0 {
		t.Fatalf("the direct caller's new connection and its data: activity %v → %v, in flight %v; want nothing", before, got, f.k.active[8080])
	}
	f.traffic(1, sending, sock(t, "10.1.0.3:41000", 8080, 501, 80, 1))
	if got := f.poll(); got != before+1 {
		t.Fatalf("another client's open past the bound: activity %v, want %v", got, before+1)
	}
	if f.client("10.1.0.3").AddressesPod {
		t.Fatalf("a client seen once past the bound is named as addressing the pod")
	}
}
