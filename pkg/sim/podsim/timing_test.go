package podsim

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestTimingWarnings: every actor a claim rests on is checked against the time its scenario
// gives it, and a run where one ran late says which (issue 27: a run whose clients sent
// seconds late passed as timely, and its meshdrain row was judged late).
func TestTimingWarnings(t *testing.T) {
	sc := UserScenario()
	sc.TimeScale = 0.2
	spec := IstioDefaultSidecar()
	meshdrain := Strategy{Kind: StrategyMeshdrain}
	// A meshdrain row that kept time: its process took 0.1s beyond its clock, and it polled
	// every 0.2s (plus fetches) for 8.5s.
	timely := func() Result {
		return Result{AppStopS: 8.6, GracePeriodS: 30, SidecarExit: 5.02, Meshdrain: &MeshdrainEvent{
			Reason: "quiet", ElapsedPodS: 8.5, Raw: map[string]any{"polls": 40.0}}}
	}
	onTime := observedTiming{
		lateSend:     clientLateness{by: 20 * time.Millisecond, plannedS: 3}, // 0.1s of pod time
		lateRemoval:  clientLateness{by: 10 * time.Millisecond, plannedS: 7.58},
		agentDrained: true, agentDrainS: 0.05,
	}
	for _, c := range []struct {
		name  string
		res   func(*Result)
		seen  func(*observedTiming)
		strat Strategy
		want  string // "" for no warning
	}{
		{name: "on time"},
		{name: "a client sent late", seen: func(o *observedTiming) { o.lateSend = clientLateness{by: 100 * time.Millisecond, plannedS: 3} },
			want: "a client sent a request at 3.50s instead of 3.00s"},
		{name: "a client's EDS update late", seen: func(o *observedTiming) { o.lateRemoval = clientLateness{by: time.Second, plannedS: 7.58} },
			want: "a client applied its EDS update at 12.58s instead of 7.58s"},
		{name: "pilot-agent's drain failed", seen: func(o *observedTiming) { o.agentDrained, o.agentDrainErr = false, errors.New("i/o timeout") },
			want: "pilot-agent's drain call at the deletion failed (i/o timeout)"},
		{name: "pilot-agent's drain late", seen: func(o *observedTiming) { o.agentDrainS = 1.2 },
			want: "pilot-agent's drain call was answered at 1.20s instead of 0.00s"},
		{name: "no drain call at the deletion (deferred)", seen: func(o *observedTiming) { o.agentDrained = false }},
		{name: "meshdrain's process slow to start", res: func(r *Result) { r.AppStopS = 9.2 },
			want: "meshdrain's process took 0.70s beyond its own clock"},
		{name: "meshdrain hold's process slow", res: func(r *Result) { r.Hold = &HoldEvent{ElapsedPodS: 9.0, ReturnedS: 9.4} },
			want: "meshdrain hold's process took 0.40s beyond its own clock"},
		{name: "meshdrain hold on time", res: func(r *Result) { r.Hold = &HoldEvent{ElapsedPodS: 9.0, ReturnedS: 9.2} }},
		{name: "meshdrain's polls starved", res: func(r *Result) { r.Meshdrain.Raw["polls"] = 12.0 },
			want: "meshdrain polled every 0.71s on average instead of 0.20s"},
		{name: "few polls, the sidecar gone", res: func(r *Result) { r.Meshdrain.Reason, r.Meshdrain.Raw["polls"] = "sidecar-gone-busy", 3.0 }},
		{name: "meshdrain's admin requests timed out", seen: func(o *observedTiming) { o.adminTimeouts = 2 },
			want: "meshdrain's admin requests timed out 2 times"},
		{name: "pilot-agent's kill late", res: func(r *Result) { r.SidecarExit = 5.4 },
			want: "pilot-agent killed Envoy at 5.40s instead of 5.00s"},
		{name: "sleep late", strat: Strategy{Kind: StrategySleep, Sleep: 5 * time.Second}, res: func(r *Result) { r.AppStopS, r.Meshdrain = 5.3, nil },
			want: "sleep returned at 5.30s instead of 5.00s"},
	} {
		res, seen, strat := timely(), onTime, meshdrain
		if c.res != nil {
			c.res(&res)
		}
		if c.seen != nil {
			c.seen(&seen)
		}
		if c.strat.Kind != "" {
			strat = c.strat
		}
		res.Lateness = lateness(res, sc, seen)
		w := timingWarnings(res, strat, spec, sc.Poll)
		switch {
		case c.want == "" && len(w) > 0:
			t.Errorf("%s: warnings %q, want none", c.name, w)
		case c.want != "" && (len(w) != 1 || !strings.HasPrefix(w[0], c.want) || !strings.Contains(w[0], "raise --time-scale")):
			t.Errorf("%s: warnings %q, want one that starts %q and says to raise the time scale", c.name, w, c.want)
		}
	}
	// What a claim allows for is in the result, in pod seconds.
	res := timely()
	seen := onTime
	seen.lateSend.by = 100 * time.Millisecond
	res.Lateness = lateness(res, sc, seen)
	if l := res.Lateness; l.ClientSendS != 0.5 || l.ClientSendPlannedS != 3 || l.MeshdrainProcessS != 0.1 || l.AgentDrainS == nil || *l.AgentDrainS != 0.05 {
		t.Errorf("lateness %+v: want a client's send 0.5s late, planned at 3s; meshdrain's process 0.1s; pilot-agent's drain at 0.05s", l)
	}
}

// TestAdminTimeouts counts the admin requests meshdrain's log shows timed out, those it
// suppressed after a logged one included, and no other failure.
func TestAdminTimeouts(t *testing.T) {
	var p preStop
	p.stderr.WriteString(`{"level":"info","msg":"drain started"}
{"level":"warn","msg":"admin request failed; retrying","error":"context deadline exceeded: last attempt: GET http://127.0.0.1:1/stats/prometheus: context deadline exceeded","suppressed":0}
{"level":"warn","msg":"admin request failed; retrying","error":"dial tcp 127.0.0.1:1: connect: connection refused","suppressed":3}
{"level":"warn","msg":"admin request failed; retrying","error":"GET http://127.0.0.1:1/metrics: context deadline exceeded","suppressed":4}
{"level":"info","msg":"drain finished","reason":"quiet"}
`)
	if got := p.adminTimeouts(); got != 6 {
		t.Errorf("adminTimeouts() = %d, want 1 + (4 + 1)", got)
	}
}
