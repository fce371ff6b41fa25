package status

import (
	"context"
	"io"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/meshdrain/meshdrain/pkg/clock"
	"github.com/meshdrain/meshdrain/pkg/mesh"
	"github.com/meshdrain/meshdrain/pkg/mesh/kernel"
)

type fakeKernel struct {
	clients []kernel.Client
}

func (f fakeKernel) Inbound(context.Context, mesh.Selector) (mesh.Snapshot, error) {
	port, total, active := 8080, 12.0, 1.0
	return mesh.Snapshot{Naming: mesh.NamingKernel, Endpoints: []mesh.Endpoint{{Port: &port, Name: "kernel:8080", ClientActivityTotal: &total, ClientRequestsActive: &active}}}, nil
}
func (f fakeKernel) Clients() []kernel.Client { return f.clients }
func (f fakeKernel) Summary() kernel.Summary {
	return kernel.Summary{Listening: []int{8080}, NotListening: []int{9090}}
}

// The kernel's view shows who opens connections, who sends on old ones and since when, with
// opening clients first and the ignored ones last.
func TestKernelSampleAndText(t *testing.T) {
	now := time.Date(2026, 12, 5, 10, 0, 10, 0, time.UTC)
	k := fakeKernel{clients: []kernel.Client{
		{Addr: netip.MustParseAddr("10.0.0.9"), Ignored: true, NewConns: 4, LastNewConn: now.Add(-time.Second), FirstSeen: now.Add(-10 * time.Second)},
		{Addr: netip.MustParseAddr("10.0.0.2"), Open: 1, LastData: now.Add(-500 * time.Millisecond), OldData: now.Add(-500 * time.Millisecond), FirstSeen: now.Add(-10 * time.Second)},
		{Addr: netip.MustParseAddr("10.0.0.3"), NewConns: 3, LastNewConn: now.Add(-200 * time.Millisecond), FirstSeen: now.Add(-5 * time.Second)},
	}}
	r, err := Kernel(k).Sample(context.Background(), "", mesh.Selector{Ports: []int{8080}}, now)
	if err != nil {
		t.Fatal(err)
	}
	var states []string
	for _, c := range r.Clients {
		states = append(states, c.Address+"="+c.State)
	}
	if got := strings.Join(states, " "); got != "10.0.0.3=opening 10.0.0.2=sending 10.0.0.9=ignored" {
		t.Errorf("clients %s", got)
	}
	var b strings.Builder
	if err := WriteText(&b, r); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"mesh:    none", "8080", "1 opening new connections, 1 sending on open ones", "10.0.0.2  sending", "500ms ago", "--port [9090]: nothing listens"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("text lacks %q:\n%s", want, b.String())
		}
	}
	var line strings.Builder
	if err := WriteLine(&line, r); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(line.String(), "clients opening=1 sending=1 idle=0 ignored=1") || strings.Contains(line.String(), "drain=") {
		t.Errorf("line: %s", line.String())
	}
}

// sendingKernel is a client that sends twice a second on a connection open before status's
// first read, as the kernel shows it: nothing at the first read, the counted data after.
type sendingKernel struct {
	clock *clock.Fake
	reads int
}

func (k *sendingKernel) Inbound(context.Context, mesh.Selector) (mesh.Snapshot, error) {
	k.reads++
	port, active := 8080, 0.0
	total := 2 * k.clock.Now().Sub(t0kernel).Seconds()
	return mesh.Snapshot{Naming: mesh.NamingKernel, Endpoints: []mesh.Endpoint{{Port: &port, Name: "kernel:8080", ClientActivityTotal: &total, ClientRequestsActive: &active}}}, nil
}

func (k *sendingKernel) Clients() []kernel.Client {
	c := kernel.Client{Addr: netip.MustParseAddr("10.0.0.2"), Open: 1, FirstSeen: t0kernel}
	if at := k.clock.Now(); at.After(t0kernel) {
		c.LastData, c.OldData = at.Add(-100*time.Millisecond), at.Add(-100*time.Millisecond)
	}
	return []kernel.Client{c}
}

func (k *sendingKernel) Summary() kernel.Summary { return kernel.Summary{Listening: []int{8080}} }

var t0kernel = time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)

// A one-shot status --mesh none shows a client that sends as sending, with the port's rate:
// the kernel counts from the first read, so status reads twice, --interval apart.
func TestKernelOneShotShowsWhoSends(t *testing.T) {
	fake := clock.NewAutoFake(t0kernel)
	k := &sendingKernel{clock: fake}
	var out strings.Builder
	err := Run(context.Background(), Kernel(k), &out, Options{Selector: mesh.Selector{Ports: []int{8080}}, Interval: 1500 * time.Millisecond, Clock: fake})
	if err != nil {
		t.Fatal(err)
	}
	if k.reads != 2 {
		t.Errorf("%d reads, want 2", k.reads)
	}
	for _, want := range []string{"8080  kernel  3          2.0", "0 opening new connections, 1 sending on open ones, 0 idle", "10.0.0.2  sending",
		"since the first sample, 1.5s before this one"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	// A sidecar's counters run since it started: one read, as before.
	envoyReads := 0
	sc := samplerFunc(func(now time.Time) Report { envoyReads++; return Report{Mesh: mesh.Istio, SampledAt: now} })
	if err := Run(context.Background(), sc, io.Discard, Options{Clock: fake}); err != nil || envoyReads != 1 {
		t.Errorf("sidecar one-shot: %d reads, %v", envoyReads, err)
	}
}

type samplerFunc func(now time.Time) Report

func (f samplerFunc) Sample(_ context.Context, _ string, _ mesh.Selector, now time.Time) (Report, error) {
	return f(now), nil
}
