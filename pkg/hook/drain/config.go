package drain

import (
	"time"

	"go.uber.org/zap"

	"github.com/meshdrain/meshdrain/pkg/clock"
	"github.com/meshdrain/meshdrain/pkg/hook/risk"
	"github.com/meshdrain/meshdrain/pkg/mesh"
)

// Config holds every knob of one drain. Durations are relative to the moment Run starts.
type Config struct {
	Selector  mesh.Selector
	DrainMode mesh.DrainMode
	// Deadline is when the wait ends whatever the counters say.
	Deadline time.Duration
	// Quiet is how long the arrival counter must stand still.
	Quiet time.Duration
	// LatencyAllowance extends Quiet when the only signal counts completions, which lag
	// arrivals by the request latency.
	LatencyAllowance time.Duration
	// MinWait is the least time to wait, whatever the counters say.
	MinWait time.Duration
	// StreamsWait is how long requests may stay open once the quiet window has passed before
	// the wait ends with quiet-streams; zero or less waits for them to end (rule.go).
	StreamsWait time.Duration
	// ClientPeriod is the clients' declared schedule (--client-period): while a client sends,
	// it sends at least this often, so the rule's gaps term is not needed (rule.go).
	ClientPeriod time.Duration
	// RPSPerClient is one client's request rate as the operator stated it (--rps-per-client):
	// with it, or with ClientPeriod, a client that sent without showing a pool is judged by
	// its own silence (RuleConfig.ClientQuiet).
	RPSPerClient float64
	// DrainAtEnd defers the drain call until the wait ends, just before the app is told to
	// stop (--drain-at end): where the sidecar's own drain at the deletion is turned off,
	// idle pooled connections stay open until each client lets go, which is the evidence
	// Clients reads; the call then tells whatever is left (non-mesh keep-alives, HTTP/2) to
	// go before the app stops accepting.
	DrainAtEnd bool
	// LagBound is how late the last client applies the endpoint removal (--eds-lag-bound;
	// RuleConfig.LagBound): past it, one quiet window of silence is enough.
	LagBound time.Duration
	// SettledQuiet: RuleConfig.SettledQuiet (--settled-quiet).
	SettledQuiet time.Duration
	// Mesh is --mesh as given, for the final event: a learner of the fleet's lag groups
	// drains by it ("" leaves it out).
	Mesh string
	// Lag is the fleet's lag distribution (--lag-dist) and Risk the figure the drain accepts
	// (--risk): RuleConfig.Lag and RuleConfig.Risk. A zero Lag: the rule without a figure.
	Lag  risk.Distribution
	Risk float64
	// Clients, when set, gives per-client evidence at every poll (ClientEvidence).
	Clients ClientEvidence
	// Reads, when set, sees every read of the watch and adds to the final event
	// (ReadObserver).
	Reads ReadObserver
	// Poll is the interval between two stats requests.
	Poll time.Duration
	// ConnectTimeout bounds how long an unreachable admin port is retried before concluding
	// there is no sidecar; it also bounds each admin call.
	ConnectTimeout time.Duration
	// FallbackWait is how long to wait when there is no usable signal (capped by Deadline).
	FallbackWait time.Duration
	// DryRun watches and reports without draining or acting.
	DryRun bool
	// Actions run, in order, once the wait ends (except when interrupted or in a dry run).
	Actions []Action
	// ActionTimeout bounds the actions.
	ActionTimeout time.Duration
	// ErrorLogInterval rate-limits the logging of transient admin errors.
	ErrorLogInterval time.Duration
	Clock            clock.Clock
	Logger           *zap.Logger

	// Start is when the hook started (default: when Run is called): the deadline and the
	// grace period count from it, so checks made before Run are not free.
	Start time.Time
	// GracePeriod, when known, bounds the actions: their timeout is cut so they end
	// ActionMargin before it.
	GracePeriod  time.Duration
	ActionMargin time.Duration
	// ProgressInterval is how often a long watch logs where it stands (default 5s).
	ProgressInterval time.Duration
	// Settings are reported in the "drain started" event with where each came from.
	Settings []Setting
	// Degraded is a start problem that did not stop the drain (an unusable --log-file): it
	// is in the final event, and the exit code is ExitConfigError where it would be 0 or 1,
	// so that the kubelet records a FailedPreStopHook event carrying it.
	Degraded error
}

// DefaultActionMargin is kept between the actions' end and the grace period's: the kubelet
// started counting the grace period a little before meshdrain started.
const DefaultActionMargin = 500 * time.Millisecond
