package evidence

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/meshdrain/meshdrain/pkg/clock"
	"github.com/meshdrain/meshdrain/pkg/hook/drain"
	"github.com/meshdrain/meshdrain/pkg/mesh"
	"github.com/meshdrain/meshdrain/pkg/mesh/kernel"
	"github.com/meshdrain/meshdrain/pkg/sockets"
)

// openerPod is a pod's kernel on the drain's fake clock: one client opens a connection at
// each of its opens (since the hook's start); the table shows its latest one (in TIME_WAIT,
// say) until the next. Each Inbound first writes what the kernel shows at that time.
type openerPod struct {
	*kernel.Kernel
	clock *clock.Fake
	start time.Time
	snmp  string
	table *openerTable
	opens []time.Duration
}

type openerTable struct{ socks []sockets.Socket }

func (t *openerTable) Read([]uint16) ([]sockets.Socket, error) { return t.socks, nil }
func (t *openerTable) Listeners([]uint16) ([]sockets.Socket, error) {
	return []sockets.Socket{{Local: netip.MustParseAddrPort("0.0.0.0:8080"), State: sockets.Listen}}, nil
}

func (p *openerPod) Inbound(ctx context.Context, sel mesh.Selector) (mesh.Snapshot, error) {
	at := p.clock.Now().Sub(p.start)
	passive := 0
	for i, o := range p.opens {
		if o > at {
			break
		}
		passive++
		p.table.socks = []sockets.Socket{{Local: netip.MustParseAddrPort("10.0.0.1:8080"),
			Remote: netip.AddrPortFrom(netip.MustParseAddr("10.1.0.2"), uint16(40000+i)), State: sockets.Established,
			Cookie: uint64(i + 1), HasTCPInfo: true, BytesReceived: 80, DataSegsIn: 1}}
	}
	snmp := fmt.Sprintf("Tcp: ActiveOpens PassiveOpens InSegs\nTcp: 0 %d %d\n", passive, 3*passive)
	if err := os.WriteFile(p.snmp, []byte(snmp), 0o644); err != nil {
		return mesh.Snapshot{}, err
	}
	return p.Kernel.Inbound(ctx, sel)
}

// every is the times from first to before until, period apart.
func every(first, until, period time.Duration) []time.Duration {
	var out []time.Duration
	for t := first; t < until; t += period {
		out = append(out, t)
	}
	return out
}

// drainWithOpener runs the drain of a pod without a sidecar, lag bound 5s, deadline 24s,
// with one client opening at opens.
func drainWithOpener(t *testing.T, opens []time.Duration, waitForOpeners bool) (drain.Result, map[string]any) {
	t.Helper()
	start := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	fake := clock.NewAutoFake(start)
	table := &openerTable{}
	snmp := filepath.Join(t.TempDir(), "snmp")
	pod := &openerPod{clock: fake, start: start, snmp: snmp, table: table, opens: opens}
	if err := os.WriteFile(snmp, []byte("Tcp: ActiveOpens PassiveOpens InSegs\nTcp: 0 0 0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	k, err := kernel.New(kernel.Options{Ports: []int{8080}, LagBound: 5 * time.Second, Start: start, Reader: table, SNMPPath: snmp,
		Now: fake.Now, WaitPastBoundOpeners: waitForOpeners})
	if err != nil {
		t.Fatal(err)
	}
	pod.Kernel = k
	core, logs := observer.New(zap.InfoLevel)
	cfg := drain.Config{Selector: mesh.Selector{Ports: []int{8080}}, DrainMode: mesh.DrainNone, Deadline: 24 * time.Second,
		Quiet: time.Second, MinWait: 5 * time.Second, Poll: 200 * time.Millisecond, ConnectTimeout: 2 * time.Second,
		FallbackWait: 5 * time.Second, LagBound: 5 * time.Second, Clients: Kernel{Kernel: k},
		Clock: fake, Logger: zap.New(core), Start: start}
	res := drain.Run(context.Background(), cfg, pod)
	final := map[string]any{}
	for _, e := range logs.FilterMessage("drain finished").All() {
		final = e.ContextMap()
	}
	return res, final
}

func names(final map[string]any, field string) []string {
	list, _ := final[field].([]any)
	var out []string
	for _, v := range list {
		out = append(out, fmt.Sprint(v))
	}
	return out
}

// Issue 37: a client that opens a connection every second before the lag bound and goes on
// at that period past it (a monitor polling the pod's address) is taken for a caller that
// addresses the pod directly: it holds the hook only until its third open past the bound,
// not to the deadline, and the final event names it among the openers past the bound and
// as addressing the pod. With --wait-past-bound-openers the hook waits for it as before; a
// client that starts opening only past the bound, or at another period, still holds.
func TestMonitorPastTheLagBound(t *testing.T) {
	monitor := every(500*time.Millisecond, 30*time.Second, time.Second)

	res, final := drainWithOpener(t, monitor, false)
	t.Logf("monitor every 1s: %s at %v", res.Reason, res.Elapsed)
	// Its opens past the bound at 5.5s and 6.5s count; the third, at 7.5s, keeps the period.
	if res.Reason != drain.ReasonQuiet || res.Elapsed > 8*time.Second {
		t.Errorf("monitor: ended %s at %v, want quiet by 8s (the bound, 5s, and a few of its periods)", res.Reason, res.Elapsed)
	}
	if got := names(final, "clients_addressing_pod"); !slices.Equal(got, []string{"10.1.0.2"}) {
		t.Errorf("clients_addressing_pod %v, want the monitor", got)
	}
	if got := names(final, "clients_opening_past_bound"); !slices.Equal(got, []string{"10.1.0.2"}) {
		t.Errorf("clients_opening_past_bound %v, want the monitor", got)
	}

	res, final = drainWithOpener(t, monitor, true)
	if res.Reason != drain.ReasonDeadline {
		t.Errorf("--wait-past-bound-openers: ended %s at %v, want the deadline", res.Reason, res.Elapsed)
	}
	if got := names(final, "clients_addressing_pod"); !slices.Equal(got, []string{"10.1.0.2"}) {
		t.Errorf("--wait-past-bound-openers: clients_addressing_pod %v, want the monitor named all the same", got)
	}

	for name, opens := range map[string][]time.Duration{
		"opening only past the bound": every(5500*time.Millisecond, 30*time.Second, time.Second),
		"faster past the bound":       append(every(500*time.Millisecond, 5*time.Second, time.Second), every(5*time.Second, 30*time.Second, 400*time.Millisecond)...),
	} {
		res, final := drainWithOpener(t, opens, false)
		if res.Reason != drain.ReasonDeadline || names(final, "clients_addressing_pod") != nil {
			t.Errorf("%s: ended %s at %v, addressing the pod %v; want the deadline, nobody", name, res.Reason, res.Elapsed, names(final, "clients_addressing_pod"))
		}
		if got := names(final, "clients_opening_past_bound"); !slices.Equal(got, []string{"10.1.0.2"}) {
			t.Errorf("%s: clients_opening_past_bound %v, want the client", name, got)
		}
	}
}
