package evidence

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/meshdrain/meshdrain/pkg/hook/drain"
	"github.com/meshdrain/meshdrain/pkg/mesh"
	"github.com/meshdrain/meshdrain/pkg/mesh/kernel"
)

// Kernel is the drain's per-client evidence of a pod without a sidecar (--mesh none): the
// kernel backend itself, which reads the socket table at each poll for its arrival counter,
// says per client who counted and who, past the lag bound, sent on old connections or opened
// new ones. The rule holds for no client here (Holding and Left stay 0): an idle keep-alive
// connection says nothing of a client's routing without a mesh (an ingress pool keeps its
// idle connections after it has learnt; a per-connection client never learns), so silence,
// the bound and --min-wait decide.
type Kernel struct {
	Kernel *kernel.Kernel
}

var _ drain.ClientEvidence = Kernel{}

// Begin stops watching the kernel's destruction records when the drain's context ends.
func (k Kernel) Begin(ctx context.Context, _ time.Time, _ mesh.Snapshot) error {
	context.AfterFunc(ctx, k.Kernel.Close)
	return nil
}

// Counts sums the clients the kernel saw at this poll's read.
func (k Kernel) Counts(context.Context, drain.Traffic) (drain.ClientCounts, error) {
	return KernelCounts(k.Kernel.Clients(), k.Kernel.Summary()), nil
}

var _ drain.Learners = Kernel{}

// Learnt is, per client, its last new connection or its last request (KernelLearnt).
func (k Kernel) Learnt() []drain.Learnt { return KernelLearnt(k.Kernel.Clients()) }

// KernelLearnt is, per client the kernel saw, the latest activity that says when its routing
// learnt of the removal. A client seen to never learn (it sent past the lag bound on a
// connection opened before it: routed per connection) learnt after its last new
// connection, if it opened any; its old connections say nothing. Any other client learnt
// after its latest activity: its last request on a connection it kept (a pool routing per
// request) or its last new connection (routed per connection, or one connection per
// request), whichever came later, named by that kind. Without a lag bound a per-connection
// client that keeps sending on an old connection cannot be told from a pool, and its last
// request is taken: an over-estimate. Clients addressing the pod directly never learn and
// are left out, as are ignored sources and clients with no activity since the start.
func KernelLearnt(clients []kernel.Client) []drain.Learnt {
	var out []drain.Learnt
	for _, cl := range clients {
		if cl.Ignored || cl.AddressesPod {
			continue
		}
		l := drain.Learnt{Client: cl.Addr.String()}
		switch {
		case cl.NeverLearns():
			l.At, l.Evidence = cl.LastNewConn, drain.EvidenceLastNewConnection
		case cl.LastData.After(cl.LastNewConn):
			l.At, l.Evidence = cl.LastData, drain.EvidenceLastRequest
		default:
			l.At, l.Evidence = cl.LastNewConn, drain.EvidenceLastNewConnection
		}
		if !l.At.IsZero() {
			out = append(out, l)
		}
	}
	return out
}

// KernelCounts sums a kernel's clients for the rule, and names for the final event the ones
// the kernel showed past the lag bound (kernelNamed).
func KernelCounts(clients []kernel.Client, s kernel.Summary) drain.ClientCounts {
	c := drain.ClientCounts{LastLearning: s.LastLearning}
	named := &kernelNamed{lastActivity: s.LastActivity}
	if a := s.App; a != nil {
		named.app = &appRequests{requests: a.Requests, added: a.Added, reads: a.Reads, failed: a.Failed, lastError: a.LastError}
	}
	for _, cl := range clients {
		switch {
		case cl.Ignored:
			continue
		case cl.Counted:
			c.Sending++
		default:
			c.NoEvidence++
		}
		if cl.NeverLearns() && len(named.neverLearn) < maxHolders {
			named.neverLearn = append(named.neverLearn, cl.Addr.String())
		}
		if cl.NewPastBound > 0 && len(named.lateOpeners) < maxHolders {
			named.lateOpeners = append(named.lateOpeners, cl.Addr.String())
		}
		if cl.AddressesPod && len(named.addressingPod) < maxHolders {
			named.addressingPod = append(named.addressingPod, cl.Addr.String())
		}
	}
	c.Named = named
	return c
}

// kernelNamed is what the kernel names of a poll's clients in the final event; the rule never
// holds for a client without a sidecar, and reads none of it.
type kernelNamed struct {
	// lastActivity is the kind of the latest activity that counted (mesh/kernel's Activity*).
	lastActivity string
	// neverLearn sent past the lag bound on connections opened before it (routed per
	// connection, they will not move: the app's graceful shutdown serves them); lateOpeners
	// opened new connections past it (a node whose proxy has not synced, or a caller
	// addressing the pod directly); addressingPod are the lateOpeners taken for callers that
	// address the pod directly: past the bound they kept the period they opened at before it,
	// and their activity there no longer counts unless --wait-past-bound-openers.
	neverLearn, lateOpeners, addressingPod []string
	// app is what the app's own request counter gave (--app-metrics); nil without one.
	app *appRequests
}

// appRequests is the account of the app's own request counter.
type appRequests struct {
	// requests is what it counted since the drain began, added what of it the kernel had not
	// shown (counted as activity).
	requests, added float64
	// reads and failed count the reads of the app's metrics; lastError is the latest failure.
	reads, failed int
	lastError     string
}

// FinalFields are the final event's last_activity, clients_never_learn,
// clients_opening_past_bound, clients_addressing_pod and app_* fields.
func (n *kernelNamed) FinalFields() []zap.Field {
	var fields []zap.Field
	if n.lastActivity != "" {
		fields = append(fields, zap.String("last_activity", n.lastActivity))
	}
	if len(n.neverLearn) > 0 {
		fields = append(fields, zap.Strings("clients_never_learn", n.neverLearn))
	}
	if len(n.lateOpeners) > 0 {
		fields = append(fields, zap.Strings("clients_opening_past_bound", n.lateOpeners))
	}
	if len(n.addressingPod) > 0 {
		fields = append(fields, zap.Strings("clients_addressing_pod", n.addressingPod))
	}
	if a := n.app; a != nil {
		fields = append(fields, zap.Float64("app_requests", a.requests), zap.Float64("app_requests_added", a.added),
			zap.Int("app_metrics_reads", a.reads))
		if a.failed > 0 {
			fields = append(fields, zap.Int("app_metrics_failed", a.failed), zap.String("app_metrics_error", a.lastError))
		}
	}
	return fields
}
