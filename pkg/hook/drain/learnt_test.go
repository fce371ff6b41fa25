package drain

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/meshdrain/meshdrain/pkg/clock"
	"go.uber.org/zap/zapcore"
)

// learningClients is scripted evidence that also says when each client learnt.
type learningClients struct {
	scriptedClients
	learnt []Learnt
}

func (l *learningClients) Learnt() []Learnt { return l.learnt }

// clientsLearning are n clients that learnt 100 ms apart from the start, the latest first
// (the final event must sort them), the first at 0.1 s.
func clientsLearning(n int) []Learnt {
	var out []Learnt
	for i := n; i >= 1; i-- {
		out = append(out, Learnt{Client: fmt.Sprintf("10.0.%d.%d", i/250, i%250), At: t0.Add(time.Duration(i) * 100 * time.Millisecond), Evidence: EvidenceLetGo})
	}
	return out
}

// The final event lists the 32 latest learners, earliest first, with their seconds from the
// hook's start, and counts them all: 40 clients, 32 kept, from 0.9 s (the 9th) to 4 s.
func TestFinalEventListsTheLatestLearners(t *testing.T) {
	cfg := baseConfig()
	cfg.Mesh = "istio"
	fake := clock.NewAutoFake(t0)
	cfg.Clients = &learningClients{
		scriptedClients: scriptedClients{clock: fake, counts: func(time.Duration) (ClientCounts, error) { return ClientCounts{Left: 40}, nil }},
		learnt:          clientsLearning(40),
	}
	res, logs := runWithClock(t, fake, cfg, steadyTraffic(3*time.Second, 0))
	if res.Reason != ReasonQuiet {
		t.Fatalf("reason %s, want quiet", res.Reason)
	}
	final := logs.FilterMessage("drain finished").All()[0].ContextMap()
	if final["clients_learnt_total"] != int64(40) || final["clients_learnt_kept"] != int64(32) || final["mesh"] != "istio" || final["cut_by"] != "" {
		t.Errorf("total %v, kept %v, mesh %v, cut_by %q; want 40, 32, istio, \"\"", final["clients_learnt_total"], final["clients_learnt_kept"], final["mesh"], final["cut_by"])
	}
	listed, _ := final["clients_learnt"].([]any)
	if len(listed) != 32 {
		t.Fatalf("clients_learnt %v, want 32 entries", final["clients_learnt"])
	}
	first, _ := listed[0].(map[string]any)
	last, _ := listed[31].(map[string]any)
	if first["client"] != "10.0.0.9" || first["s"] != 0.9 || first["evidence"] != EvidenceLetGo || last["client"] != "10.0.0.40" || last["s"] != 4.0 {
		t.Errorf("listed from %v to %v; want 10.0.0.9 at 0.9 s (let-go) to 10.0.0.40 at 4 s", first, last)
	}
}

// The wire form a learner parses: an array of objects, seconds as a JSON number rounded to
// the millisecond, and a short list kept whole.
func TestLearntFieldsJSON(t *testing.T) {
	enc := zapcore.NewJSONEncoder(zapcore.EncoderConfig{})
	buf, err := enc.EncodeEntry(zapcore.Entry{}, LearntFields(t0, []Learnt{
		{Client: "10.0.0.8", At: t0.Add(2412345 * time.Microsecond), Evidence: EvidenceLastRequest},
		{Client: "10.0.0.7", At: t0.Add(-time.Millisecond), Evidence: EvidenceLastNewConnection},
	}))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"clients_learnt":[{"client":"10.0.0.7","s":0,"evidence":"last-new-connection"},{"client":"10.0.0.8","s":2.412,"evidence":"last-request"}],"clients_learnt_total":2,"clients_learnt_kept":2}`
	if got := strings.TrimSpace(buf.String()); got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}

// Evidence that cannot say when a client learnt (no Learners) lists nothing: a learner then
// takes the drain's last arrival, as from an event written before clients_learnt. The cut
// is said either way.
func TestFinalEventWithoutLearners(t *testing.T) {
	cfg := baseConfig()
	cfg.Deadline = 5 * time.Second
	fake := clock.NewAutoFake(t0)
	cfg.Clients = &scriptedClients{clock: fake, counts: func(time.Duration) (ClientCounts, error) { return ClientCounts{Sending: 1}, nil }}
	res, logs := runWithClock(t, fake, cfg, steadyTraffic(time.Hour, 0))
	if res.Reason != ReasonDeadline {
		t.Fatalf("reason %s, want deadline", res.Reason)
	}
	final := logs.FilterMessage("drain finished").All()[0].ContextMap()
	if _, listed := final["clients_learnt"]; listed {
		t.Errorf("clients_learnt %v without Learners, want none", final["clients_learnt"])
	}
	if _, ok := final["mesh"]; ok || final["cut_by"] != "deadline" {
		t.Errorf("mesh %v, cut_by %v; want no mesh (not set) and cut_by deadline", final["mesh"], final["cut_by"])
	}
}

func TestCutBy(t *testing.T) {
	for _, tc := range []struct {
		res  Result
		want string
	}{
		{Result{Reason: ReasonQuiet, WindowTerm: TermQuiet}, ""},
		{Result{Reason: ReasonQuiet, WindowTerm: TermClientsLeft}, ""},
		{Result{Reason: ReasonQuiet, WindowTerm: TermLagBound}, "lag-bound"},
		// Past the bound (or the risk figure's crossing), but every pooling client had let
		// go and none sent: the clients showed it, nothing was cut.
		{Result{Reason: ReasonQuiet, WindowTerm: TermLagBound, Clients: &ClientCounts{Left: 3}}, ""},
		{Result{Reason: ReasonQuiet, WindowTerm: TermLagBound, Clients: &ClientCounts{Left: 3, Holding: 1}}, "lag-bound"},
		{Result{Reason: ReasonQuiet, WindowTerm: TermLagBound, Clients: &ClientCounts{Left: 3, Sending: 1}}, "lag-bound"},
		{Result{Reason: ReasonQuiet, WindowTerm: TermLagBound, Clients: &ClientCounts{Left: 3, Stale: true}}, "lag-bound"},
		{Result{Reason: ReasonDeadline, WindowTerm: TermLagBound}, "deadline"},
		{Result{Reason: ReasonSidecarGone}, ""},
	} {
		if got := tc.res.CutBy(); got != tc.want {
			t.Errorf("%s/%s: cut by %q, want %q", tc.res.Reason, tc.res.WindowTerm, got, tc.want)
		}
	}
}
