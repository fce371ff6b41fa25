package status

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/meshdrain/meshdrain/pkg/hook/evidence"
	"github.com/meshdrain/meshdrain/pkg/mesh"
	"github.com/meshdrain/meshdrain/pkg/mesh/kernel"
)

// The states of a client without a sidecar (--mesh none): what the kernel last saw it do.
const (
	KernelOpening = "opening"
	KernelSending = "sending"
	KernelIdle    = "idle"
	KernelIgnored = "ignored"
)

// KernelReader is the pod's kernel read as a sidecar (*kernel.Kernel).
type KernelReader interface {
	Inbound(ctx context.Context, sel mesh.Selector) (mesh.Snapshot, error)
	Clients() []kernel.Client
	Summary() kernel.Summary
}

// Kernel samples a pod without a sidecar (--mesh none): the app's own ports, read from the
// socket table and the TCP counters of the namespace status runs in (run it in the pod), and
// each client as the kernel shows it since the first sample: who opens new connections, who
// still sends on connections that were open then, since when. It is the view prestop --mesh
// none judges by (one kernel.Kernel), so what status shows is what the hook counts.
func Kernel(k KernelReader) Sampler { return &kernelSampler{k: k} }

type kernelSampler struct {
	k KernelReader
	// first is when the first sample was taken: the counts run from it.
	first time.Time
}

// firstSampleIsBaseline: the kernel counts the activity since its first read.
func (*kernelSampler) firstSampleIsBaseline() bool { return true }

func (s *kernelSampler) Sample(ctx context.Context, _ string, sel mesh.Selector, now time.Time) (Report, error) {
	snap, err := s.k.Inbound(ctx, sel)
	if err != nil {
		return Report{}, err
	}
	if s.first.IsZero() {
		s.first = now
	}
	r := Report{Admin: "none (the pod's kernel)", ServerState: "-", Mesh: mesh.None, Naming: snap.Naming, Signal: snap.Read().Signal,
		SampledAt: now, CountedSince: ptrTime(s.first)}
	for _, e := range snap.Endpoints {
		sig := mesh.Snapshot{Endpoints: []mesh.Endpoint{e}}.Read().Signal
		r.Inbound = append(r.Inbound, Port{Port: e.Port, Name: e.Name, Signal: sig, RequestsTotal: e.ClientActivityTotal, RequestsActive: e.ClientRequestsActive})
	}
	sum := s.k.Summary()
	if len(sum.NotListening) > 0 {
		r.Hints = append(r.Hints, mesh.None.Terms().PortsMissing(sum.NotListening, sum.Listening)+"; run status in the pod (kubectl exec)")
	}
	r.Hints = append(r.Hints, sum.Limits...)
	if sum.UnknownAccepts > 0 {
		r.Hints = append(r.Hints, fmt.Sprintf("%d accepted connection(s) no read of the socket table could name: counted as an unknown client's", sum.UnknownAccepts))
	}
	clients := s.k.Clients()
	r.Clients = kernelClients(clients)
	counts := evidence.KernelCounts(clients, sum)
	r.counts = &counts
	return r, nil
}

func kernelClients(clients []kernel.Client) []Client {
	rows := make([]Client, 0, len(clients))
	for _, c := range clients {
		n := c.NewConns
		row := Client{Address: c.Addr.String(), Open: c.Open, Since: c.FirstSeen, NewConnections: &n, State: KernelIdle}
		if !c.LastData.IsZero() {
			row.LastData = ptrTime(c.LastData)
		}
		if !c.LastNewConn.IsZero() {
			row.LastNewConnection = ptrTime(c.LastNewConn)
		}
		if !c.OldData.IsZero() {
			row.LastSentOnOld = ptrTime(c.OldData)
		}
		switch {
		case c.Ignored:
			row.State = KernelIgnored
		case !c.LastNewConn.IsZero() && !c.LastNewConn.Before(c.LastData):
			row.State = KernelOpening
		case !c.LastData.IsZero():
			row.State = KernelSending
		}
		rows = append(rows, row)
	}
	order := map[string]int{KernelOpening: 0, KernelSending: 1, KernelIdle: 2, KernelIgnored: 3}
	slices.SortStableFunc(rows, func(a, b Client) int {
		return cmp.Or(cmp.Compare(order[a.State], order[b.State]), strings.Compare(a.Address, b.Address))
	})
	return rows
}

func ptrTime(t time.Time) *time.Time { return &t }

// writeKernelText is WriteText for a pod without a sidecar.
func writeKernelText(w io.Writer, r Report) error {
	var b strings.Builder
	fmt.Fprintf(&b, "mesh:    none: the pod's kernel (socket table, /proc/net/snmp); no drain call\n")
	fmt.Fprintf(&b, "signal:  %s (new connections from clients, and data on open ones)\n\n", r.Signal)
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "PORT\tSIGNAL\tACTIVITY*\tRATE/s\tIN FLIGHT")
	for _, p := range r.Inbound {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", portText(p.Port), p.Signal, num(p.RequestsTotal), rate(p.RequestsRate), num(p.RequestsActive))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(&b, "\n* connections accepted from clients + data segments received on open connections, %s\n", countedSince(r))
	writeKernelClients(&b, r)
	writeRisk(&b, r)
	for _, h := range r.Hints {
		fmt.Fprintf(&b, "\nhint: %s\n", h)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// writeKernelClients is the clients section without a sidecar.
func writeKernelClients(b *strings.Builder, r Report) {
	counts := clientCounts(r.Clients)
	fmt.Fprintf(b, "\nclients: %d opening new connections, %d sending on open ones, %d idle, %d ignored (%s)\n",
		counts[KernelOpening], counts[KernelSending], counts[KernelIdle], counts[KernelIgnored], countedSince(r))
	if len(r.Clients) == 0 {
		return
	}
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CLIENT\tSTATE\tOPEN\tNEW CONNS\tLAST NEW\tLAST SENT\tLAST SENT ON OLD\tSEEN FOR")
	ago := func(t *time.Time) string {
		if t == nil {
			return "-"
		}
		return r.SampledAt.Sub(*t).Round(100*time.Millisecond).String() + " ago"
	}
	for i, c := range r.Clients {
		if i == maxClientRows {
			fmt.Fprintf(tw, "... %d more (-o json lists them all)\t\t\t\t\t\t\t\n", len(r.Clients)-i)
			break
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\n", c.Address, c.State, c.Open, *c.NewConnections, ago(c.LastNewConnection),
			ago(c.LastData), ago(c.LastSentOnOld), r.SampledAt.Sub(c.Since).Round(time.Second))
	}
	_ = tw.Flush()
}

// countedSince says from when the kernel's counts run: status's first read, which a one-shot
// status takes --interval before the one it shows.
func countedSince(r Report) string {
	if r.CountedSince == nil {
		return "since the first sample"
	}
	return fmt.Sprintf("since the first sample, %s before this one", r.SampledAt.Sub(*r.CountedSince).Round(100*time.Millisecond))
}

// timeToken is a time for a greppable line, "-" when unknown.
func timeToken(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.UTC().Format(time.RFC3339Nano)
}
