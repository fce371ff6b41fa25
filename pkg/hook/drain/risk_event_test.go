package drain

import (
	"bytes"
	"fmt"
	"slices"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/meshdrain/meshdrain/pkg/hook/risk"
)

// Without --lag-dist the final event says there is no figure (null), and the "waiting"
// events carry none.
func TestFinalEventRiskIsNullWithoutALagDistribution(t *testing.T) {
	_, _, _, logs := run(t, baseConfig(), steadyTraffic(12*time.Second, 0))
	final := logs.FilterMessage("drain finished").All()[0].ContextMap()
	for _, key := range []string{"risk", "risk_from"} {
		if v, ok := final[key]; !ok || v != nil {
			t.Errorf("final event %s = %v (present %v), want null", key, v, ok)
		}
	}
	waiting := logs.FilterMessage("waiting").All()
	if len(waiting) == 0 {
		t.Fatal("no waiting event in a 13s wait")
	}
	for _, w := range waiting {
		if _, ok := w.ContextMap()["risk"]; ok {
			t.Errorf("waiting event has a risk without --lag-dist: %v", w.ContextMap())
		}
	}
}

// With --lag-dist the final event has the figure's fields (risk_from's four counts), and
// every "waiting" event the figure at its poll.
func TestFinalEventRiskFieldsWithALagDistribution(t *testing.T) {
	cfg := baseConfig()
	lag, err := risk.Parse("0:400ms,0.5:1.2s,0.99:3.5s,1:6s")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Lag, cfg.Risk = lag, risk.DefaultLevel
	_, _, _, logs := run(t, cfg, steadyTraffic(12*time.Second, 0))
	final := logs.FilterMessage("drain finished").All()[0].ContextMap()
	if figure, ok := final["risk"].(float64); !ok || figure < 0 || figure > risk.DefaultLevel {
		t.Errorf("final event's risk %#v, want the figure at the stop, at most --risk: %v", final["risk"], final)
	}
	from, ok := final["risk_from"].(map[string]any)
	if !ok {
		t.Fatalf("final event risk_from = %#v, want an object", final["risk_from"])
	}
	var keys []string
	for k := range from {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	if fmt.Sprint(keys) != "[holding no_evidence sending unseen]" {
		t.Errorf("risk_from keys %v", keys)
	}
	waiting := logs.FilterMessage("waiting").All()
	if len(waiting) == 0 {
		t.Fatal("no waiting event in a 13s wait")
	}
	for _, w := range waiting {
		if figure, ok := w.ContextMap()["risk"].(float64); !ok || figure < 0 || figure > 1 {
			t.Errorf("waiting event without the figure: %v", w.ContextMap())
		}
	}
}

// The figure and its clients are written as the final event's JSON says them.
func TestRiskFieldsAsJSON(t *testing.T) {
	lag, _ := risk.Parse("0:1s,1:2s")
	for _, tc := range []struct {
		lag    risk.Distribution
		result Result
		want   string
	}{
		{risk.Distribution{}, Result{}, `{"risk":null,"risk_from":null}`},
		{lag, Result{Risk: f(0.0004), RiskFrom: RiskFrom{Unseen: 1, Holding: 2, Sending: 3, NoEvidence: 4}},
			`{"risk":0.0004,"risk_from":{"unseen":1,"holding":2,"sending":3,"no_evidence":4}}`},
		// No poll judged (no sidecar, no signal): no figure, but the distribution was there.
		{lag, Result{}, `{"risk":null,"risk_from":{"unseen":0,"holding":0,"sending":0,"no_evidence":0}}`},
	} {
		c := &coordinator{cfg: Config{Lag: tc.lag}, result: tc.result}
		if got := encodeFields(t, c.riskFields()); got != tc.want {
			t.Errorf("fields %s\nwant   %s", got, tc.want)
		}
	}
}

func encodeFields(t *testing.T, fields []zap.Field) string {
	t.Helper()
	enc := zapcore.NewJSONEncoder(zapcore.EncoderConfig{})
	buf, err := enc.EncodeEntry(zapcore.Entry{}, fields)
	if err != nil {
		t.Fatal(err)
	}
	return string(bytes.TrimSpace(buf.Bytes()))
}

// The clients the figure counts: every holding and evidence-less client since the drain's
// start with a silence that says nothing, every sender since the latest send (the table's or
// the counter's, whichever is later) at its share of the rate, one client nobody has seen;
// the clients that left are out.
func TestRiskClients(t *testing.T) {
	start := time.Unix(1000, 0)
	for _, tc := range []struct {
		name        string
		counts      *ClientCounts
		lastArrival time.Duration
		arrived     bool
		clients     []risk.Client
		from        RiskFrom
	}{
		{"no evidence, nothing arrived", nil, 0, false, []risk.Client{{N: 1}}, RiskFrom{Unseen: 1}},
		{"no evidence, arrivals", nil, 2 * time.Second, true, []risk.Client{{N: 1}, {Since: 2 * time.Second, Rate: 8, N: 1}}, RiskFrom{Unseen: 1, Sending: 1}},
		{"per client", &ClientCounts{Holding: 1, Sending: 2, Left: 5, NoEvidence: 1, LastSent: start.Add(3500 * time.Millisecond)}, 3 * time.Second, true,
			[]risk.Client{{N: 3}, {Since: 3500 * time.Millisecond, Rate: 4, N: 2}}, RiskFrom{Unseen: 1, Holding: 1, Sending: 2, NoEvidence: 1}},
		{"the counter's arrival is later", &ClientCounts{Sending: 1, LastSent: start.Add(time.Second)}, 3 * time.Second, true,
			[]risk.Client{{N: 1}, {Since: 3 * time.Second, Rate: 8, N: 1}}, RiskFrom{Unseen: 1, Sending: 1}},
		{"every client left", &ClientCounts{Left: 3}, time.Second, true, []risk.Client{{N: 1}}, RiskFrom{Unseen: 1}},
	} {
		clients, from := RiskClients(start, tc.counts, tc.lastArrival, tc.arrived, 8)
		if !slices.Equal(clients, tc.clients) || from != tc.from {
			t.Errorf("%s: clients %v from %+v, want %v %+v", tc.name, clients, from, tc.clients, tc.from)
		}
	}
}
