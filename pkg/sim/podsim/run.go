package podsim

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"sync"
	"time"

	"github.com/meshdrain/meshdrain/pkg/mesh"
)

// Result is one strategy under one sidecar configuration. Times are in pod time (seconds
// from t0, the pod's deletion), whatever the time scale.
type Result struct {
	Strategy string `json:"strategy"`
	Sidecar  string `json:"sidecar"`
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
	// terminationDrainDuration, or any container by the kubelet at the grace period.
	Killed       bool     `json:"killed"`
	KilledDetail []string `json:"killed_detail,omitempty"`
	// GracePeriodS is the grace period the run used.
	GracePeriodS float64 `json:"grace_period_s"`
	// Meshdrain is meshdrain's final event, for the meshdrain strategy.
	Meshdrain *MeshdrainEvent `json:"meshdrain,omitempty"`
	// Warnings say where this machine was too busy to keep the scenario's timing: a timer
	// that fired late by more than lateTolerance of pod time.
	Warnings []string `json:"warnings,omitempty"`
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
	sc := opts.Scenario
	if err := sc.Validate(); err != nil {
		return nil, err
	}
	start := opts.startSidecar
	if start == nil {
		start = startSidecarFor
	}
	for _, spec := range opts.Sidecars {
		if (spec.Mesh == mesh.Linkerd) != sc.linkerd() {
			return nil, fmt.Errorf("sidecar %s is for mesh %s, the scenario's mesh is %s", spec.Name, meshOf(spec.Mesh), meshOf(sc.Mesh))
		}
	}
	type job struct {
		strat Strategy
		spec  SidecarSpec
	}
	var jobs []job
	for _, spec := range opts.Sidecars {
		for _, strat := range opts.Strategies {
			jobs = append(jobs, job{strat, spec})
		}
	}
	if len(jobs) == 0 {
		return nil, errors.New("nothing to run: no strategy or no sidecar")
	}
	plans := planClients(sc)

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type outcome struct {
		res Result
		err error
	}
	results := make([]chan outcome, len(jobs))
	next := make(chan struct{}, 1)
	next <- struct{}{}
	for i, j := range jobs {
		results[i] = make(chan outcome, 1)
		select {
		case <-next:
		case <-ctx.Done():
			results[i] <- outcome{err: ctx.Err()}
			continue
		}
		go func(i int, j job) {
			var once sync.Once
			trafficOver := func() { once.Do(func() { next <- struct{}{} }) }
			res, err := runPod(ctx, sc, plans, j.strat, j.spec, start, trafficOver)
			trafficOver()
			if err != nil {
				err = fmt.Errorf("%s with sidecar %s: %w", j.strat, j.spec.Name, err)
				cancel()
			}
			results[i] <- outcome{res, err}
		}(i, j)
	}
	var out []Result
	var errs []error
	for i := range jobs {
		o := <-results[i]
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

// runPod is the kubelet for one pod deletion: it starts the pod and its clients, deletes
// the pod at t0, and applies Kubernetes' termination order until every container is gone.
func runPod(ctx context.Context, sc Scenario, plans []clientPlan, strat Strategy, spec SidecarSpec,
	startSidecar startSidecarFunc, trafficOver func()) (Result, error) {
	grace := sc.grace(spec)
	longest, last := trafficPauses(plans)
	res := Result{Strategy: strat.String(), Sidecar: spec.Name, GracePeriodS: grace.Seconds(),
		LastClientLagS: roundS(lastLag(plans).Seconds()), LastRequestS: roundS((last - sc.Warmup).Seconds()),
		LongestGapS: roundS(longest.Seconds())}

	other, err := startOtherReplicas(sc.TimeScale)
	if err != nil {
		return res, fmt.Errorf("other replicas: %w", err)
	}
	defer other.Close()
	a, err := startApp(sc.Threads, sc.TimeScale, sc.AppShutdown)
	if err != nil {
		return res, fmt.Errorf("app: %w", err)
	}
	defer a.Kill()
	side, err := startSidecar(sc, spec, strat, a.Addr())
	if err != nil {
		return res, fmt.Errorf("sidecar: %w", err)
	}
	defer func() { _ = side.Close() }()

	clients := newFleet(sc, plans, side.InboundAddr(sc.Port), other.Addr())
	runCtx, stopClients := context.WithCancel(ctx)
	defer stopClients()
	begin := time.Now()
	clients.start(runCtx, begin)
	clientsDone := make(chan struct{})
	go func() {
		clients.wait()
		close(clientsDone)
		trafficOver()
	}()
	clock := podClock{t0: begin.Add(sc.scale(sc.Warmup)), scale: sc.TimeScale}
	log := func(at time.Time, who, what string, args ...any) {
		res.Timeline = append(res.Timeline, Event{AtS: clock.at(at), Who: who, What: fmt.Sprintf(what, args...)})
	}

	if err := sleepUntil(ctx, clock.t0); err != nil {
		return res, err
	}

	// t0: the pod is deleted.
	now := time.Now()
	log(now, "kubelet", "pod deleted: endpoint removal starts (clients learn within %.2fs); preStop %s starts", lastLag(plans).Seconds(), strat)
	side.Terminate()
	proxy := proxyName(spec)
	switch {
	case spec.Mesh == mesh.Linkerd && spec.Mode == SidecarNative:
		log(now, proxy, "native sidecar: no preStop, keeps serving until the app has exited (Linkerd has no drain call)")
	case spec.Mesh == mesh.Linkerd && spec.WaitBeforeExit > 0:
		log(now, proxy, "preStop: sleep %s (proxy-wait-before-exit-seconds), serving meanwhile", fmtD(spec.WaitBeforeExit))
	case spec.Mesh == mesh.Linkerd:
		log(now, proxy, "SIGTERM: stops accepting in both directions, finishes the requests in hand")
	case spec.Mode == SidecarNative:
		log(now, "istio-proxy", "native sidecar preStop: drain inbound listeners; Envoy stays until the app has exited")
	case spec.Mode == SidecarExitOnZero:
		log(now, "istio-proxy", "SIGTERM: pilot-agent drains inbound listeners, exits on zero connections after %s", fmtD(spec.MinDrainDuration))
	default:
		log(now, "istio-proxy", "SIGTERM: pilot-agent drains inbound listeners, will SIGKILL Envoy at %s", fmtD(spec.TerminationDrainDuration))
	}
	hook, err := startPreStop(ctx, sc, spec, strat, side.AdminURL(), clients.LastAnswered())
	if err != nil {
		return res, err
	}
	defer hook.kill()
	graceTimer := time.NewTimer(sc.scale(grace))
	defer graceTimer.Stop()

	hookDone, appDone, sideDone := hook.done, a.Done(), side.Done()
	appStopped, appExited, sideExited, graceOver := false, false, false, false
	for !(appExited && sideExited) {
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-hookDone:
			hookDone = nil
			now := time.Now()
			if hook.event != nil {
				res.Meshdrain = hook.event
				log(now, "meshdrain", "drain finished: reason=%s after %.2fs, exit %d", hook.event.Reason, hook.event.ElapsedPodS, hook.event.ExitCode)
			}
			if hook.err != nil {
				res.PreStopError = hook.err.Error()
			}
			if appExited {
				continue // killed at the grace period with the container
			}
			a.Terminate()
			appStopped = true
			res.AppStopS = clock.at(now)
			log(now, "kubelet", "preStop returned: SIGTERM to the app (%s shutdown)", sc.AppShutdown)
		case <-appDone:
			appDone = nil
			appExited = true
			res.AppExitS = clock.at(a.ExitedAt())
			log(a.ExitedAt(), "app", "exited")
			if spec.Mode == SidecarNative && !sideExited {
				side.AppExited()
				log(time.Now(), "kubelet", "app exited: SIGTERM to the native sidecar, %s exits", proxy)
			}
		case <-sideDone:
			sideDone = nil
			sideExited = true
			now := time.Now()
			res.SidecarExit = clock.at(now)
			switch {
			case spec.Mesh != mesh.Linkerd && spec.Mode == SidecarClassic && !graceOver:
				res.Killed = true
				res.KilledDetail = append(res.KilledDetail, fmt.Sprintf("envoy by pilot-agent at %.1fs", clock.at(now)))
				log(now, "pilot-agent", "terminationDrainDuration over: SIGKILL to Envoy")
			case spec.Mesh == mesh.Linkerd:
				log(now, proxy, "proxy exited (%s)", side.ExitReason())
			default:
				log(now, proxy, "Envoy exited (%s)", side.ExitReason())
			}
		case <-graceTimer.C:
			graceOver = true
			now := time.Now()
			res.Killed = true
			log(now, "kubelet", "grace period %s over: SIGKILL", fmtD(grace))
			hook.kill()
			if !appExited {
				a.Kill()
				res.KilledDetail = append(res.KilledDetail, fmt.Sprintf("app by kubelet at %.1fs", clock.at(now)))
			}
			if !sideExited {
				side.Kill()
				res.KilledDetail = append(res.KilledDetail, fmt.Sprintf("%s by kubelet at %.1fs", proxy, clock.at(now)))
			}
		}
	}
	if !appStopped && res.AppStopS == 0 {
		res.AppStopS = res.AppExitS
	}
	podGone := time.Now()
	res.PodGoneS = clock.at(podGone)
	log(podGone, "kubelet", "pod gone")
	if hookDone != nil {
		hook.kill()
		<-hookDone
	}

	// The clients keep going until each has learned that the pod is gone; what they send
	// after the pod is gone meets refused connections.
	select {
	case <-clientsDone:
	case <-ctx.Done():
		return res, ctx.Err()
	}

	tally := clients.tally()
	res.Requests = tally.requests
	res.ClientFailures, res.FailuresByKind = tally.failures()
	res.Retried = tally.outcomes[outcomeRetriedRefused] + tally.outcomes[outcomeRetried503]
	if len(tally.failedAt) > 0 {
		first, last := clock.at(tally.failedAt[0]), clock.at(tally.failedAt[len(tally.failedAt)-1])
		res.FirstFailureS, res.LastFailureS = &first, &last
		log(tally.failedAt[0], "clients", "%d client-visible failures between %.2fs and %.2fs", res.ClientFailures, first, last)
	}
	for _, e := range side.Errors() {
		res.Sidecar5xx++
		switch {
		case containsFlag(e.Flags, "UF"):
			res.SidecarUF++
		case containsFlag(e.Flags, "UC"):
			res.SidecarUC++
		}
	}
	if errs := side.Errors(); len(errs) > 0 {
		log(errs[0].At, proxy, "%d sidecar 5xx (UF %d, UC %d) between %.2fs and %.2fs",
			res.Sidecar5xx, res.SidecarUF, res.SidecarUC, clock.at(errs[0].At), clock.at(errs[len(errs)-1].At))
	}
	log(clock.t0.Add(sc.scale(lastLag(plans))), "clients", "last client stops sending to the pod")
	res.Warnings = timingWarnings(res, strat, spec)
	sort.SliceStable(res.Timeline, func(i, j int) bool { return res.Timeline[i].AtS < res.Timeline[j].AtS })
	return res, nil
}

// proxyName is the sidecar container's name in the timeline.
func proxyName(spec SidecarSpec) string {
	if spec.Mesh == mesh.Linkerd {
		return "linkerd-proxy"
	}
	return "istio-proxy"
}

// meshOf names a mesh, the empty one included.
func meshOf(m mesh.Mesh) mesh.Mesh {
	if m == "" {
		return mesh.Istio
	}
	return m
}

func containsFlag(flags, flag string) bool {
	for i := 0; i+len(flag) <= len(flags); i++ {
		if flags[i:i+len(flag)] == flag {
			return true
		}
	}
	return false
}

// sleepUntil waits until at, or returns ctx's error.
func sleepUntil(ctx context.Context, at time.Time) error {
	t := time.NewTimer(time.Until(at))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// lateTolerance is how late, in pod time, a timer of the scenario may fire before the result
// is flagged: at a small time scale a busy machine (other processes, the run's own traffic)
// stretches pod time, and a result built on a late timer must say so rather than pass as
// the strategy's effect.
const lateTolerance = 0.25

// timingWarnings compares the moments fixed by the scenario with when they happened.
func timingWarnings(res Result, strat Strategy, spec SidecarSpec) []string {
	var w []string
	late := func(what string, want, got float64) {
		if got-want > lateTolerance {
			w = append(w, fmt.Sprintf("%s at %.2fs instead of %.2fs: this machine was too busy to keep pod time; rerun, or raise --time-scale", what, got, want))
		}
	}
	if spec.Mesh != mesh.Linkerd && spec.Mode == SidecarClassic && res.SidecarExit > 0 && res.SidecarExit < res.GracePeriodS {
		late("pilot-agent killed Envoy", spec.TerminationDrainDuration.Seconds(), res.SidecarExit)
	}
	if strat.Kind == StrategySleep && strat.Sleep.Seconds() < res.GracePeriodS {
		late("sleep returned", strat.Sleep.Seconds(), res.AppStopS)
	}
	if strat.Kind == StrategyNone {
		late("the app got SIGTERM", 0, res.AppStopS)
	}
	return w
}
