package podsim

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/meshdrain/meshdrain/pkg/mesh"
)

// Result is one strategy under one sidecar configuration. Times are in pod time (seconds
// from t0, the pod's deletion), whatever the time scale.
type Result struct {
	Strategy string `json:"strategy"`
	Sidecar  string `json:"sidecar"`
	// DrainRegime says who drained the sidecar, and when: at the deletion (regime a), or
	// deferred until meshdrain decides (regime b).
	DrainRegime string `json:"drain_regime,omitempty"`
	// Requests is how many requests the clients sent to this pod (first attempts); requests a
	// client sends after learning that the pod is gone go to other replicas and are not here.
	Requests int `json:"requests"`
	// Sidecar5xx is the pod sidecar's access-log lines with UF or UC: the 503s the user sees
	// in the server-side access log.
	Sidecar5xx int `json:"sidecar_5xx"`
	SidecarUF  int `json:"sidecar_uf"`
	SidecarUC  int `json:"sidecar_uc"`
	// Retried is how many requests failed on this pod and succeeded on another replica.
	Retried int `json:"retried"`
	// ClientFailures is what the calling applications saw fail, after retries.
	ClientFailures int            `json:"client_failures"`
	FailuresByKind map[string]int `json:"failures_by_kind,omitempty"`
	// FirstFailureS and LastFailureS bound when the client failures happened.
	FirstFailureS *float64 `json:"first_failure_s,omitempty"`
	LastFailureS  *float64 `json:"last_failure_s,omitempty"`
	// AppStopS is when the app got SIGTERM (its preStop returned).
	AppStopS    float64 `json:"app_stop_s"`
	AppExitS    float64 `json:"app_exit_s"`
	SidecarExit float64 `json:"sidecar_exit_s"`
	// PodGoneS is when the last container had exited.
	PodGoneS float64 `json:"pod_gone_s"`
	// LastClientLagS is when the last client stopped sending to the pod: the floor under
	// which no preStop can stop the app without losing a request.
	LastClientLagS float64 `json:"last_client_lag_s"`
	// LastRequestS is when the last request planned for the pod is sent, and LongestGapS the
	// traffic's own longest pause between two requests to the pod (warm-up included).
	LastRequestS float64 `json:"last_request_s"`
	LongestGapS  float64 `json:"longest_gap_s"`
	// Killed says whether anything was SIGKILLed: Envoy by pilot-agent at the end of
	// terminationDrainDuration, or any container by the kubelet at the grace period (both at
	// once where terminationDrainDuration is the grace period, as plan sets it).
	Killed       bool     `json:"killed"`
	KilledDetail []string `json:"killed_detail,omitempty"`
	// GracePeriodS is the grace period the run used.
	GracePeriodS float64 `json:"grace_period_s"`
	// LagBoundS is meshdrain's --eds-lag-bound, for the meshdrain strategy run with one: the
	// plan's time by which the last client has learnt, past which the hook needs only a quiet
	// window, which is what explains a wait that ends after it.
	LagBoundS float64 `json:"lag_bound_s,omitempty"`
	// Meshdrain is meshdrain's final event, for the meshdrain strategy.
	Meshdrain *MeshdrainEvent `json:"meshdrain,omitempty"`
	// Lateness is how late the run's actors ran, where the run measures it.
	Lateness Lateness `json:"lateness,omitzero"`
	// Warnings say where this machine was too busy to keep the scenario's timing: an actor
	// that ran late by more than lateTolerance of pod time.
	Warnings []string `json:"warnings,omitempty"`
	// Hold is meshdrain hold's final event, where istio-proxy's preStop runs it (regime b as
	// plan writes it); HoldError why that hook failed, if it did.
	Hold      *HoldEvent `json:"hold,omitempty"`
	HoldError string     `json:"hold_error,omitempty"`
	// PreStopError is why the preStop hook failed, if it did.
	PreStopError string  `json:"prestop_error,omitempty"`
	Timeline     []Event `json:"timeline"`
}

// Event is one line of a run's timeline.
type Event struct {
	AtS  float64 `json:"at_s"`
	Who  string  `json:"who"`
	What string  `json:"what"`
}

// Options are the runs to make.
type Options struct {
	Scenario   Scenario
	Strategies []Strategy
	Sidecars   []SidecarSpec
	// Progress, if set, is called with each result as soon as its run is over.
	Progress func(Result)

	startSidecar startSidecarFunc // nil: the envoysim emulator
}

// Run replays every strategy under every sidecar configuration and returns the results in
// that order (sidecar-major). Runs overlap only in their tails: a run starts once the
// previous run's clients have stopped sending, so no two runs' traffic competes for the CPU
// while the time that is only waiting (pilot-agent's timer, the grace period) is shared.
func Run(ctx context.Context, opts Options) ([]Result, error) {
	start, err := opts.check()
	if err != nil {
		return nil, err
	}
	var runs []runSpec
	for _, spec := range opts.Sidecars {
		for _, strat := range opts.Strategies {
			runs = append(runs, runSpec{strat, spec})
		}
	}
	if len(runs) == 0 {
		return nil, errors.New("nothing to run: no strategy or no sidecar")
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	outcomes := startRuns(ctx, cancel, opts.Scenario, runs, start)
	var out []Result
	var errs []error
	for i := range runs {
		o := <-outcomes[i]
		if o.err != nil {
			errs = append(errs, o.err)
			continue
		}
		if opts.Progress != nil {
			opts.Progress(o.res)
		}
		out = append(out, o.res)
	}
	if len(errs) > 0 {
		return out, errors.Join(errs...)
	}
	return out, nil
}

// check refuses runs that cannot be made, and returns how each run starts its sidecar.
func (opts Options) check() (startSidecarFunc, error) {
	sc := opts.Scenario
	if err := sc.Validate(); err != nil {
		return nil, err
	}
	start := opts.startSidecar
	switch {
	case start != nil:
	case sc.meshless():
		start = startNoSidecar
	default:
		start = startSidecarFor
	}
	for _, spec := range opts.Sidecars {
		if meshOf(spec.Mesh) != meshOf(sc.Mesh) {
			return nil, fmt.Errorf("sidecar %s is for mesh %s, the scenario's mesh is %s", spec.Name, meshOf(spec.Mesh), meshOf(sc.Mesh))
		}
	}
	for _, strat := range opts.Strategies {
		if sc.meshless() && strat.Kind == StrategyOracle {
			// The oracle waits for the last request planned for the pod; a keep-alive
			// client's requests reach it for as long as the app keeps its connections.
			return nil, errors.New("the oracle strategy needs a mesh: without a sidecar, which requests reach the pod depends on the strategy")
		}
	}
	return start, nil
}

// runSpec is what one run replays: a strategy under a sidecar configuration.
type runSpec struct {
	strat Strategy
	spec  SidecarSpec
}

// runOutcome is what one run returns.
type runOutcome struct {
	res Result
	err error
}

// startRuns starts each run once the previous one's traffic is over and, when the last has
// started, returns where each run's outcome arrives, in the runs' order. A run that fails
// cancels the others.
func startRuns(ctx context.Context, cancel context.CancelFunc, sc Scenario, runs []runSpec, start startSidecarFunc) []chan runOutcome {
	plans := planClients(sc)
	outcomes := make([]chan runOutcome, len(runs))
	next := make(chan struct{}, 1)
	next <- struct{}{}
	for i, run := range runs {
		outcomes[i] = make(chan runOutcome, 1)
		select {
		case <-next:
		case <-ctx.Done():
			outcomes[i] <- runOutcome{err: ctx.Err()}
			continue
		}
		go func(i int, run runSpec) {
			var once sync.Once
			trafficOver := func() { once.Do(func() { next <- struct{}{} }) }
			runOver := trafficOver
			if sc.meshless() {
				// Without a sidecar the hook reads the namespace's kernel counters: the next
				// run's listener and traffic would be accepts it cannot name. One at a time.
				trafficOver = func() {}
			}
			res, err := runPod(ctx, sc, plans, run.strat, run.spec, start, trafficOver)
			runOver()
			if err != nil {
				err = fmt.Errorf("%s with sidecar %s: %w", run.strat, run.spec.Name, err)
				cancel()
			}
			outcomes[i] <- runOutcome{res, err}
		}(i, run)
	}
	return outcomes
}

// podClock converts real instants into pod seconds from t0.
type podClock struct {
	t0    time.Time
	scale float64
}

func (c podClock) at(t time.Time) float64 {
	return roundS(t.Sub(c.t0).Seconds() / c.scale)
}

// roundS rounds to hundredths; adding +0 turns a -0 (an event a hair before t0) into 0.
func roundS(s float64) float64 { return math.Round(s*100)/100 + 0 }

// meshOf names a mesh, the empty one included.
func meshOf(m mesh.Mesh) mesh.Mesh {
	if m == "" {
		return mesh.Istio
	}
	return m
}

// lateTolerance is how late, in pod time, an actor of the scenario may run before the result
// is flagged: at a small time scale a busy machine (other processes, the run's own traffic)
// stretches pod time, and a result built on a late actor must say so rather than pass as
// the strategy's effect.
const lateTolerance = 0.25

// Lateness is how late the run's actors ran, in pod seconds, as far as the run measures them
// (timingWarnings flags what exceeds lateTolerance): a claim about the run's timing can allow
// for it, and one about a run that did not keep pod time must.
type Lateness struct {
	// ClientSendS is the latest a client sent a request after the time its plan gave it
	// (ClientSendPlannedS); ClientEDSUpdateS the latest a client applied its EDS update after
	// its lag (ClientEDSUpdatePlannedS). From the deletion on.
	ClientSendS             float64 `json:"client_send_s"`
	ClientSendPlannedS      float64 `json:"client_send_planned_s"`
	ClientEDSUpdateS        float64 `json:"client_eds_update_s"`
	ClientEDSUpdatePlannedS float64 `json:"client_eds_update_planned_s"`
	// AgentDrainS is when pilot-agent's drain call at the deletion was answered (it is due
	// at once), AgentDrainError why it failed: pilot-agent goes on without its drain, and the
	// sidecar then does not drain as the scenario says. Neither where nothing drains the
	// sidecar at the deletion.
	AgentDrainS     *float64 `json:"agent_drain_s,omitempty"`
	AgentDrainError string   `json:"agent_drain_error,omitempty"`
	// MeshdrainProcessS is the pod time meshdrain's process took beyond its own clock, which
	// starts in its main function and stops at its final event: its exec, start-up and exit.
	// MeshdrainPollS is how much further apart than --poll its polls came on average while it
	// waited for the clients (whatever ended the wait but the sidecar going away, after which
	// it holds --min-wait without polling). MeshdrainAdminTimeouts counts its admin requests
	// that timed out: the emulated sidecar, in the simulator's process, did not answer within
	// --connect-timeout.
	MeshdrainProcessS float64 `json:"meshdrain_process_s,omitempty"`
	// HoldProcessS is the same for meshdrain hold, the proxy's preStop: the pod time from the
	// deletion to its return beyond its own clock. The proxy's SIGTERM, and so the pod's end,
	// waits for it.
	HoldProcessS           float64 `json:"hold_process_s,omitempty"`
	MeshdrainPollS         float64 `json:"meshdrain_poll_s,omitempty"`
	MeshdrainAdminTimeouts int     `json:"meshdrain_admin_timeouts,omitempty"`
}

// observedTiming is what a run measured of its actors' own timing, in real time: the
// clients' worst lateness against their plans, when pilot-agent's drain call at the deletion
// was answered (or why it failed), and meshdrain's admin requests that timed out.
type observedTiming struct {
	lateSend, lateRemoval clientLateness
	// agentDrainS is when pilot-agent's drain call was answered, in pod time; agentDrainErr
	// why it failed; agentDrained whether a drain call at the deletion was answered.
	agentDrainS   float64
	agentDrainErr error
	agentDrained  bool
	adminTimeouts int
}

// lateness turns what the run observed, and meshdrain's final event, into pod seconds.
func lateness(res Result, sc Scenario, seen observedTiming) Lateness {
	l := Lateness{
		ClientSendS: roundS(seen.lateSend.by.Seconds() / sc.TimeScale), ClientSendPlannedS: roundS(seen.lateSend.plannedS),
		ClientEDSUpdateS: roundS(seen.lateRemoval.by.Seconds() / sc.TimeScale), ClientEDSUpdatePlannedS: roundS(seen.lateRemoval.plannedS),
		MeshdrainAdminTimeouts: seen.adminTimeouts,
	}
	switch {
	case seen.agentDrainErr != nil:
		l.AgentDrainError = seen.agentDrainErr.Error()
	case seen.agentDrained:
		l.AgentDrainS = &seen.agentDrainS
	}
	if h := res.Hold; h != nil && h.ReturnedS > 0 && res.HoldError == "" {
		l.HoldProcessS = roundS(max(h.ReturnedS-h.ElapsedPodS, 0))
	}
	if ev := res.Meshdrain; ev != nil && res.PreStopError == "" {
		l.MeshdrainProcessS = roundS(max(res.AppStopS-ev.ElapsedPodS, 0))
		switch polls, _ := ev.Raw["polls"].(float64); ev.Reason {
		case "quiet", "quiet-streams", "deadline":
			if polls > 0 {
				l.MeshdrainPollS = roundS(max(ev.ElapsedPodS/polls-sc.Poll.Seconds(), 0))
			}
		}
	}
	return l
}

// timingWarnings compares the moments fixed by the scenario with when they happened, for
// every actor whose timing a claim rests on: the kubelet's and pilot-agent's timers, the
// sleep, pilot-agent's drain at the deletion, the clients' sends and EDS updates, and
// meshdrain's process (its start and exit, its polls, its admin requests). Each is a way a
// busy machine makes a run other than its scenario.
func timingWarnings(res Result, strat Strategy, spec SidecarSpec, poll time.Duration) []string {
	var w []string
	const busy = "this machine was too busy to keep pod time; rerun, or raise --time-scale"
	late := func(what string, want, got float64) {
		if got-want > lateTolerance {
			w = append(w, fmt.Sprintf("%s at %.2fs instead of %.2fs: %s", what, got, want, busy))
		}
	}
	// Behind a hold, pilot-agent's timer starts only at the SIGTERM hold's return brings.
	if spec.Mesh != mesh.Linkerd && spec.Mode == SidecarClassic && !spec.holds() && res.SidecarExit > 0 && res.SidecarExit < res.GracePeriodS {
		late("pilot-agent killed Envoy", spec.TerminationDrainDuration.Seconds(), res.SidecarExit)
	}
	if strat.Kind == StrategySleep && strat.Sleep.Seconds() < res.GracePeriodS {
		late("sleep returned", strat.Sleep.Seconds(), res.AppStopS)
	}
	if strat.Kind == StrategyNone {
		late("the app got SIGTERM", 0, res.AppStopS)
	}
	l := res.Lateness
	if l.AgentDrainError != "" {
		w = append(w, fmt.Sprintf("pilot-agent's drain call at the deletion failed (%s), so the sidecar did not drain as the scenario says: %s", l.AgentDrainError, busy))
	}
	if l.AgentDrainS != nil {
		late("pilot-agent's drain call was answered", 0, *l.AgentDrainS)
	}
	late("a client sent a request", l.ClientSendPlannedS, l.ClientSendPlannedS+l.ClientSendS)
	late("a client applied its EDS update", l.ClientEDSUpdatePlannedS, l.ClientEDSUpdatePlannedS+l.ClientEDSUpdateS)
	if l.MeshdrainProcessS > lateTolerance {
		w = append(w, fmt.Sprintf("meshdrain's process took %.2fs beyond its own clock (exec, start-up, exit): %s", l.MeshdrainProcessS, busy))
	}
	if l.HoldProcessS > lateTolerance {
		w = append(w, fmt.Sprintf("meshdrain hold's process took %.2fs beyond its own clock (exec, start-up, exit): %s", l.HoldProcessS, busy))
	}
	if l.MeshdrainPollS > lateTolerance {
		w = append(w, fmt.Sprintf("meshdrain polled every %.2fs on average instead of %.2fs: %s", poll.Seconds()+l.MeshdrainPollS, poll.Seconds(), busy))
	}
	if l.MeshdrainAdminTimeouts > 0 {
		w = append(w, fmt.Sprintf("meshdrain's admin requests timed out %d times (the emulated sidecar did not answer within --connect-timeout): %s", l.MeshdrainAdminTimeouts, busy))
	}
	return w
}
