package drain

import (
	"fmt"
	"time"
)

// The hook's defaults, defined once: prestop's flags, plan (which writes only what differs
// from them) and the simulator's recommended sidecar all read them here. A default written
// twice drifts, and then plan writes a preStop that prestop refuses.
const (
	DefaultGracePeriod      = 30 * time.Second // Kubernetes' terminationGracePeriodSeconds default
	DefaultAppDrain         = 5 * time.Second
	DefaultQuiet            = time.Second
	DefaultPoll             = 200 * time.Millisecond
	DefaultConnectTimeout   = 2 * time.Second
	DefaultLatencyAllowance = time.Second
	DefaultFallbackWait     = 5 * time.Second

	// MinPoll: faster polling only loads Envoy's main thread, which admin shares with xDS
	// and stats flushing, without seeing clients leave any sooner.
	MinPoll = 20 * time.Millisecond
	// MinQuietPolls: with fewer polls per quiet window one poll cannot tell a pause in the
	// traffic from its end.
	MinQuietPolls = 2
)

// HookDeadline is the latest the hook may return: the deadline given, or the grace period
// less the app's own drain and KillMargin (DefaultDeadline). The fail-safe hold is capped by
// the same bound, so a broken configuration never holds the app longer than a working one.
func HookDeadline(gracePeriod, appDrain, deadline time.Duration) time.Duration {
	if deadline > 0 {
		return deadline
	}
	return DefaultDeadline(gracePeriod, appDrain)
}

// Timing is the timing part of a hook's configuration: what prestop checks at start, and what
// plan checks before it writes a preStop, with the same messages, so that what plan writes
// prestop accepts and what prestop refuses plan refuses too.
type Timing struct {
	GracePeriod, AppDrain time.Duration
	// Deadline is --deadline; zero derives it (HookDeadline).
	Deadline     time.Duration
	Quiet, Poll  time.Duration
	MinWait      time.Duration
	ClientPeriod time.Duration
	// SettledQuiet is --settled-quiet; zero derives it (SettledQuiet).
	SettledQuiet time.Duration
	// MinWaitSet: --min-wait was given; a default beyond a short deadline is cut to it
	// instead (prestop warns).
	MinWaitSet bool
}

// Problems are every constraint the timing breaks, each naming its flag.
func (t Timing) Problems() []error {
	problems := DeadlineProblems(t.GracePeriod, t.AppDrain, t.Deadline)
	add := func(format string, args ...any) { problems = append(problems, fmt.Errorf(format, args...)) }
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{{"--quiet", t.Quiet}, {"--poll", t.Poll}} {
		if d.v <= 0 {
			add("%s must be positive, got %v", d.flag, d.v)
		}
	}
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{{"--min-wait", t.MinWait}, {"--client-period", t.ClientPeriod}} {
		if d.v < 0 {
			add("%s must not be negative, got %v", d.flag, d.v)
		}
	}
	deadline := HookDeadline(t.GracePeriod, t.AppDrain, t.Deadline)
	if t.Poll > 0 && t.Poll < MinPoll {
		add("--poll %v is below %v: polling faster only loads Envoy's main thread (admin shares it with xDS and stats) without seeing clients leave sooner", t.Poll, MinPoll)
	}
	if t.Poll > 0 && t.Quiet > 0 && t.Quiet < MinQuietPolls*t.Poll {
		add("--quiet %v is shorter than two polls (2 x --poll %v): one poll cannot tell a pause in the traffic from its end", t.Quiet, t.Poll)
	}
	if t.SettledQuiet < 0 {
		add("--settled-quiet must not be negative, got %v", t.SettledQuiet)
	}
	if t.SettledQuiet > 0 && t.Poll > 0 && t.SettledQuiet < MinQuietPolls*t.Poll {
		add("--settled-quiet %v is shorter than two polls (2 x --poll %v)", t.SettledQuiet, t.Poll)
	}
	if t.ClientPeriod > 0 && t.Poll > 0 && t.Quiet < t.ClientPeriod+t.Poll {
		add("--quiet %v is shorter than --client-period %v + --poll %v: a client keeping that schedule could look silent for a whole window while it still sends", t.Quiet, t.ClientPeriod, t.Poll)
	}
	if deadline > 0 {
		if t.Quiet >= deadline {
			add("--quiet %v is not shorter than the deadline %v: the quiet window could never pass, every drain would end at the deadline", t.Quiet, deadline)
		}
		if t.MinWait > deadline && t.MinWaitSet {
			add("--min-wait %v is beyond the deadline %v", t.MinWait, deadline)
		}
	}
	return problems
}

// DeadlineProblems are the constraints on --grace-period, --app-drain and --deadline alone
// (deadline zero: derived), each naming its flag: what prestop checks (Timing.Problems), and
// what `meshdrain hold`, which must end by the same hook deadline plus the app's drain,
// checks of the same flags.
func DeadlineProblems(gracePeriod, appDrain, deadline time.Duration) []error {
	var problems []error
	add := func(format string, args ...any) { problems = append(problems, fmt.Errorf(format, args...)) }
	if gracePeriod <= 0 {
		add("--grace-period must be positive, got %v", gracePeriod)
	}
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{{"--app-drain", appDrain}, {"--deadline", deadline}} {
		if d.v < 0 {
			add("%s must not be negative, got %v", d.flag, d.v)
		}
	}
	switch {
	case deadline == 0 && HookDeadline(gracePeriod, appDrain, 0) <= 0 && gracePeriod > 0:
		add("--grace-period %v leaves no time to wait after --app-drain %v and %v of margin; raise the grace period or set --deadline", gracePeriod, appDrain, KillMargin)
	case deadline > gracePeriod:
		add("--deadline %v must be positive and within --grace-period %v", deadline, gracePeriod)
	}
	return problems
}

// SettledQuiet is the silence asked for once no client may still be on its way: the one
// given, or the ordinary quiet window, at least two polls.
func SettledQuiet(given, poll time.Duration) time.Duration {
	if given > 0 {
		return given
	}
	return max(DefaultQuiet, MinQuietPolls*poll)
}

// KillMargin is the time kept between the app's latest possible exit and the kubelet's
// SIGKILL at the end of the grace period.
const KillMargin = time.Second

// DefaultDeadline is prestop's deadline when none is given: the grace period less the app's
// own drain and KillMargin, so that an app told to stop at the deadline still finishes its
// in-flight work before the kubelet's SIGKILL. Zero or less means the grace period is too
// short for that.
func DefaultDeadline(gracePeriod, appDrain time.Duration) time.Duration {
	return gracePeriod - appDrain - KillMargin
}
