package drain

import (
	"cmp"
	"math"
	"slices"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// The kinds of evidence that a client learnt of the endpoint removal, as the final event's
// clients_learnt names them (pkg/operator/lag reads them back).
const (
	// EvidenceLetGo: the client closed, itself, an idle pooled connection it had when the
	// drain began (the socket table's Left): its sidecar applied the removal then.
	EvidenceLetGo = "let-go"
	// EvidenceLastNewConnection: the last connection the client opened to the pod (no mesh,
	// a client routed per connection): its node's rules stopped sending new ones after it.
	EvidenceLastNewConnection = "last-new-connection"
	// EvidenceLastRequest: the last request the client sent on a connection it kept (no mesh,
	// a pool routing per request): the pool stopped choosing the pod after it.
	EvidenceLastRequest = "last-request"
)

// MaxLearntListed bounds clients_learnt: a learner of the fleet's lag needs the tail, so the
// latest learners are listed and the others only counted (all of them earlier than the
// earliest listed); a pod with thousands of clients keeps a final line of a few KiB.
const MaxLearntListed = 32

// Learnt is one client's evidence that it learnt of the removal.
type Learnt struct {
	// Client is its address, as the final event's other client lists name it.
	Client string
	// At is the evidence's time: the read that first saw it let go, its last new connection,
	// or its last request.
	At       time.Time
	Evidence string
}

// Learners is a ClientEvidence that can say, once the wait is over, when each client showed
// it had learnt. A source that cannot (a Linkerd proxy's metrics name no client address)
// does not implement it, and the final event lists no client rather than a guess.
type Learners interface {
	Learnt() []Learnt
}

// CutBy is what cut the wait before the clients showed they had learnt: "deadline",
// "lag-bound" (the stop came from --eds-lag-bound or the risk figure, not from the clients),
// or "". A stop past the bound after every pooling client had let go, none sending, was the
// clients' own: the window is the same either way, and the rule names the bound first.
func (r Result) CutBy() string {
	switch {
	case r.Reason == ReasonDeadline:
		return string(ReasonDeadline)
	case r.WindowTerm == TermLagBound && !(r.Clients.everyPoolLeft() && r.Clients.Sending == 0):
		return string(TermLagBound)
	}
	return ""
}

// learntFields are the final event's fields for a learner of the fleet's lag (plan
// --lag-from): the mesh, what cut the wait, and each client's learning evidence, from the
// hook's start.
func (c *coordinator) learntFields() []zap.Field {
	var fields []zap.Field
	if c.cfg.Mesh != "" {
		fields = append(fields, zap.String("mesh", c.cfg.Mesh))
	}
	fields = append(fields, zap.String("cut_by", c.result.CutBy()))
	if l, ok := c.clients.(Learners); ok {
		fields = append(fields, LearntFields(c.start, l.Learnt())...)
	}
	return fields
}

// LearntFields are clients_learnt (the MaxLearntListed latest, earliest first),
// clients_learnt_total and clients_learnt_kept.
func LearntFields(start time.Time, learnt []Learnt) []zap.Field {
	listed := slices.Clone(learnt)
	slices.SortFunc(listed, func(a, b Learnt) int {
		return cmp.Or(a.At.Compare(b.At), cmp.Compare(a.Client, b.Client))
	})
	listed = listed[max(len(listed)-MaxLearntListed, 0):]
	return []zap.Field{
		zap.Array("clients_learnt", learntArray{start: start, listed: listed}),
		zap.Int("clients_learnt_total", len(learnt)),
		zap.Int("clients_learnt_kept", len(listed)),
	}
}

type learntArray struct {
	start  time.Time
	listed []Learnt
}

func (a learntArray) MarshalLogArray(enc zapcore.ArrayEncoder) error {
	for _, l := range a.listed {
		// Milliseconds are the precision of every other time in the event; evidence read
		// just before the start (a read's own rounding) counts as at the start.
		s := math.Round(max(l.At.Sub(a.start), 0).Seconds()*1000) / 1000
		_ = enc.AppendObject(zapcore.ObjectMarshalerFunc(func(e zapcore.ObjectEncoder) error {
			e.AddString("client", l.Client)
			e.AddFloat64("s", s)
			e.AddString("evidence", l.Evidence)
			return nil
		}))
	}
	return nil
}
