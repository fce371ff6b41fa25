// Package regime is the drain regime of an Envoy sidecar (Istio's): who starts the pod's
// inbound drain, as its drain closes (http.<prefix>.downstream_cx_drain_close) show it. The
// rule never reads it: prestop's final event says it (Prestop, a drain.ReadObserver), the
// socket-table evidence gives up when the sidecar drains on its own (evidence.Table with
// Undrained), and status and check judge it from their samples.
package regime

import (
	"fmt"

	"go.uber.org/zap"

	"github.com/meshdrain/meshdrain/pkg/hook/drain"
	"github.com/meshdrain/meshdrain/pkg/mesh"
)

// Regime is who starts the pod's inbound drain (docs/decision-rule.md, "The two drain
// regimes"). It decides what a client's close of a pooled connection means: in B
// nothing has told the client to close, so the close is a departure; in A it may follow
// the Connection: close of the sidecar's own drain.
type Regime string

const (
	// A: the sidecar drains at the deletion (Istio's default), or meshdrain drains at
	// its start (--drain-at start).
	A Regime = "a"
	// B: the sidecar's own drain is deferred until meshdrain's drain call at its
	// decision (--drain-at end, with istio-proxy's preStop running meshdrain hold).
	B Regime = "b"
	// Unknown: the sidecar's stats cannot show which.
	Unknown Regime = "unknown"
)

// OverridesCheck is the command that shows the istio-proxy override as Istio's injector
// recorded it: where it is missing, the sidecar drains at the deletion.
const OverridesCheck = `kubectl get pod POD -o jsonpath='{.metadata.annotations.proxy\.istio\.io/overrides}'`

// SidecarDrains says whether the sidecar has drained since it had told then connections to
// close: it tells a connection to close (http.<prefix>.downstream_cx_drain_close: Connection:
// close on a response, or GOAWAY) only while it drains, and a drain, once begun, does not end.
// This is the one definition of "the sidecar drains", for prestop's --drain-at end guard, the
// drain regime and status's drain line. nil counts are 0: Envoy leaves a counter it has not
// used out of a usedonly poll.
func SidecarDrains(then, now *float64) bool { return valueOr0(now) > valueOr0(then) }

// DrainClosesExposed says whether the snapshot's stats can show the sidecar's drain: an
// inbound endpoint has HTTP connection manager stats (http.<prefix>.*), whose drain-close
// counter a usedonly poll leaves out until it is used.
func DrainClosesExposed(snap mesh.Snapshot) bool {
	for _, e := range snap.Endpoints {
		if e.HTTPDrainCloses != nil || e.HTTPRequestsTotal != nil {
			return true
		}
	}
	return false
}

// Seen is what the sidecar's drain closes showed over a span of reads: prestop's, from
// the watch's first read to its own drain call; status's and check's, from their first
// sample to their last.
type Seen struct {
	// DrainAtEnd: meshdrain defers its own drain call until it decides (--drain-at end), which
	// regime (b) needs; without it meshdrain drains at its start.
	DrainAtEnd bool
	// Exposed: the sidecar's stats count its drain closes (DrainClosesExposed).
	Exposed bool
	// AtFirst is the closes counted at the first read; Rise how many more were counted by
	// the last (the most seen: a restarted Envoy counts from 0 again).
	AtFirst, Rise float64
	// Answered: a request that arrived after the first read was seen answered, and a later
	// read still counted no more closes than the first. A draining sidecar tells every
	// connection it answers on to close (Istio's immediate drain strategy: docs/facts.md §2),
	// so that answer showed it was not draining.
	Answered bool
	// Span names the reads for the one-line why ("before meshdrain's drain call" when
	// empty).
	Span string
}

// Judge is the drain regime and, unless it is (b), why, in one line with its fix: the final
// event's drain_regime and drain_regime_why (Verdict).
func (s Seen) Judge() (Regime, string) {
	regime, why, fix := s.Verdict()
	if fix != "" {
		why += ": " + fix
	}
	return regime, why
}

// Verdict is the drain regime, and unless it is (b) why and what to check. (b) is the counter
// standing where it stood at the first read: at 0, or above 0 (a drain before the first read,
// or a listener update long ago, which drains a changed filter chain's connections) and then
// seen answering without telling a connection to close. It is exactly the case in which
// prestop's evidence takes a pooling client's close for a departure (evidence.Table with
// Undrained); a drain that has answered no request cannot show, so a pod that answered none
// reads (b) from a count of 0.
func (s Seen) Verdict() (regime Regime, why, fix string) {
	span := s.Span
	if span == "" {
		span = "before meshdrain's drain call"
	}
	switch {
	case !s.DrainAtEnd:
		return A, "regime a: --drain-at start: meshdrain drains when its hook starts", ""
	case !s.Exposed:
		return Unknown, "the sidecar does not count the connections it tells to close (http.<prefix>.downstream_cx_drain_close), " +
				"so whether its own drain was deferred cannot be seen",
			"add http.inbound_ to the pod annotation sidecar.istio.io/statsInclusionPrefixes"
	case s.Rise > 0:
		return A, fmt.Sprintf("regime a: the sidecar's own drain was not deferred (http.<prefix>.downstream_cx_drain_close rose by %.0f %s)", s.Rise, span),
			fmt.Sprintf("check the istio-proxy override (%s) and that istio-proxy's preStop runs meshdrain hold", OverridesCheck)
	case s.AtFirst > 0 && !s.Answered:
		return Unknown, fmt.Sprintf("the sidecar had told %.0f connections to close before the first read (its own drain at the deletion, "+
			"or a listener update long ago), and no answer %s showed it not draining: whether its own drain was deferred cannot be told", s.AtFirst, span), ""
	}
	return B, "", ""
}

// Watch gathers a Seen from successive reads of the sidecar's stats. Not safe for
// concurrent use.
type Watch struct {
	seen  Seen
	began bool
	// arrivalsAtFirst is the arrival counter at the first read; answeredAt says a read showed
	// a request that arrived since answered, which the next read's closes confirm.
	arrivalsAtFirst *float64
	answeredAt      bool
}

// Observe takes one read: its traffic, and whether its stats count drain closes.
func (w *Watch) Observe(t drain.Traffic, exposed bool) {
	w.seen.Exposed = w.seen.Exposed || exposed
	if !w.began {
		w.began = true
		w.seen.AtFirst, w.arrivalsAtFirst = valueOr0(t.DrainCloses), t.Arrivals
		return
	}
	if t.DrainCloses != nil {
		w.seen.Rise = max(w.seen.Rise, *t.DrainCloses-w.seen.AtFirst)
	}
	// The read that shows the answer may have read the closes before it was given: the next
	// read's closes, still standing, are counted after it.
	if w.answeredAt && t.DrainCloses != nil {
		w.seen.Answered = true
	}
	if t.Arrivals != nil && t.Active != nil && w.arrivalsAtFirst != nil && *t.Arrivals-*t.Active > *w.arrivalsAtFirst {
		w.answeredAt = true
	}
}

// Seen is what the reads so far showed; DrainAtEnd and Span are the caller's to set.
func (w *Watch) Seen() Seen { return w.seen }

// AnswerPending says the last read showed a request answered since the first, which a next
// read's closes would confirm as answered without a drain.
func (w *Watch) AnswerPending() bool { return w.answeredAt && !w.seen.Answered }

// Began says whether a read was observed.
func (w *Watch) Began() bool { return w.began }

// Prestop is the drain regime prestop's final event says (drain_regime, and drain_regime_why
// unless it is (b)): what the sidecar's drain closes showed from the watch's first read to
// meshdrain's drain call at its end, which every read the coordinator shows it comes before.
// The Envoy backend gives it to a hook that makes a drain call (backends.Backend.Reads): a
// Linkerd proxy gets none, and closes its connections itself on its own drain. Not safe for
// concurrent use.
type Prestop struct {
	// DrainAtEnd is prestop's --drain-at end (Seen.DrainAtEnd).
	DrainAtEnd bool
	watch      Watch
}

var _ drain.ReadObserver = (*Prestop)(nil)

// ObserveRead takes one of the watch's reads.
func (p *Prestop) ObserveRead(snap mesh.Snapshot, t drain.Traffic) {
	p.watch.Observe(t, DrainClosesExposed(snap))
}

// Judge is the drain regime and why (Seen.Judge); "" when no read was taken (the watch never
// started), which nothing can be judged by.
func (p *Prestop) Judge() (Regime, string) {
	if !p.watch.Began() {
		return "", ""
	}
	seen := p.watch.Seen()
	seen.DrainAtEnd = p.DrainAtEnd
	return seen.Judge()
}

// FinalFields are the final event's drain_regime and drain_regime_why.
func (p *Prestop) FinalFields() []zap.Field {
	regime, why := p.Judge()
	if regime == "" {
		return nil
	}
	fields := []zap.Field{zap.String("drain_regime", string(regime))}
	if why != "" {
		fields = append(fields, zap.String("drain_regime_why", why))
	}
	return fields
}

// valueOr0 is v, 0 when unknown: a counter Envoy has not used yet is absent from a usedonly
// poll.
func valueOr0(v *float64) float64 {
	if v == nil {
		return 0
	}
	return *v
}
