// Package plan answers the question the user's report ends with: "what should each timeout
// be, and who waits for whom?". From a few facts about the workload (request latency, how
// late the slowest client learns that the pod is gone, how long the app needs to finish its
// in-flight work) and the kind of sidecar, it derives every bound of the pod's termination:
// meshdrain's deadline, terminationGracePeriodSeconds, and the sidecar setting that keeps
// the proxy serving until the app has finished (Istio's Envoy, or a Linkerd proxy: see
// linkerd.go). It is a plain function so `meshdrain simulate` replays exactly the numbers
// `meshdrain plan` recommends.
package plan

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/meshdrain/meshdrain/pkg/hook/drain"
	"github.com/meshdrain/meshdrain/pkg/mesh"
)

// Sidecar is how the Envoy sidecar is run, which decides what keeps it alive after t0.
type Sidecar string

const (
	// Classic is an Istio sidecar in spec.containers: pilot-agent gets SIGTERM at t0 and
	// kills Envoy terminationDrainDuration later, whatever the app is doing.
	Classic Sidecar = "classic"
	// ExitOnZero is a classic sidecar with EXIT_ON_ZERO_ACTIVE_CONNECTIONS=true:
	// pilot-agent sleeps MINIMUM_DRAIN_DURATION, then exits once Envoy has no connection.
	ExitOnZero Sidecar = "exit-on-zero"
	// Native is the proxy as an init container with restartPolicy: Always (Kubernetes >=
	// 1.29, Istio >= 1.21): the kubelet stops it only after the app container has exited.
	Native Sidecar = "native"
)

// Sidecars lists the accepted Sidecar values, for flag help and completion.
var Sidecars = []Sidecar{Native, Classic, ExitOnZero}

// Defaults that mirror meshdrain prestop's and Istio's own, so a plan with only the required
// inputs describes what the pod would really do.
const (
	DefaultQuiet         = drain.DefaultQuiet
	DefaultPoll          = drain.DefaultPoll
	DefaultDrainDuration = 45 * time.Second // Istio proxyConfig.drainDuration (Envoy --drain-time-s)
	// IstioTerminationDrainDuration is Istio's default: Envoy is killed at t0 + 5s.
	IstioTerminationDrainDuration = 5 * time.Second
	// MinMargin is the least head room between meshdrain's expected finish and its
	// deadline: the EDS lag given is an estimate of a tail, and a deadline hit means the app
	// stops while a late client may still be sending.
	MinMargin = 2 * time.Second
	// KillMargin is the time left between the last moment the app can still be draining and
	// the next kill (SIGKILL at the grace period, or pilot-agent killing Envoy), so the two
	// never coincide.
	KillMargin = drain.KillMargin
	// minAppDrain is the least default app drain: a JVM's shutdown hooks alone take that.
	minAppDrain = time.Second
	// appDrainPerP99 is how many P99s the default app drain allows: the slowest requests in
	// flight at SIGTERM plus the app's own shutdown work.
	appDrainPerP99 = 4
)

// Input is what the operator knows about the workload. Zero values take the defaults above.
type Input struct {
	// P99 is the app's 99th-percentile request latency: the floor of AppDrain, and of the
	// quiet window when only completed-request stats exist.
	P99 time.Duration
	// EDSLag is the worst expected time from pod deletion (t0) until the last client has
	// stopped sending to this pod (istiod's push plus the slowest client sidecar). With
	// EDSLagMedian and Clients it is instead one client's P99 lag, and the last client's lag
	// is derived (see LastClientConfidence).
	EDSLag time.Duration
	// EDSLagMedian is one client's median lag (istiod's pilot_proxy_convergence_time p50),
	// given with Clients; zero when EDSLag is the last client's lag itself.
	EDSLagMedian time.Duration
	// Clients is the number of client sidecars that send to this pod. The slowest of many
	// clients is later than one client's P99, so the plan's lag grows with it.
	Clients int
	// Quiet is meshdrain's quiet window: no new inbound request for this long means the
	// clients have stopped. The plan's own --quiet may be longer (RPSPerClient, ClientPeriod).
	Quiet time.Duration
	// MinWait is meshdrain's --min-wait: the hook never returns earlier. Zero: 5s, prestop's
	// default (drain.DefaultMinWait).
	MinWait time.Duration
	// RPSPerClient is, when known, the request rate of one client proxy (requests per
	// second): the last client's pauses are then as long as Poisson arrivals at that rate
	// make them, and the quiet window must outlast them (drain.PoissonQuiet). Zero: unknown.
	RPSPerClient float64
	// ClientPeriod is, when clients send on a schedule (a poller, a fan-out every N seconds),
	// the time between two of one client's requests or bursts; the quiet window must outlast
	// it by a poll. Zero: none.
	ClientPeriod time.Duration
	// Poll is meshdrain's stats polling interval; detecting the quiet window can take one
	// more poll.
	Poll time.Duration
	// AppDrain is the time the app needs after SIGTERM to finish its in-flight requests and
	// exit. Zero: 4 × P99 rounded up to a whole second, at least 1s.
	AppDrain time.Duration
	// Mesh is the service mesh; empty means MeshIstio. mesh.None and Ambient are a pod
	// without a sidecar (meshless.go).
	Mesh mesh.Mesh
	// Ports are the app's own listening ports, which a meshless preStop watches (--port);
	// required there, unused by the sidecar plans.
	Ports []int
	// AppMetrics and AppRequests, in a meshless plan, are the app's own Prometheus metrics on
	// the pod's loopback and its request counter (prestop --app-metrics, --app-requests);
	// empty: the kernel alone ("" AppRequests: prestop's default counter).
	AppMetrics, AppRequests string
	// ReplacedSleep is the `preStop: sleep N` the plan replaces (0: none), and
	// ReplacedAppTime the app's time after SIGTERM with it: the grace period less the sleep.
	// The app keeps that time (AppDrain defaults to it), and a configuration mistake holds the
	// pod as long as the sleep did (FallbackWait).
	ReplacedSleep, ReplacedAppTime time.Duration
	// FallbackWait is prestop's --fallback-wait: its fixed wait when it can see nothing
	// (zero: prestop's default, 5s). Bounded by the deadline.
	FallbackWait time.Duration
	// IgnoreLoopback, in a meshless plan: exec probes call the app on the pod's loopback, so
	// loopback sources are no clients (--ignore-source 127.0.0.0/8 and ::1/128).
	IgnoreLoopback bool
	// AllowRemote: the workload's preStop has --allow-remote (a re-plan keeps it), so its
	// --app-metrics may name another host.
	AllowRemote bool
	// Sidecar is the kind of sidecar; empty means Classic for Istio, Native for Linkerd
	// (its default since 2.20). ExitOnZero is Istio's only.
	Sidecar Sidecar
	// CurrentGracePeriod is the pod's terminationGracePeriodSeconds today (0: not given);
	// the plan then says whether it is enough.
	CurrentGracePeriod time.Duration
	// DrainDuration is Istio's proxyConfig.drainDuration (Envoy --drain-time-s): how long
	// Envoy's inbound listeners keep accepting after the drain starts. Zero: 45s. Istio only.
	DrainDuration time.Duration
	// CurrentWaitBeforeExit is the pod's config.alpha.linkerd.io/proxy-wait-before-exit-seconds
	// today (0: not set), so that the plan can warn about it with a native Linkerd sidecar.
	CurrentWaitBeforeExit time.Duration
	// KeepLonger are the workload's own bounds, which the plan keeps wherever they are longer
	// than what suffices: a re-plan never lowers what someone raised on purpose (meshdrain plan
	// --lower-grace-period leaves this empty). Zero values keep nothing.
	KeepLonger Bounds
	// DeferSidecarDrain is drain regime (b) (docs/decision-rule.md): an istio-proxy container
	// in the pod spec, which Istio's injector merges into the proxy it injects, runs
	// `meshdrain hold` as the proxy's preStop, so Istio's own inbound drain at the deletion
	// waits until meshdrain prestop has decided; prestop drains at its decision (--drain-at
	// end). Nothing tells a client to close before then, which is what lets prestop see each
	// client let go. Istio only (a Linkerd proxy has no drain call to defer). `meshdrain plan`
	// sets it unless --defer-sidecar-drain=false; the zero value is regime (a), Istio's
	// default, where the proxy drains at the deletion.
	DeferSidecarDrain bool
	// LagFrom is the lag learnt from the fleet (plan --lag-from); nil without. It sets
	// EDSLag, and the hook gets its distribution and risk (--lag-dist, --risk) with a
	// --min-wait of 0 unless MinWait is given.
	LagFrom *LagFrom
	// KeepsLagDist: the workload's preStop has a --lag-dist that a re-plan without --lag-from
	// keeps as written, so its --min-wait of 0 is the figure's, not a mistake.
	KeepsLagDist bool
}

// Bounds are the settings of a pod that bound its termination and that plan writes: the grace
// period and the sidecar's own bounds, which follow it.
type Bounds struct {
	// GracePeriod is terminationGracePeriodSeconds.
	GracePeriod time.Duration
	// TerminationDrainDuration is proxy.istio.io/config terminationDrainDuration (classic Istio).
	TerminationDrainDuration time.Duration
	// MinimumDrainDuration is proxyMetadata.MINIMUM_DRAIN_DURATION (Istio exit-on-zero).
	MinimumDrainDuration time.Duration
	// WaitBeforeExit is config.alpha.linkerd.io/proxy-wait-before-exit-seconds (classic Linkerd).
	WaitBeforeExit time.Duration
}

// Plan is the recommended configuration and the termination timeline it implies. All times
// named At… are measured from t0, the moment the pod is deleted.
type Plan struct {
	// Input with every default filled in.
	Input Input

	// LastClientLag is the EDS lag the plan is sized on: Input.EDSLag, or with a lag
	// distribution the last of Input.Clients clients at LastClientConfidence.
	LastClientLag time.Duration
	// TypicalLastClientLag and TypicalFinish are, with a lag distribution, the median lag of
	// the last client and when meshdrain then returns: the usual rollout. Zero otherwise.
	TypicalLastClientLag, TypicalFinish time.Duration

	// ExpectedFinish is when meshdrain's preStop is expected to return: the last client
	// stops at EDSLag, the counter must then stay still for max(Quiet, P99), and noticing it
	// takes up to one Poll.
	ExpectedFinish time.Duration
	// Margin is the head room added to ExpectedFinish: max(MinMargin, ExpectedFinish/4).
	Margin time.Duration
	// Deadline is meshdrain's --deadline: the latest the preStop returns. It equals
	// GracePeriod − AppDrain − 1s, which is also what prestop derives by default.
	Deadline time.Duration
	// GracePeriod is the recommended terminationGracePeriodSeconds (whole seconds):
	// Deadline + AppDrain + KillMargin. It is SufficientGracePeriod, or the workload's own when
	// that is longer (Input.KeepLonger).
	GracePeriod time.Duration
	// SufficientGracePeriod is the grace period the inputs need: the expected finish, its
	// margin, the app's drain and the kill margin, in whole seconds.
	SufficientGracePeriod time.Duration
	// AppDrain is the app's drain time after SIGTERM (from Input or its default).
	AppDrain time.Duration
	// Quiet and Poll are meshdrain's --quiet and --poll.
	Quiet, Poll time.Duration

	// AppExitExpected and AppExitWorst are when the app container has exited: after
	// meshdrain returns (expected or at its deadline) plus AppDrain.
	AppExitExpected, AppExitWorst time.Duration
	// LastRequestDone is when the last client's last request has been answered, if the
	// clients stop by EDSLag: EDSLag + P99.
	LastRequestDone time.Duration

	// TerminationDrainDuration is the proxyConfig.terminationDrainDuration to set (Classic
	// only; zero otherwise): Envoy must outlive AppExitWorst by KillMargin.
	TerminationDrainDuration time.Duration
	// ExitOnZeroActiveConnections and MinimumDrainDuration are the pilot-agent settings for
	// ExitOnZero (zero otherwise): pilot-agent must not start counting connections before
	// meshdrain's deadline, or a moment with no connection could end Envoy while late
	// clients are still sending.
	ExitOnZeroActiveConnections bool
	MinimumDrainDuration        time.Duration
	// SidecarExitWorst is the latest the sidecar is expected to exit by itself.
	SidecarExitWorst time.Duration
	// HoldBound is, in regime (b), the latest `meshdrain hold` returns: the hook deadline plus
	// the app's drain, within the grace period less KillMargin (hold.Bound). Zero otherwise.
	HoldBound time.Duration
	// DrainDuration is the proxyConfig.drainDuration to set, or zero when the current one
	// (Input.DrainDuration) already keeps Envoy accepting until the app has exited.
	DrainDuration time.Duration
	// FallbackWait is prestop's --fallback-wait (Input.FallbackWait within the deadline);
	// zero: prestop's default.
	FallbackWait time.Duration
	// WaitBeforeExit is the proxy-wait-before-exit-seconds to set (classic Linkerd only;
	// zero otherwise): the proxy's SIGTERM must not come before the app has exited.
	WaitBeforeExit time.Duration

	// Steps is the timeline, in order.
	Steps []Step
	// Arithmetic is each derived number with the sum that gives it.
	Arithmetic []Line
	// Warnings are what the operator should know about the current setup: a grace period
	// that is too short (or longer than needed), Istio defaults that defeat the plan.
	Warnings []string
	// Kept are the workload's own values the plan keeps because they are longer than what
	// suffices (Input.KeepLonger), in the order the manifest lists them.
	Kept []Kept
	// Attention are the warnings plan also prints on stderr in every output mode, since they
	// change what gets written or question an input: the values kept, a grace period over
	// LongGracePeriod. Each is in Warnings too.
	Attention []string
}

// Kept is one of the workload's values that the plan keeps although a shorter one suffices.
type Kept struct {
	// Setting names it as the manifest does: terminationGracePeriodSeconds, terminationDrainDuration.
	Setting string
	// Value is what the plan keeps and writes; Suffices is what the inputs need.
	Value, Suffices time.Duration
}

// String says it in one sentence, with the flag that lowers it.
func (k Kept) String() string {
	return fmt.Sprintf("%s %s kept: the workload's own is longer than the %s that suffices, and plan does not lower what someone raised; --lower-grace-period sets %s",
		k.Setting, fmtD(k.Value), fmtD(k.Suffices), fmtD(k.Suffices))
}

// Step is one moment of the termination timeline: who does what, and who waits for whom.
type Step struct {
	// At is the time from t0 (expected); Until, if not zero, ends a window that starts at
	// At; Worst, if not zero, is the bound when things go slower than expected.
	At, Until, Worst time.Duration
	// Who acts: "kubelet", "clients", "meshdrain", "app", "Envoy", "pilot-agent".
	Who string
	// What happens, including what it waits for and its bound.
	What string
}

// Line is one derived number: its name, value and the arithmetic behind it.
type Line struct {
	Name  string
	Value time.Duration
	Why   string
}

// Recommend derives the plan for in. It fails on inputs that cannot describe a working pod
// (missing latency or lag, an app drain shorter than P99, a quiet window not longer than the
// poll interval).
func Recommend(in Input) (Plan, error) {
	in, err := normalize(in)
	if err != nil {
		return Plan{}, err
	}
	p := Plan{Input: in, Poll: in.Poll, AppDrain: in.AppDrain}
	lag, typical, lagWhy := lastClientLag(in)
	p.LastClientLag = lag
	if in.LagFrom != nil {
		p.Arithmetic = append(p.Arithmetic, p.lagArithmetic()...)
		p.Attention = append(p.Attention, in.LagFrom.lagAttention()...)
	}
	var quietWhy string
	p.Quiet, quietWhy = quietWindow(in)
	if quietWhy != "" {
		p.Arithmetic = append(p.Arithmetic, Line{"meshdrain --quiet", p.Quiet, quietWhy})
	}

	// The counter must stay unchanged for the quiet window, and every request still in
	// flight (up to P99 long) must end: whichever is longer bounds the wait after the last
	// arrival; and the hook never returns before its minimum wait.
	settle := max(p.Quiet, in.P99)
	p.ExpectedFinish = max(in.MinWait, lag+settle) + in.Poll
	if typical > 0 {
		p.TypicalLastClientLag = typical
		p.TypicalFinish = max(in.MinWait, typical+settle) + in.Poll
		p.Arithmetic = append(p.Arithmetic, Line{"eds-lag (last client)", lag, lagWhy},
			Line{"eds-lag (typical last client)", typical, fmt.Sprintf("the median of the last of %d clients' lag", in.Clients)})
	}
	p.Margin = roundUp(max(MinMargin, p.ExpectedFinish/4), 100*time.Millisecond)
	p.SufficientGracePeriod = ceilSecond(p.ExpectedFinish + p.Margin + in.AppDrain + KillMargin)
	p.GracePeriod = max(p.SufficientGracePeriod, ceilSecond(in.KeepLonger.GracePeriod))
	p.Deadline = drain.DefaultDeadline(p.GracePeriod, in.AppDrain) // what prestop derives itself
	// What plan writes, prestop accepts: the preStop's timing is checked by prestop's own
	// rules, and refused here with prestop's words.
	if problems := p.prestopTiming().Problems(); len(problems) > 0 {
		return Plan{}, &PrestopRefusal{Plan: p, Problems: problems}
	}
	p.AppExitExpected = p.ExpectedFinish + in.AppDrain
	p.AppExitWorst = p.Deadline + in.AppDrain
	p.LastRequestDone = lag + in.P99

	graceWhy := fmt.Sprintf("ceil(expected finish %s + margin %s + app-drain %s + %s kill margin)",
		fmtD(p.ExpectedFinish), fmtD(p.Margin), fmtD(in.AppDrain), fmtD(KillMargin))
	p.Arithmetic = append(p.Arithmetic,
		Line{"meshdrain expected finish", p.ExpectedFinish, expectedFinishWhy(p, lag)},
		Line{"margin", p.Margin, fmt.Sprintf("max(%s, expected finish %s / 4)", fmtD(MinMargin), fmtD(p.ExpectedFinish))})
	if p.GracePeriod > p.SufficientGracePeriod {
		p.Arithmetic = append(p.Arithmetic,
			Line{"grace period that suffices", p.SufficientGracePeriod, graceWhy},
			Line{"terminationGracePeriodSeconds", p.GracePeriod, fmt.Sprintf("the workload's own, kept: longer than the %s that suffices (--lower-grace-period sets that)",
				fmtD(p.SufficientGracePeriod))})
	} else {
		p.Arithmetic = append(p.Arithmetic, Line{"terminationGracePeriodSeconds", p.GracePeriod, graceWhy})
	}
	p.Arithmetic = append(p.Arithmetic,
		Line{"meshdrain --deadline", p.Deadline, fmt.Sprintf("grace %s − app-drain %s − %s (what prestop derives by default; ≥ expected finish + margin = %s)",
			fmtD(p.GracePeriod), fmtD(in.AppDrain), fmtD(KillMargin), fmtD(p.ExpectedFinish+p.Margin))},
		Line{"app exits by (worst)", p.AppExitWorst, fmt.Sprintf("deadline %s + app-drain %s", fmtD(p.Deadline), fmtD(in.AppDrain))},
		Line{"app's time after SIGTERM", p.AppTime(), p.appTimeWhy()},
	)
	if in.FallbackWait > 0 {
		p.FallbackWait = min(in.FallbackWait, p.Deadline)
		p.Arithmetic = append(p.Arithmetic, Line{"meshdrain --fallback-wait", p.FallbackWait, fmt.Sprintf(
			"the sleep %s it replaces, within the deadline %s: where the hook can see nothing (a configuration mistake), the pod waits as it did", fmtD(in.ReplacedSleep), fmtD(p.Deadline))})
	}
	if in.ReplacedAppTime > p.AppTime() {
		p.Attention = append(p.Attention, fmt.Sprintf("the app had %s after SIGTERM before (grace %s − sleep %s) and gets %s with this plan (--app-drain %s + %s): "+
			"give --app-drain %s if it needs that time", fmtD(in.ReplacedAppTime), fmtD(in.ReplacedAppTime+in.ReplacedSleep), fmtD(in.ReplacedSleep),
			fmtD(p.AppTime()), fmtD(p.AppDrain), fmtD(KillMargin), fmtD(in.ReplacedAppTime)))
	}

	p.mesh().recommend(&p)
	return p.finish()
}

// AppTime is the app's time after SIGTERM in the worst case, when the hook returns at its
// deadline: until the grace period's SIGKILL.
func (p Plan) AppTime() time.Duration { return p.GracePeriod - p.Deadline }

func (p Plan) appTimeWhy() string {
	why := fmt.Sprintf("grace %s − deadline %s (app-drain %s + %s kill margin)", fmtD(p.GracePeriod), fmtD(p.Deadline), fmtD(p.AppDrain), fmtD(KillMargin))
	if t := p.Input.ReplacedAppTime; t > 0 {
		why += fmt.Sprintf("; with the sleep %s it replaces: %s", fmtD(p.Input.ReplacedSleep), fmtD(t))
	}
	return why
}

// finish adds what every plan ends with: the timeline, the values kept from the workload
// with what would suffice, and a warning when the grace period is very long.
func (p Plan) finish() (Plan, error) {
	p.Steps = timeline(p)
	if p.Input.KeepLonger != (Bounds{}) {
		in := p.Input
		in.KeepLonger = Bounds{}
		sufficient, err := Recommend(in)
		if err != nil {
			return Plan{}, err
		}
		p.keep(sufficient)
	}
	if w := longGraceWarning(p); w != "" {
		p.Attention = append(p.Attention, w)
	}
	p.Warnings = append(p.Warnings, p.Attention...)
	return p, nil
}

// keep records what the plan kept from the workload (Input.KeepLonger) rather than the
// values of the sufficient plan, and says so in Attention: the grace period with what
// follows from it, and each sidecar bound the workload has longer still.
func (p *Plan) keep(sufficient Plan) {
	type setting struct {
		name            string
		value, suffices time.Duration
		// own: the value is the workload's, longer than what the plan's grace period needs;
		// otherwise it follows from that grace period.
		own bool
	}
	settings := []setting{
		{"terminationDrainDuration", p.TerminationDrainDuration, sufficient.TerminationDrainDuration, p.TerminationDrainDuration > p.sufficientTerminationDrain()},
		{"MINIMUM_DRAIN_DURATION", p.MinimumDrainDuration, sufficient.MinimumDrainDuration, p.MinimumDrainDuration > ceilSecond(p.Deadline)},
		{"proxy-wait-before-exit-seconds", p.WaitBeforeExit, sufficient.WaitBeforeExit, p.WaitBeforeExit > ceilSecond(p.AppExitWorst)},
		// plan never lowers drainDuration: it is only ever raised, to follow the app's exit.
		{"drainDuration", max(p.DrainDuration, p.Input.DrainDuration), max(sufficient.DrainDuration, p.Input.DrainDuration), false},
	}
	if p.GracePeriod > sufficient.GracePeriod {
		k := Kept{"terminationGracePeriodSeconds", p.GracePeriod, sufficient.GracePeriod}
		p.Kept = append(p.Kept, k)
		follow := []string{fmt.Sprintf("meshdrain's deadline %s", fmtD(p.Deadline))}
		for _, st := range settings {
			if !st.own && st.value > st.suffices && (st.suffices > 0 || st.name == "drainDuration") {
				follow = append(follow, fmt.Sprintf("%s %s (%s would do)", st.name, fmtD(st.value), fmtD(st.suffices)))
			}
		}
		p.Attention = append(p.Attention, k.String()+fmt.Sprintf(
			" (meshdrain still returns as soon as the clients stop; what the plan derives follows the kept grace period: %s)", strings.Join(follow, ", ")))
	}
	for _, st := range settings {
		if st.own && st.value > st.suffices && st.suffices > 0 {
			k := Kept{st.name, st.value, st.suffices}
			p.Kept = append(p.Kept, k)
			p.Attention = append(p.Attention, k.String())
		}
	}
}

// quietWindow is the --quiet the plan gives meshdrain: the operator's, or longer when the
// clients are known to pause longer (a sparse rate per client, a schedule), with the reason
// when it is longer.
func quietWindow(in Input) (time.Duration, string) {
	quiet, why := in.Quiet, ""
	if in.RPSPerClient > 0 {
		if q := roundUp(drain.PoissonQuiet(in.RPSPerClient), 100*time.Millisecond); q > quiet {
			quiet = q
			why = fmt.Sprintf("−ln(%g) / %g requests a second per client, rounded up: the pause one client's Poisson arrivals exceed once in %.0f (quiet %s is shorter)",
				drain.Risk, in.RPSPerClient, 1/drain.Risk, fmtD(in.Quiet))
		}
	}
	if in.ClientPeriod > 0 {
		if q := in.ClientPeriod + in.Poll; q > quiet {
			quiet = q
			why = fmt.Sprintf("client period %s + poll %s: a client that sends every %s is never silent for a whole window while it still sends",
				fmtD(in.ClientPeriod), fmtD(in.Poll), fmtD(in.ClientPeriod))
		}
	}
	return quiet, why
}

// expectedFinishWhy is the arithmetic of ExpectedFinish.
func expectedFinishWhy(p Plan, lag time.Duration) string {
	in := p.Input
	sum := fmt.Sprintf("eds-lag %s + max(quiet %s, p99 %s)", fmtD(lag), fmtD(p.Quiet), fmtD(in.P99))
	if in.MinWait > lag+max(p.Quiet, in.P99) {
		sum = fmt.Sprintf("min-wait %s (> %s)", fmtD(in.MinWait), sum)
	}
	return sum + fmt.Sprintf(" + poll %s", fmtD(in.Poll))
}

// usualFinish is when meshdrain returns in the usual rollout: the typical last client with a
// lag distribution, the expected finish otherwise.
func (p Plan) usualFinish() time.Duration {
	if p.TypicalFinish > 0 {
		return p.TypicalFinish
	}
	return p.ExpectedFinish
}

// ceilSecond rounds d up to a whole second, because terminationGracePeriodSeconds is an
// integer and whole-second settings are easier to read in manifests.
func ceilSecond(d time.Duration) time.Duration {
	if r := d % time.Second; r != 0 {
		return d - r + time.Second
	}
	return d
}

// fmtD prints a duration the way the flags take it, without Go's "1m0s" for whole minutes.
func fmtD(d time.Duration) string {
	switch {
	case d == 0:
		return "0s"
	case d%time.Second == 0:
		return fmt.Sprintf("%ds", d/time.Second)
	case d < time.Second && d%time.Millisecond == 0:
		return fmt.Sprintf("%dms", d/time.Millisecond)
	default:
		return d.Round(time.Millisecond).String()
	}
}

// FormatDuration prints d as the flags and manifests take it ("12s", "450ms", "9.2s").
func FormatDuration(d time.Duration) string { return fmtD(d) }

// prestopTiming is the timing of the preStop PrestopArgs writes, as prestop will read it.
func (p Plan) prestopTiming() drain.Timing {
	return drain.Timing{GracePeriod: p.GracePeriod, AppDrain: p.AppDrain, Quiet: p.Quiet, Poll: p.Poll,
		MinWait: p.Input.MinWait, MinWaitSet: p.Input.MinWait != drain.DefaultMinWait, ClientPeriod: p.Input.ClientPeriod}
}

// PrestopRefusal is plan's answer when the preStop it would write breaks one of prestop's
// rules: the problems are prestop's own, word for word, and Plan is the plan as far as it
// was worked out (PrestopArgs is what it would have written).
type PrestopRefusal struct {
	Plan     Plan
	Problems []error
}

func (r *PrestopRefusal) Error() string {
	return fmt.Sprintf("prestop would refuse this plan's preStop: %v", errors.Join(r.Problems...))
}

// Unwrap returns the problems.
func (r *PrestopRefusal) Unwrap() []error { return r.Problems }
