package evidence

import (
	"context"
	"time"

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

// KernelCounts sums a kernel's clients for the rule and the final event.
func KernelCounts(clients []kernel.Client, s kernel.Summary) drain.ClientCounts {
	c := drain.ClientCounts{LastActivity: s.LastActivity, LastLearning: s.LastLearning}
	if a := s.App; a != nil {
		c.App = &drain.AppRequests{Requests: a.Requests, Added: a.Added, Reads: a.Reads, Failed: a.Failed, LastError: a.LastError}
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
		if cl.NeverLearns() && len(c.NeverLearn) < maxHolders {
			c.NeverLearn = append(c.NeverLearn, cl.Addr.String())
		}
		if cl.NewPastBound > 0 && len(c.LateOpeners) < maxHolders {
			c.LateOpeners = append(c.LateOpeners, cl.Addr.String())
		}
		if cl.AddressesPod && len(c.AddressingPod) < maxHolders {
			c.AddressingPod = append(c.AddressingPod, cl.Addr.String())
		}
	}
	return c
}
