package drain

import (
	"math"
	"time"

	"github.com/meshdrain/meshdrain/pkg/hook/risk"
	"github.com/meshdrain/meshdrain/pkg/mesh"
)

// The decision rule: when may the app stop? Its inputs are the sidecar's inbound arrival
// counter and in-flight gauge, sampled every poll; its answer is "not yet", "quiet" (the
// clients have stopped sending and nothing is in flight) or "quiet-streams" (they have stopped
// sending, but requests that only the app can end are still open).
//
// Silence is the only evidence that clients have left, and silence also happens while they
// still send: between bursts, between a sparse client's requests, while the last clients of a
// busy service thin out. So the silence the rule asks for (the quiet window) is the largest of
//
//   - quiet: the configured --quiet (plus the latency allowance when only completions are
//     counted), the least silence that ever means anything;
//   - gaps:  GapFactor × the longest gap seen between two arrivals during the watch. When one
//     of several senders leaves, two neighbouring gaps of the arrival stream merge into one,
//     so the longest gap at most doubles: a gap more than twice any seen so far means that more
//     than one sender left at once, or that all of them did;
//   - rate:  the silence that Poisson arrivals at the observed rate would exceed with
//     probability Risk (1e-4). A rate measured from n arrivals over a time T is itself
//     uncertain, so the silence is the one that the Poisson process has probability Risk to
//     exceed given that evidence (a flat prior on the rate): (T/(T+s))^n = Risk, that is
//     s = T·(Risk^(−1/n) − 1), which tends to −ln(Risk)/rate ≈ 9.2 mean gaps as n grows and is
//     longer when few arrivals were seen (11.7 mean gaps for n = 20, 12.7 for n = 15). Three
//     measurements are used and the longest silence wins: the latest 20 arrivals and the
//     latest 15 (they follow the clients as they thin out, the shorter one sooner, which a
//     thinning rate needs: the older arrivals overstate the rate of the clients left), and
//     everything since Envoy started (downstream_rq_total over server.uptime), so that a
//     service whose usual traffic is sparse is not judged by one busy moment, and is judged
//     even when nothing arrived since the start;
//
// capped by the time left before the deadline, and never ending before MinWait: silence cannot
// tell a sparse client that has not learnt of the deletion yet from one that has, and MinWait
// (sized by endpoint propagation) is the time by which most clients have learnt. With no
// arrival at all since the start and no long-run rate, only quiet and MinWait apply: there is
// no traffic to judge.
//
// Once the window has passed, the in-flight gauge must be 0 for "quiet". Requests that stay
// open (streams, WebSockets, long polls, TCP connections) end only when the app closes them,
// so after StreamsWait more the rule answers "quiet-streams" with their number and lets the
// app's own shutdown (GOAWAY, close frames) end them; StreamsWait ≤ 0 keeps waiting for 0.
//
// The rule is a pure value: observations in, decisions out, no clock, so that every timing is
// tested exactly.

// Rule constants. They are not flags: each one is the statement of a property, documented in
// the README, rather than a knob to tune per pod.
const (
	// GapFactor bounds how much longer the next gap may be than the longest one seen: two
	// neighbouring gaps merge when one sender leaves.
	GapFactor = 2.0
	// Risk is the probability that Poisson arrivals at the observed rate stay silent for the
	// rate term's window while clients still send.
	Risk = 1e-4
	// RateArrivals is how many of the latest arrivals the recent rate is measured over: few
	// enough to follow clients as they leave, enough that the estimate's own uncertainty
	// costs little (11.7 mean gaps instead of 9.2).
	RateArrivals = 20
	// RecentArrivals is a second, quicker measurement, for traffic that thins out faster than
	// 20 arrivals show (12.7 mean gaps): with fewer, the uncertainty would stretch the window
	// of ordinary traffic (10 arrivals: 15.1 mean gaps, a whole quiet window at 16 requests a
	// second, the rate of the reference workload's last client).
	RecentArrivals = 15
	// LongRunMinUptime is the least server.uptime (seconds) for the long-run rate to count:
	// the gauge is refreshed only at each stats flush (5 s by default) and a young Envoy's
	// average says little.
	LongRunMinUptime = 60
)

// Defaults of prestop's --min-wait and --streams-wait.
const (
	// DefaultMinWait is a few seconds of endpoint propagation: most client sidecars learn of a
	// deleted endpoint within 1-3s (docs/facts.md §1), and 5s is also what Istio itself waits
	// before it looks at connections (pilot-agent's MINIMUM_DRAIN_DURATION).
	DefaultMinWait = 5 * time.Second
	// DefaultStreamsWait is how long requests may stay open after the quiet window: one more
	// default quiet window, longer than a typical P99, shorter than any stream.
	DefaultStreamsWait = time.Second
)

// ReasonQuietStreams ends a wait in which arrivals stopped but requests stayed open.
const ReasonQuietStreams Reason = "quiet-streams"

// WindowTerm names the term that set the quiet window.
type WindowTerm string

// Window terms, as the final log event names them.
const (
	TermQuiet WindowTerm = "quiet" // --quiet (and the latency allowance)
	TermGaps  WindowTerm = "gaps"  // GapFactor × the longest gap seen
	TermRate  WindowTerm = "rate"  // the Poisson silence at the observed rate
	// TermClientsLeft: every client that held a connection has closed it itself (Clients),
	// none is holding or sending: the silence of the others is judged by --quiet alone.
	TermClientsLeft WindowTerm = "clients-left"
	// TermLagBound: the lag bound has passed (RuleConfig.LagBound): every client has applied
	// the removal, so one --quiet of silence is enough.
	TermLagBound WindowTerm = "lag-bound"
	// TermClientSilence: every client seen to pool has left, none is holding, and the clients
	// that sent without showing a pool are each given their own silence (ClientQuiet) since
	// they last sent, which ends later than --quiet after the last arrival.
	TermClientSilence WindowTerm = "client-silence"
)

// RuleConfig holds the rule's settings. Durations are measured from the start of the drain,
// like every Observation.At.
type RuleConfig struct {
	// Start is the start of the drain on the clock of the per-client evidence, whose times
	// (ClientCounts) the rule measures from it.
	Start time.Time
	// Quiet is the least window (--quiet).
	Quiet time.Duration
	// LatencyAllowance is added to Quiet when the signal counts completions, which lag
	// arrivals by the request latency.
	LatencyAllowance time.Duration
	// MinWait is the earliest the rule may decide (--min-wait).
	MinWait time.Duration
	// Deadline is when the wait ends anyway; the window is capped by it.
	Deadline time.Duration
	// StreamsWait is how long after the window requests may stay open before the rule
	// answers quiet-streams; zero or less waits for them to end (strict).
	StreamsWait time.Duration
	// ClientPeriod, when set, is the clients' declared schedule: while a client still sends,
	// it sends at least every ClientPeriod. The gaps term guards against a schedule nobody
	// stated (twice the longest pause seen, the most one sender leaving can stretch it); with
	// one stated it is not used, and the quiet window, at least ClientPeriod + a poll
	// (checked at start), is what no sending client can stay silent for.
	ClientPeriod time.Duration
	// LagBound, when set, is how late the last client applies the endpoint removal, counted
	// from the start of the drain (plan's last-client EDS lag, with room). The long windows
	// exist only because a client might not have learnt yet: past the bound, one quiet window
	// of silence is enough, and a client still holding an idle connection is not a mesh
	// client that will ever let go on its own (an ingress controller's keep-alive pool).
	LagBound time.Duration
	// SettledQuiet is the silence asked for once no client may still be on its way (the lag
	// bound passed, or every client left): the ordinary quiet window, not a --quiet raised
	// for sparse clients (default DefaultQuiet).
	SettledQuiet time.Duration
	// ClientQuiet, when set, is the longest silence of one client that still sends, as the
	// operator stated it (ClientQuiet): a client that sent during the drain without showing a
	// pool, so that its close says nothing, has stopped sending once it has been silent this
	// long. Zero: nobody stated the clients' rhythm, and such a client keeps the window the
	// traffic's own terms set.
	ClientQuiet time.Duration
	// Lag, when set, is the fleet's lag distribution (--lag-dist): the lag bound becomes the
	// first moment the risk figure (the probability that some client the evidence cannot rule
	// out still routes to the pod) is at most Risk (--risk), and the app never stops before
	// it. It replaces LagBound. MinWait still holds as a floor (its default is 0 with Lag:
	// the figure guards instead).
	Lag  risk.Distribution
	Risk float64
}

// ClientQuiet is the longest silence of one client that still sends, from what the operator
// stated about the clients: a schedule (clientPeriod; quiet is at least the period plus a
// poll, checked at start) or one client's Poisson rate (perClient requests a second: the
// silence its arrivals exceed with probability Risk). At least quiet; zero when neither is
// known.
func ClientQuiet(quiet, clientPeriod time.Duration, perClient float64) time.Duration {
	if clientPeriod <= 0 && perClient <= 0 {
		return 0
	}
	return max(quiet, PoissonQuiet(perClient))
}

// ClientCounts is the per-client evidence of one poll, from the pod's socket table: how many
// clients keep open an idle connection they had when the drain began (Holding: they have not
// applied the removal), have sent since it began (Sending), closed such a connection
// themselves (Left: they have applied it), or give no evidence (NoEvidence).
type ClientCounts struct {
	Holding, Sending, Left, NoEvidence int
	// Stale: requests arrived since the table was last read, so the counts may not show
	// who sent them (a client counted as left may have come back).
	Stale bool
	// LastSent is the latest time a Sending client sent (sockets.Client.LastData); zero when
	// none.
	LastSent time.Time
	// LastLearning (without a sidecar) is the latest counted activity that may have come from
	// a client still to learn of the removal: everything counted but the data, on connections
	// opened before the lag bound, of the NeverLearn clients (kernel.Summary.LastLearning).
	// Past the bound, the settled window runs from it. Zero: unknown.
	LastLearning time.Time
	// Named is the evidence source's own account of its clients, for the final event only
	// (the socket table's holders, the kernel's clients past the lag bound, the app's own
	// counter); nil: nothing more.
	Named FinalFields
}

// everyPoolLeft says that every client seen holding a pool has let go of it, by counts that
// are not stale: nil counts say nothing.
func (c *ClientCounts) everyPoolLeft() bool {
	return c != nil && c.Left > 0 && c.Holding == 0 && !c.Stale
}

// Observation is one poll's reading.
type Observation struct {
	// At is the time since the start of the drain.
	At     time.Duration
	Signal mesh.Signal
	// Arrivals and Active are the reading's counter and gauge (nil when unknown).
	Arrivals, Active *float64
	// Uptime is Envoy's server.uptime in seconds (nil when the sidecar does not expose it).
	Uptime *float64
	// Clients is the per-client evidence (nil when the socket table is not read).
	Clients *ClientCounts
}

// Decision is the rule's answer to one observation, with what the coordinator reports.
type Decision struct {
	// Reason is ReasonQuiet or ReasonQuietStreams when the app may stop, "" to keep waiting.
	Reason Reason
	// Window is the quiet window in force and Term the term that set it. Capped says that the
	// window would end after the deadline: then only the deadline ends the wait.
	Window time.Duration
	Term   WindowTerm
	Capped bool
	// Rate is the arrival rate (per second) of the measurement behind the rate term; 0 when
	// none.
	Rate float64
	// LastArrival is when the counter last moved, since the start of the drain.
	LastArrival time.Duration
	// Ends is when the wait may end if nothing arrives meanwhile, since the start of the
	// drain: the window's end or --min-wait; zero while clients hold the app or the window is
	// capped.
	Ends time.Duration
	// LongestGap is the longest silence between arrivals during the watch, the one in
	// progress included.
	LongestGap time.Duration
	// OpenStreams is the in-flight gauge when the reason is quiet-streams (nil if unknown).
	OpenStreams *float64
	// HeldBy is how many clients hold the app: they keep open an idle connection from before
	// the drain, so they have not applied the removal yet (before the lag bound).
	HeldBy int
	// Change is what this observation changed, for the coordinator's accounting.
	Change Change
	// Risk is the risk figure at this observation (nil without RuleConfig.Lag), and RiskFrom
	// the clients it came from.
	Risk     *float64
	RiskFrom RiskFrom
}

// Change describes the movement of the counter since the previous observation.
type Change struct {
	// Moved is true when the counter or the signal changed: the silence starts again.
	Moved bool
	// Arrivals is how many new arrivals the counter shows (after a reset, its new value).
	Arrivals float64
	// SignalChanged is set, with From and To, when the signal is not the previous one's.
	SignalChanged bool
	From, To      mesh.Signal
	// Reset is set, with ResetFrom and ResetTo, when the counter went down: Envoy restarted
	// or its stats were reset.
	Reset              bool
	ResetFrom, ResetTo float64
}

// arrivalSample is the counter's value when it was seen to move.
type arrivalSample struct {
	at    time.Duration
	count float64
}

// Rule is the decision rule's state for one drain.
type Rule struct {
	cfg  RuleConfig
	prev Observation

	lastMove time.Duration
	// beforeMove is the observation before lastMove's (an arrival seen at lastMove happened
	// after it), and lastStill the latest observation without movement since lastMove (zero
	// when none): a gap closed by the next movement lasted less than next − beforeMove and
	// more than lastStill − lastMove.
	beforeMove, lastStill time.Duration
	longestGap            time.Duration
	// samples are the counter at recent movements, oldest first, starting with the baseline
	// of the watch; a signal change or a reset starts them again.
	samples []arrivalSample
	// rate and rateWindow are the rate term's measured rate and silence, as of the last
	// movement (or the baseline); 0 when nothing was measured.
	rate       float64
	rateWindow time.Duration
	// arrived: the counter has moved with arrivals during the watch (a sender was seen).
	arrived bool
	// atRisk are the clients the risk figure counts at the latest observation (with
	// RuleConfig.Lag).
	atRisk []risk.Client
}

// NewRule starts the rule at the first observation of the watch.
func NewRule(cfg RuleConfig, first Observation) *Rule {
	r := &Rule{cfg: cfg, prev: first, lastMove: first.At, beforeMove: first.At}
	r.rebase(first)
	return r
}

// rebase starts the rate samples at o's counter; only the long-run rate is known then.
func (r *Rule) rebase(o Observation) {
	r.samples = r.samples[:0]
	if o.Arrivals != nil {
		r.samples = append(r.samples, arrivalSample{o.At, *o.Arrivals})
	}
	r.rate, r.rateWindow = 0, 0
	if n, uptime, ok := longRun(o); ok {
		r.rate, r.rateWindow = n/uptime.Seconds(), poissonSilence(n, uptime)
	}
}

// Observe takes one poll's reading and says whether the app may stop.
func (r *Rule) Observe(o Observation) Decision {
	change := r.change(o)
	if change.Moved {
		r.moved(o, change)
	} else {
		r.lastStill = o.At
	}
	r.prev = o
	var riskFrom RiskFrom
	if !r.cfg.Lag.IsZero() {
		riskFrom, r.atRisk = r.riskClients(o)
	}

	window, term := r.window()
	capped := r.cfg.Deadline > 0 && r.lastMove+window > r.cfg.Deadline
	d := Decision{
		Window:      window,
		Term:        term,
		Capped:      capped,
		Rate:        r.rate,
		LastArrival: r.lastMove,
		LongestGap:  max(r.longestGap, o.At-r.lastMove),
		Change:      change,
	}
	if !r.cfg.Lag.IsZero() {
		d.Risk, d.RiskFrom = ptr(r.figure(o.At, r.atRisk)), riskFrom
	}
	end := max(r.settledFrom(o)+window, r.cfg.MinWait)
	if o.Clients != nil && holdsBeyondRequests(o) && !r.pastLagBound(o.At) {
		// A client that keeps its idle drain-start connection open still routes here:
		// whatever the silence says, it may send. The deadline bounds the hold.
		d.HeldBy = o.Clients.Holding
		return d
	}
	if capped {
		return d
	}
	if !r.cfg.Lag.IsZero() && !r.pastLagBound(o.At) {
		// The figure guards what --min-wait guards without it: a client that may not have
		// learnt yet. The wait may end once it is at most Risk, if nothing changes meanwhile.
		// From then on the window is the settled one.
		if within, ok := r.riskWithin(o.At, r.atRisk); ok {
			d.Ends = max(r.lastMove+r.settledWindow(), r.cfg.MinWait, within)
		}
		return d
	}
	d.Ends = end
	if o.At < end {
		return d
	}
	switch {
	case o.Active != nil && *o.Active == 0:
		d.Reason = ReasonQuiet
	case o.Active == nil && o.Signal == mesh.SignalCompletedRequests:
		// Completions have no in-flight gauge: the latency allowance covers it.
		d.Reason = ReasonQuiet
	case r.cfg.StreamsWait > 0 && o.At-end >= r.cfg.StreamsWait:
		d.Reason = ReasonQuietStreams
		if o.Active != nil {
			d.OpenStreams = ptr(*o.Active)
		}
	}
	return d
}

// change compares o with the previous observation. Any change of the counter is movement,
// including a decrease (Envoy restarted or its stats were reset), and so is a change of
// signal or a counter appearing or vanishing.
func (r *Rule) change(o Observation) Change {
	prev := r.prev
	var c Change
	switch {
	case o.Signal != prev.Signal:
		c.Moved, c.SignalChanged, c.From, c.To = true, true, prev.Signal, o.Signal
	case o.Arrivals == nil && prev.Arrivals == nil:
	case o.Arrivals == nil || prev.Arrivals == nil:
		c.Moved = true
	case *o.Arrivals > *prev.Arrivals:
		c.Moved, c.Arrivals = true, *o.Arrivals-*prev.Arrivals
	case *o.Arrivals < *prev.Arrivals:
		c.Moved, c.Reset, c.ResetFrom, c.ResetTo = true, true, *prev.Arrivals, *o.Arrivals
		c.Arrivals = *o.Arrivals
	}
	return c
}

// moved restarts the silence at o, records the gap it closed and measures the rate.
func (r *Rule) moved(o Observation, c Change) {
	// The gap is recorded by its upper bound, so that twice it covers a gap that doubles.
	// Only a silence seen to last half the quiet window counts: shorter ones are the sampling
	// noise of busy traffic (and slow polls of busy traffic are no silence at all), and twice
	// them fits in the quiet window anyway. The first gap starts at the watch's start: a
	// lower bound of a gap that began before.
	// A reset or a change of signal ends the silence but closes no gap between two arrivals:
	// when the new counter's first arrival came is unknown.
	closesGap := !c.Reset && !c.SignalChanged && o.Arrivals != nil && r.prev.Arrivals != nil
	if closesGap && r.lastStill > r.lastMove && r.lastStill-r.lastMove >= r.cfg.Quiet/2 {
		r.longestGap = max(r.longestGap, o.At-r.beforeMove)
	}
	r.lastMove, r.beforeMove = o.At, r.prev.At
	r.arrived = r.arrived || c.Arrivals > 0
	if c.SignalChanged || c.Reset || o.Arrivals == nil || r.prev.Arrivals == nil {
		// Another counter: its history says nothing about this one's rate.
		r.rebase(o)
		return
	}
	const keep = 4 * RateArrivals
	if len(r.samples) >= keep {
		r.samples = append(r.samples[:0], r.samples[len(r.samples)-keep/2:]...)
	}
	r.samples = append(r.samples, arrivalSample{o.At, *o.Arrivals})
	r.rate, r.rateWindow = 0, 0
	// Two measurements of the recent rate: the latest RateArrivals arrivals, and the latest
	// RecentArrivals, which sees clients thinning out sooner. The longer silence wins.
	for _, want := range []float64{RecentArrivals, RateArrivals} {
		if n, span := r.recent(want); n > 0 {
			if w := poissonSilence(n, span); w > r.rateWindow {
				r.rate, r.rateWindow = n/span.Seconds(), w
			}
		}
	}
	if n, uptime, ok := longRun(o); ok {
		if w := poissonSilence(n, uptime); w > r.rateWindow {
			r.rate, r.rateWindow = n/uptime.Seconds(), w
		}
	}
}

// recent is the latest want arrivals (all since the baseline when there are fewer) and the
// time they took: arrivals after the oldest sample used, and the time since it.
func (r *Rule) recent(want float64) (float64, time.Duration) {
	last := r.samples[len(r.samples)-1]
	from := r.samples[0]
	for i := len(r.samples) - 2; i >= 0; i-- {
		from = r.samples[i]
		if last.count-from.count >= want {
			break
		}
	}
	if last.at <= from.at || last.count <= from.count {
		return 0, 0
	}
	return last.count - from.count, last.at - from.at
}

// longRun is the arrival counter and Envoy's uptime, when Envoy has run long enough for that
// average to mean something.
func longRun(o Observation) (float64, time.Duration, bool) {
	if o.Uptime == nil || o.Arrivals == nil || *o.Uptime < LongRunMinUptime || *o.Arrivals <= 0 {
		return 0, 0, false
	}
	return *o.Arrivals, time.Duration(*o.Uptime * float64(time.Second)), true
}

// poissonSilence is the silence s that Poisson arrivals, of a rate known only through n
// arrivals in span, exceed with probability Risk: (span/(span+s))^n = Risk.
func poissonSilence(n float64, span time.Duration) time.Duration {
	return time.Duration(float64(span) * math.Expm1(-math.Log(Risk)/n))
}

// PoissonQuiet is the silence that Poisson arrivals at a known rate (per second) exceed with
// probability Risk: −ln(Risk)/rate, 9.2 mean gaps. It is the rate term's limit for a rate
// known in advance rather than measured, which is how `meshdrain plan --rps-per-client` sizes
// --quiet for a service whose clients are each sparse.
func PoissonQuiet(perSecond float64) time.Duration {
	if perSecond <= 0 {
		return 0
	}
	s := -math.Log(Risk) / perSecond
	if s >= maxQuietSeconds {
		// A rate so low that its silence overflows a Duration: longer than any wait.
		return maxQuietSeconds * time.Second
	}
	return time.Duration(s * float64(time.Second))
}

// maxQuietSeconds caps PoissonQuiet: a day, longer than any grace period.
const maxQuietSeconds = 24 * 60 * 60

// holdsBeyondRequests says whether the holding clients keep the app. Only where some client
// has been seen to let go by closing its connections: that is what shows this service's
// clients drop their pools when they drop the endpoint. The clients of a persistent-session
// service, or without a sidecar, keep their idle connections whatever they know, and holding
// for them would last to the lag bound for nothing: there, as where no client has learnt yet,
// silence decides as without evidence. And only when the holding clients are more than the
// requests in flight: a connection that carries a request begun before the drain (a long
// request, a stream) receives nothing either and, where tcp_info is missing, looks held; only
// when more clients hold than requests are open must one of them hold an idle connection;
// otherwise today's rule decides, streams included (quiet-streams).
func holdsBeyondRequests(o Observation) bool {
	if o.Clients.Holding == 0 || o.Clients.Left == 0 {
		return false
	}
	return o.Active == nil || float64(o.Clients.Holding) > *o.Active
}

// settledFrom is when the silence the window asks for began: the counter's last move, or,
// past the lag bound without a sidecar, the latest activity that may have come from a client
// still learning (Clients.LastLearning) when that is earlier: what clients that never learn
// sent before the bound, on the connections they go on sending on past it, was not that.
func (r *Rule) settledFrom(o Observation) time.Duration {
	if c := o.Clients; c != nil && !c.Stale && !c.LastLearning.IsZero() && r.pastLagBound(o.At) {
		return min(r.lastMove, r.since(c.LastLearning))
	}
	return r.lastMove
}

// since is t on the rule's clock: the time since the start of the drain.
func (r *Rule) since(t time.Time) time.Duration { return t.Sub(r.cfg.Start) }

// pastLagBound says whether at is past the lag bound, when there is one. With a lag
// distribution, the bound is where the risk figure of the clients at the latest observation
// is at most Risk.
func (r *Rule) pastLagBound(at time.Duration) bool {
	if !r.cfg.Lag.IsZero() {
		return r.figure(at, r.atRisk) <= r.cfg.Risk
	}
	return r.cfg.LagBound > 0 && at >= r.cfg.LagBound
}

// window is the quiet window in force: the largest term, or --quiet alone once evidence
// says no client may still be sending unseen (every client with a connection left, or the
// lag bound passed).
func (r *Rule) window() (time.Duration, WindowTerm) {
	window, term := r.cfg.Quiet, TermQuiet
	allowance := r.allowance()
	window += allowance
	settled := r.settledWindow()
	if r.pastLagBound(r.prev.At) {
		return settled, TermLagBound
	}
	c := r.prev.Clients
	everyPoolLeft := c.everyPoolLeft()
	if everyPoolLeft && c.Sending == 0 {
		return settled, TermClientsLeft
	}
	if gaps := time.Duration(GapFactor * float64(r.longestGap)); gaps > window && r.cfg.ClientPeriod == 0 {
		window, term = gaps, TermGaps
	}
	if r.rateWindow > window {
		window, term = r.rateWindow, TermRate
	}
	if everyPoolLeft && r.cfg.ClientQuiet > 0 && !c.LastSent.IsZero() {
		// The clients still counted as sending showed no pool, so their closes say nothing;
		// each has stopped once silent for ClientQuiet since it last sent (when the evidence
		// says when). Only ever shorter than the window of the traffic as a whole.
		own, ownTerm := settled, TermClientsLeft
		if until := r.since(c.LastSent) + r.cfg.ClientQuiet + allowance - r.lastMove; until > own {
			own, ownTerm = until, TermClientSilence
		}
		if own < window {
			return own, ownTerm
		}
	}
	return window, term
}

// allowance is the latency allowance, when only completions are counted.
func (r *Rule) allowance() time.Duration {
	if r.prev.Signal == mesh.SignalCompletedRequests {
		return r.cfg.LatencyAllowance
	}
	return 0
}

// settledWindow is the window once no client may still be on its way: the ordinary quiet
// window is enough then. A --quiet raised for sparse clients (plan --rps-per-client) guards
// against a client that has not learnt yet, and there is none.
func (r *Rule) settledWindow() time.Duration {
	settledQuiet := r.cfg.SettledQuiet
	if settledQuiet <= 0 {
		settledQuiet = DefaultQuiet
	}
	return min(r.cfg.Quiet, settledQuiet) + r.allowance()
}

func ptr(v float64) *float64 { return &v }
