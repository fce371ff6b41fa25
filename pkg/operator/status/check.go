package status

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/meshdrain/meshdrain/pkg/clock"
	"github.com/meshdrain/meshdrain/pkg/hook/drain"
	"github.com/meshdrain/meshdrain/pkg/hook/regime"
	"github.com/meshdrain/meshdrain/pkg/mesh"
	"github.com/meshdrain/meshdrain/pkg/mesh/envoy"
	"github.com/meshdrain/meshdrain/pkg/operator/output"
	"github.com/meshdrain/meshdrain/pkg/operator/plan"
)

// MinSignal is the weakest inbound signal a check accepts. The default, requests, is what
// lets prestop end on the deterministic rule; the weaker ones are for pods that knowingly
// accept a lagging or connection-level wait.
type MinSignal string

// Accepted --min-signal values.
const (
	MinRequests    MinSignal = "requests"    // http-requests or cluster-requests
	MinCompletions MinSignal = "completions" // ... or completed-requests (istio_requests_total)
	MinConnections MinSignal = "connections" // ... or virtualInbound connections
)

// ParseMinSignal validates a --min-signal value.
func ParseMinSignal(s string) (MinSignal, error) {
	switch m := MinSignal(s); m {
	case MinRequests, MinCompletions, MinConnections:
		return m, nil
	}
	return "", fmt.Errorf("min signal %q: want requests, completions or connections", s)
}

// accepts reports whether sig is at least m.
func (m MinSignal) accepts(sig mesh.Signal) bool {
	if sig == mesh.SignalNone {
		return false
	}
	limit := mesh.SignalClusterRequests
	switch m {
	case MinCompletions:
		limit = mesh.SignalCompletedRequests
	case MinConnections:
		limit = mesh.SignalConnections
	}
	return sig.Rank() <= limit.Rank()
}

// CheckOptions configure one check.
type CheckOptions struct {
	AdminURL  string
	Selector  mesh.Selector
	MinSignal MinSignal // default MinRequests
	// GracePeriod is the pod's terminationGracePeriodSeconds (0: not given, the timing
	// checks are skipped). AppDrain is prestop's --app-drain; together they give prestop's
	// deadline, grace - app-drain - 1s.
	GracePeriod, AppDrain time.Duration
	// TerminationDrainDuration is pilot-agent's setting from the pod's proxy config (0: not
	// given). No admin endpoint shows it, so it can only be verified when the operator says it.
	TerminationDrainDuration time.Duration
	// DrainAtEnd: the pod's prestop runs --drain-at end, in regime (b), with istio-proxy's
	// preStop running meshdrain hold: check then fails a sidecar that drains before
	// meshdrain's call, and terminationDrainDuration only bounds a fallback (hold holds a
	// classic proxy's SIGTERM until the app has let go), so regime (a)'s rule that it outlive
	// the app's latest exit does not apply.
	DrainAtEnd bool
	// ProxyWaitBeforeExit is a classic Linkerd proxy's preStop sleep,
	// config.alpha.linkerd.io/proxy-wait-before-exit-seconds (0: not given). The proxy does not
	// show it either.
	ProxyWaitBeforeExit time.Duration
	Output              string
	Timeout             time.Duration // bounds the admin calls; default 2s
	// FailureWindow is how far apart the two samples are that tell whether the sidecar answers
	// 5xx now (default DefaultFailureWindow). The second is taken only when the first shows
	// some 5xx since the sidecar started.
	FailureWindow time.Duration
	Clock         clock.Clock
}

// Check outcomes.
const (
	Pass = "ok"
	Fail = "fail"
	Warn = "warn"
)

// Item is one rule's outcome; a failed one says how to fix it.
type Item struct {
	Name    string `json:"name"`
	Status  string `json:"status"`
	Message string `json:"message"`
	Fix     string `json:"fix,omitempty"`
}

// CheckResult is the whole check: OK when no item failed.
type CheckResult struct {
	OK        bool      `json:"ok"`
	Admin     string    `json:"admin"`
	MinSignal MinSignal `json:"min_signal"`
	Checks    []Item    `json:"checks"`
	// Status is the sample the rules judged; nil when the admin API could not be read.
	Status *Report `json:"status"`
}

// Problems returns the failed items.
func (c CheckResult) Problems() []Item {
	var out []Item
	for _, it := range c.Checks {
		if it.Status == Fail {
			out = append(out, it)
		}
	}
	return out
}

// Check runs every rule against the sidecar, writes the outcome to out and returns it. The
// error is only for options or a failed write: a sidecar that fails the rules is a result.
func Check(ctx context.Context, sc Sampler, out io.Writer, o CheckOptions) (CheckResult, error) {
	if o.Output == "" {
		o.Output = OutputText
	}
	if _, err := ParseOutput(o.Output); err != nil {
		return CheckResult{}, err
	}
	if o.MinSignal == "" {
		o.MinSignal = MinRequests
	}
	if _, err := ParseMinSignal(string(o.MinSignal)); err != nil {
		return CheckResult{}, err
	}
	if o.Timeout <= 0 {
		o.Timeout = 2 * time.Second
	}
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	res := Evaluate(ctx, sc, o)
	var err error
	if o.Output == OutputJSON || o.Output == OutputYAML {
		err = output.Write(out, o.Output, res)
	} else {
		err = WriteCheckText(out, res)
	}
	return res, err
}

// Evaluate runs the rules without printing.
func Evaluate(ctx context.Context, sc Sampler, o CheckOptions) CheckResult {
	if o.MinSignal == "" {
		o.MinSignal = MinRequests
	}
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	res := CheckResult{Admin: o.AdminURL, MinSignal: o.MinSignal}
	timeout := o.Timeout
	if timeout <= 0 {
		timeout = 2 * time.Second
	}
	sampleCtx, cancel := context.WithTimeout(ctx, timeout)
	r, err := sc.Sample(sampleCtx, o.AdminURL, o.Selector, o.Clock.Now())
	cancel()
	if r.Admin != "" {
		res.Admin = r.Admin // the detected one, when the mesh was detected
	}
	switch {
	case err != nil:
		res.Checks = append(res.Checks, adminErrorItem(res.Admin, r.Mesh, err))
	case r.Mesh == mesh.Linkerd:
		res.Status = &r
		res.Checks = append(res.Checks, Item{Name: "admin-api", Status: Pass, Message: fmt.Sprintf("admin port at %s answers (linkerd-proxy %s)", res.Admin, orDash(r.ProxyVersion))})
		res.Checks = append(res.Checks, linkerdServerStateItem(r))
		res.Checks = append(res.Checks, linkerdSignalItems(r, o.MinSignal)...)
	default:
		res.Status = &r
		version := ""
		if r.EnvoyVersion != "" {
			version = " (" + r.EnvoyVersion + ")"
		}
		res.Checks = append(res.Checks, Item{Name: "admin-api", Status: Pass, Message: fmt.Sprintf("admin API at %s answers%s", res.Admin, version)})
		res.Checks = append(res.Checks, serverStateItem(r))
		if it, ok := listenersItem(r); ok {
			res.Checks = append(res.Checks, it)
		}
		res.Checks = append(res.Checks, signalItems(r, o.MinSignal)...)
	}
	if res.Status != nil {
		res.Checks = append(res.Checks, secondSampleItems(ctx, sc, o, timeout, *res.Status)...)
	}
	res.Checks = append(res.Checks, timingItems(res.Status, o)...)
	res.OK = len(res.Problems()) == 0
	return res
}

// secondSampleItems judge what moves between two samples, FailureWindow apart: whether the
// sidecar answers 5xx now, when the first shows some since it started, and with --drain-at end
// whether it drains now, when the first shows connections told to close. The second sample
// is taken only when one of them needs it, and once for both.
func secondSampleItems(ctx context.Context, sc Sampler, o CheckOptions, timeout time.Duration, first Report) []Item {
	window := o.FailureWindow
	if window <= 0 {
		window = DefaultFailureWindow
	}
	checkRegime := o.DrainAtEnd && first.Mesh != mesh.Linkerd
	var second *Report
	var secondErr error
	if first.failuresSeen() || (checkRegime && first.drainSeen.Known && first.drainSeen.Closes > 0) {
		second, secondErr = sampleAgain(ctx, sc, o, timeout, window)
	}
	var items []Item
	if first.failuresSeen() {
		if it, ok := serverErrorsItem(first, second, secondErr, window); ok {
			items = append(items, it)
		}
	} else if it, ok := serverErrorsItem(first, nil, nil, window); ok {
		items = append(items, it)
	}
	if checkRegime {
		reads := []Report{first}
		if second != nil {
			reads = append(reads, *second)
			// The answer a second sample shows may have come after its closes were read: a
			// third one, whose closes are read after it, settles it (regime.Watch).
			if seen := regimeOf(reads, window); seen.answerPending && seen.Rise == 0 {
				if third, err := sampleAgain(ctx, sc, o, timeout, window); err == nil {
					reads = append(reads, *third)
				}
			}
		}
		items = append(items, regimeItem(reads, window))
	}
	return items
}

// sampleAgain takes the second sample, window after the first.
func sampleAgain(ctx context.Context, sc Sampler, o CheckOptions, timeout, window time.Duration) (*Report, error) {
	if !wait(ctx, o.Clock, window) {
		return nil, ctx.Err()
	}
	sampleCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	second, err := sc.Sample(sampleCtx, o.AdminURL, o.Selector, o.Clock.Now())
	if err != nil {
		return nil, err
	}
	return &second, nil
}

// checkedRegime is what check's samples show of the drain regime, for a pod configured for
// regime (b) (--drain-at end); answerPending says another sample would confirm an answer.
type checkedRegime struct {
	regime.Seen
	answerPending bool
}

func regimeOf(reads []Report, window time.Duration) checkedRegime {
	var w regime.Watch
	for _, r := range reads {
		w.Observe(r.traffic, r.drainSeen.Known)
	}
	seen := w.Seen()
	seen.DrainAtEnd, seen.Span = true, "at check's sample"
	if len(reads) > 1 {
		seen.Span = fmt.Sprintf("in %s over %d samples", time.Duration(len(reads)-1)*window, len(reads))
	}
	return checkedRegime{Seen: seen, answerPending: w.AnswerPending()}
}

// regimeItem judges a pod configured for regime (b) (--drain-at end) as prestop's final event
// judges its drain regime (regime.Seen.Verdict), over check's samples: the first, and
// more only when it shows connections told to close. Before the deletion nothing may drain
// the sidecar, so connections told to close between two samples are its own drain running,
// or the pod already terminating without the istio-proxy override: prestop would fall back to
// regime (a).
func regimeItem(reads []Report, window time.Duration) Item {
	seen := regimeOf(reads, window)
	judged, why, fix := seen.Verdict()
	it := Item{Name: "drain-regime", Message: why, Fix: fix}
	switch judged {
	case regime.B:
		it.Status = Pass
		it.Message = "regime b (--drain-at end): the sidecar tells no connection to close (http.<prefix>.downstream_cx_drain_close " +
			strconv.FormatFloat(seen.AtFirst, 'f', -1, 64) + ", not rising): its own drain does not run before meshdrain's; " +
			"at the deletion prestop's final event says drain_regime"
	case regime.A:
		it.Status = Fail
	default:
		it.Status = Warn
		if it.Fix == "" {
			it.Fix = "run the check while requests reach the pod: an answer that tells no connection to close shows the sidecar is not draining"
		}
	}
	return it
}

// adminErrorItem says why the sidecar could not be read, and what to do about it.
func adminErrorItem(admin string, sidecarMesh mesh.Mesh, err error) Item {
	var unreachable *UnreachableError
	var notSidecar *NotASidecarError
	switch {
	case errors.As(err, &unreachable) && unreachable.Mesh == mesh.Linkerd:
		return Item{Name: "admin-api", Status: Fail,
			Message: fmt.Sprintf("admin port at %s not reachable: is this a pod with a Linkerd proxy? is its admin port 4191?", admin),
			Fix: fmt.Sprintf("run the check in the pod (kubectl exec POD -c APP -- meshdrain check --mesh linkerd) or pass --admin http://127.0.0.1:PORT; cause: %v",
				unreachable.Err)}
	case errors.As(err, &unreachable) && unreachable.Mesh == mesh.Auto:
		return Item{Name: "admin-api", Status: Fail,
			Message: fmt.Sprintf("no sidecar admin port reachable at %s: is this a pod with a Linkerd proxy or an Envoy sidecar?", admin),
			Fix: fmt.Sprintf("run the check in the pod (kubectl exec POD -c APP -- meshdrain check) or pass --mesh and --admin http://127.0.0.1:PORT; cause: %v",
				unreachable.Err)}
	case errors.As(err, &unreachable):
		return Item{Name: "admin-api", Status: Fail,
			Message: fmt.Sprintf("admin API at %s not reachable: is this a pod with an Envoy sidecar? is the admin port 15000?", admin),
			Fix: fmt.Sprintf("run the check in the pod (kubectl exec POD -c APP -- meshdrain check) or pass --admin http://127.0.0.1:PORT; cause: %v",
				unreachable.Err)}
	case errors.As(err, &notSidecar):
		return Item{Name: "admin-api", Status: Fail, Message: err.Error(),
			Fix: "pass --mesh and --admin naming the sidecar's admin port (Linkerd http://127.0.0.1:4191, Envoy http://127.0.0.1:15000)"}
	case sidecarMesh == mesh.Linkerd:
		return Item{Name: "admin-api", Status: Fail,
			Message: fmt.Sprintf("admin port at %s answered, but the proxy's metrics could not be read: %v", admin, err),
			Fix:     "check that --admin points at the Linkerd proxy's admin port (GET /metrics must answer)"}
	}
	return Item{Name: "admin-api", Status: Fail,
		Message: fmt.Sprintf("admin API at %s answered, but its inbound stats could not be read: %v", admin, err),
		Fix:     "check that --admin points at Envoy's admin listener (GET /stats/prometheus must answer)"}
}

func serverStateItem(r Report) Item {
	it := Item{Name: "server-state", Message: "server state " + r.ServerState}
	switch r.ServerState {
	case StateLive:
		it.Status = Pass
	case StateDraining:
		it.Status, it.Fix = Fail, "the sidecar is draining (POST /healthcheck/fail, or the pod is terminating): check a running pod, or POST /healthcheck/ok"
	case StatePreInitializing, StateInitializing:
		it.Status, it.Fix = Fail, "the sidecar is still starting: run the check once the pod is Ready"
	default:
		it.Status, it.Fix = Fail, "neither /server_info nor the server.state gauge gave a state: is --admin an Envoy admin API?"
	}
	return it
}

// listenersItem fails a sidecar whose listeners were stopped: its server state still says
// LIVE, but new connections are refused, so the pod serves nothing new. Without the
// listener manager's stats it says nothing.
func listenersItem(r Report) (Item, bool) {
	lm := r.ListenerManager
	if lm == nil || lm.Stopped == nil {
		return Item{}, false
	}
	if lm.InboundStopped() {
		return Item{Name: "inbound-listeners", Status: Fail,
			Message: fmt.Sprintf("%s listener(s) stopped (listener_manager.listener_stopped): the inbound listeners refuse new connections although the server is %s",
				num(lm.Stopped), r.ServerState),
			Fix: "this sidecar has been drained (a graceful drain's time ended, or /drain_listeners without graceful): check a pod that is not terminating; only a restart makes this Envoy accept again"}, true
	}
	return Item{Name: "inbound-listeners", Status: Pass, Message: "no listener stopped (listener_manager.listener_stopped 0)"}, true
}

// effectiveSignal is the best signal prestop could use for one endpoint: its own
// request-level stats, else the sidecar-wide completions or connections.
func effectiveSignal(r Report, p Port) mesh.Signal {
	if p.Signal != mesh.SignalNone {
		return p.Signal
	}
	if r.CompletedRequestsTotal != nil {
		return mesh.SignalCompletedRequests
	}
	if (r.Listener != nil && r.Listener.ConnectionsActive != nil) || p.ConnectionsActive != nil {
		return mesh.SignalConnections
	}
	return mesh.SignalNone
}

// fix is how to get request-level stats on this sidecar: the exact setting to change, the
// explanation being in the item's message.
func fix(r Report) string {
	if r.Mesh == mesh.Linkerd {
		return linkerdFix(r)
	}
	for _, h := range hints(r) {
		// A wrong --port or a wrong cluster / prefix name is fixed on meshdrain's side.
		if strings.Contains(h, "check --port") || strings.Contains(h, "under this name") {
			return h
		}
	}
	if !r.generic && r.Mesh == mesh.Istio {
		return envoy.MissingStatsHint
	}
	return hintPlainEnvoy
}

// signalNote explains what a weaker signal costs prestop.
func signalNote(sig mesh.Signal) string {
	switch sig {
	case mesh.SignalCompletedRequests:
		return " (istio_requests_total counts a request when it completes, so it lags arrivals by the request latency)"
	case mesh.SignalConnections:
		return " (connection counts do not move when a new request arrives on an open keep-alive connection)"
	}
	return ""
}

// signalItems require a signal of at least min for every named port (or cluster / HTTP
// prefix), or for at least one inbound port when none is named.
func signalItems(r Report, min MinSignal) []Item {
	named := r.generic || len(r.portsAsked) > 0
	if named {
		var items []Item
		for _, p := range r.Inbound {
			label := p.Name
			if p.Port != nil {
				label = fmt.Sprintf("port %d", *p.Port)
				if slices.Contains(r.UnknownPorts, *p.Port) {
					// Whatever --min-signal accepts, a port the sidecar does not have cannot be drained.
					items = append(items, Item{Name: "signal", Status: Fail,
						Message: fmt.Sprintf("%s: the sidecar has no inbound endpoint for this port; its inbound ports are %s", label, joinInts(r.InboundPorts)),
						Fix:     fmt.Sprintf("pass --port with the container's target port (one of %s), or leave --port out to watch every inbound port", joinInts(r.InboundPorts))})
					continue
				}
			}
			items = append(items, signalItem(r, label, effectiveSignal(r, p), min))
		}
		return items
	}
	// Any one port with a request-level signal is enough: take the best endpoint, or the
	// sidecar-wide signal when no endpoint was found at all.
	best := r.Signal
	if len(r.Inbound) > 0 {
		best = mesh.SignalNone
		for _, p := range r.Inbound {
			if sig := effectiveSignal(r, p); sig.Rank() < best.Rank() {
				best = sig
			}
		}
	}
	var on []string
	for _, p := range r.Inbound {
		if best != mesh.SignalNone && effectiveSignal(r, p) == best {
			on = append(on, portText(p.Port))
			if p.Port == nil {
				on[len(on)-1] = p.Name
			}
		}
	}
	label := "inbound"
	if len(on) > 0 {
		label = "inbound port(s) " + strings.Join(on, ", ")
	}
	return []Item{signalItem(r, label, best, min)}
}

func signalItem(r Report, label string, sig mesh.Signal, min MinSignal) Item {
	it := Item{Name: "signal"}
	switch {
	case min.accepts(sig) && sig.Rank() <= mesh.SignalClusterRequests.Rank():
		it.Status, it.Message = Pass, fmt.Sprintf("%s: request-level signal %s", label, sig)
	case min.accepts(sig):
		it.Status = Warn
		it.Message = fmt.Sprintf("%s: signal %s accepted by --min-signal %s, but prestop's wait is weaker with it%s", label, sig, min, signalNote(sig))
		it.Fix = fix(r)
	case sig == mesh.SignalNone:
		it.Status, it.Message, it.Fix = Fail, fmt.Sprintf("%s: no inbound signal at all (prestop would fall back to a fixed wait)", label), fix(r)
	default:
		it.Status = Fail
		it.Message = fmt.Sprintf("%s: best signal is %s, below --min-signal %s%s", label, sig, min, signalNote(sig))
		it.Fix = fix(r)
	}
	return it
}

// timingItems check the pod's termination timing when the grace period is given: prestop's
// deadline must leave time, and a classic sidecar must outlive the app (docs/facts.md §1).
func timingItems(r *Report, o CheckOptions) []Item {
	if o.GracePeriod <= 0 {
		return nil
	}
	deadline := drain.DefaultDeadline(o.GracePeriod, o.AppDrain)
	if err := deadlineProblem(o.GracePeriod, o.AppDrain); err != nil {
		return []Item{{Name: "deadline", Status: Fail, Message: err.Error(), Fix: deadlineFix}}
	}
	items := []Item{{Name: "deadline", Status: Pass,
		Message: fmt.Sprintf("prestop deadline %s (grace %s - app-drain %s - 1s)", deadline, o.GracePeriod, o.AppDrain)}}
	appExit := deadline + o.AppDrain
	if o.ProxyWaitBeforeExit > 0 || (r != nil && r.Mesh == mesh.Linkerd) {
		items = append(items, waitBeforeExitItems(o, appExit)...)
		if r != nil && r.Mesh == mesh.Linkerd {
			if o.TerminationDrainDuration > 0 {
				items = append(items, Item{Name: "termination-drain-duration", Status: Warn,
					Message: "terminationDrainDuration is Istio's pilot-agent setting: a Linkerd proxy has none",
					Fix:     "for a classic Linkerd proxy pass --proxy-wait-before-exit (its proxy-wait-before-exit-seconds) instead"})
			}
			return items // Envoy's drain time and pilot-agent's settings do not apply
		}
	}
	needed := ceilSecond(appExit + plan.KillMargin)
	setting := fmt.Sprintf(`set the pod annotation proxy.istio.io/config: '{"terminationDrainDuration": "%ds"}' (needs a pod restart), `+
		`or use native sidecars or EXIT_ON_ZERO_ACTIVE_CONNECTIONS`, int(needed/time.Second))
	switch {
	case o.DrainAtEnd && o.TerminationDrainDuration > 0:
		items = append(items, Item{Name: "termination-drain-duration", Status: Pass,
			Message: fmt.Sprintf("terminationDrainDuration %s: in regime (b) (--drain-at end) meshdrain hold keeps a classic proxy's SIGTERM until the app has let go "+
				"and asks pilot-agent to drain, so the proxy exits at once; this only bounds the fallback where that call fails (plan sizes it --app-drain + %s), "+
				"and regime (a)'s rule that it outlive the app's latest exit at t0+%s does not apply", o.TerminationDrainDuration, plan.KillMargin, appExit)})
	case o.DrainAtEnd:
		// Istio's default 5 s is only the fallback's bound too: nothing to warn about.
	case o.TerminationDrainDuration > 0 && o.TerminationDrainDuration < needed:
		items = append(items, Item{Name: "termination-drain-duration", Status: Fail,
			Message: fmt.Sprintf("terminationDrainDuration %s is shorter than the app's latest exit at t0+%s (prestop deadline %s + app drain %s) plus %s: "+
				"pilot-agent kills Envoy under the app and requests still in flight are cut", o.TerminationDrainDuration, appExit, deadline, o.AppDrain, plan.KillMargin),
			Fix: setting})
	case o.TerminationDrainDuration > 0:
		items = append(items, Item{Name: "termination-drain-duration", Status: Pass,
			Message: fmt.Sprintf("terminationDrainDuration %s outlives the app's latest exit at t0+%s", o.TerminationDrainDuration, appExit)})
	case r != nil && r.Mesh == mesh.Istio:
		items = append(items, Item{Name: "termination-drain-duration", Status: Warn,
			Message: fmt.Sprintf("terminationDrainDuration cannot be read from the sidecar (it is pilot-agent's, not Envoy's); with Istio's default %s "+
				"a classic sidecar is killed at t0+%s while the app may run until t0+%s: pass --termination-drain-duration to verify",
				plan.IstioTerminationDrainDuration, plan.IstioTerminationDrainDuration, appExit),
			Fix: setting})
	}
	if r != nil && r.DrainTime != "" {
		if drainTime, err := time.ParseDuration(r.DrainTime); err == nil && drainTime < appExit {
			// In regime (b) the drain starts at meshdrain's decision; only a sidecar that
			// drains at the deletion anyway (the fallback) starts it at t0, as plan says.
			where := ""
			if o.DrainAtEnd {
				where = "where the sidecar drains at the deletion anyway, "
			}
			items = append(items, Item{Name: "drain-time", Status: Warn,
				Message: fmt.Sprintf("Envoy drain_time %s (Istio drainDuration) ends before the app's latest exit at t0+%s: %safter the graceful drain "+
					"at t0 the inbound listeners stop accepting at t0+%s while late clients may still send", drainTime, appExit, where, drainTime),
				Fix: fmt.Sprintf(`set proxy.istio.io/config: '{"drainDuration": "%ds"}'`, int(ceilSecond(appExit)/time.Second))})
		}
	}
	return items
}

// deadlineProblem is what prestop says at start of --grace-period and --app-drain
// (drain.DeadlineProblems, the one definition): check fails where prestop --validate would.
func deadlineProblem(gracePeriod, appDrain time.Duration) error {
	return errors.Join(drain.DeadlineProblems(gracePeriod, appDrain, 0)...)
}

const deadlineFix = "raise terminationGracePeriodSeconds (meshdrain plan computes it) or lower --app-drain"

// KernelTiming is check --mesh none's timing item, with --grace-period: prestop's deadline
// must leave time, as for a sidecar (the sidecar's own timing does not apply).
func KernelTiming(gracePeriod, appDrain time.Duration) KernelCheck {
	if err := deadlineProblem(gracePeriod, appDrain); err != nil {
		return KernelCheck{Name: "deadline", Detail: err.Error(), Fix: deadlineFix}
	}
	return KernelCheck{Name: "deadline", OK: true,
		Detail: fmt.Sprintf("prestop deadline %s (grace %s - app-drain %s - 1s)", drain.DefaultDeadline(gracePeriod, appDrain), gracePeriod, appDrain)}
}

// waitBeforeExitItems check a classic Linkerd proxy's preStop sleep: at its end the proxy
// gets SIGTERM and stops accepting in both directions, so it must not end before the app's
// latest exit, and the grace period must leave the proxy time to shut down after it.
func waitBeforeExitItems(o CheckOptions, appExit time.Duration) []Item {
	wait := o.ProxyWaitBeforeExit
	if wait <= 0 {
		return nil
	}
	needed := ceilSecond(appExit)
	setting := fmt.Sprintf(`set the pod annotations config.alpha.linkerd.io/proxy-wait-before-exit-seconds: "%d" and `+
		`config.linkerd.io/proxy-enable-native-sidecar: "false" (needs a pod restart), or use a native sidecar, which needs neither`, int(needed/time.Second))
	switch {
	case wait < needed:
		return []Item{{Name: "proxy-wait-before-exit", Status: Fail,
			Message: fmt.Sprintf("proxy-wait-before-exit %s ends before the app's latest exit at t0+%s: the proxy then gets SIGTERM and stops accepting "+
				"in both directions, refusing late clients and the app's own calls", wait, appExit),
			Fix: setting}}
	case wait+plan.KillMargin > o.GracePeriod:
		return []Item{{Name: "proxy-wait-before-exit", Status: Fail,
			Message: fmt.Sprintf("the grace period %s leaves the proxy less than %s to shut down after its SIGTERM at t0+%s", o.GracePeriod, plan.KillMargin, wait),
			Fix:     fmt.Sprintf("raise terminationGracePeriodSeconds to %d, or lower proxy-wait-before-exit-seconds to %d", int(ceilSecond(wait+plan.KillMargin)/time.Second), int(needed/time.Second))}}
	}
	return []Item{{Name: "proxy-wait-before-exit", Status: Pass,
		Message: fmt.Sprintf("proxy-wait-before-exit %s outlives the app's latest exit at t0+%s", wait, appExit)}}
}

func joinInts(list []int) string {
	var parts []string
	for _, v := range list {
		parts = append(parts, fmt.Sprint(v))
	}
	return strings.Join(parts, ", ")
}

func ceilSecond(d time.Duration) time.Duration {
	return (d + time.Second - 1).Truncate(time.Second)
}

// WriteCheckText writes one line per rule, each failure followed by its fix, and a verdict.
func WriteCheckText(w io.Writer, res CheckResult) error {
	var b strings.Builder
	for _, it := range res.Checks {
		fmt.Fprintf(&b, "%-5s %s\n", strings.ToUpper(it.Status), it.Message)
		if it.Fix != "" {
			fmt.Fprintf(&b, "      fix: %s\n", it.Fix)
		}
	}
	if problems := len(res.Problems()); problems > 0 {
		fmt.Fprintf(&b, "\ncheck failed: %d problem(s)\n", problems)
	} else {
		b.WriteString("\ncheck passed\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}
