package status

import (
	"bytes"
	"context"
	"math"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/meshdrain/meshdrain/pkg/clock"
	"github.com/meshdrain/meshdrain/pkg/hook/risk"
	"github.com/meshdrain/meshdrain/pkg/sockets"
)

// riskLag has CDF(t) = t/4s, so that the expected figures are worked out by hand below: a
// client that had not learnt by s still routes at t with probability (1 − t/4)/(1 − s/4).
func riskLag(t *testing.T) risk.Distribution {
	t.Helper()
	lag, err := risk.Parse("0:0s,1:4s")
	if err != nil {
		t.Fatal(err)
	}
	return lag
}

// With --lag-dist each sample shows the figure prestop would state, from the clients as the
// sample counts them and one client not seen yet, counted from status's first sample.
func TestStatusShowsTheRiskFigureFromTheClients(t *testing.T) {
	first := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	client := func(addr string, state sockets.ClientState, lastData time.Duration) sockets.Client {
		c := sockets.Client{Addr: netip.MustParseAddr(addr), State: state}
		if lastData > 0 {
			c.LastData = first.Add(lastData)
		}
		return c
	}
	clients := &scriptedClients{script: []struct {
		clients []sockets.Client
		err     error
	}{
		{clients: []sockets.Client{client("10.1.0.1", sockets.Holding, 0), client("10.1.0.2", sockets.Holding, 0)}},
		{clients: []sockets.Client{client("10.1.0.1", sockets.Holding, 0), client("10.1.0.2", sockets.Sending, 500*time.Millisecond)}},
		{clients: []sockets.Client{client("10.1.0.1", sockets.Left, 0), client("10.1.0.2", sockets.Sending, 1500*time.Millisecond)}},
	}}
	admin := &scriptedAdmin{state: StateLive, script: []scripted{{snap: httpSnapshot(10, 0)}}}
	var out bytes.Buffer
	if err := Run(context.Background(), Envoy(admin), &out, Options{AdminURL: "http://admin", Output: OutputJSON, Watch: true, Interval: time.Second,
		Samples: 3, Clock: clock.NewAutoFake(first), Clients: clients, Lag: riskLag(t), Risk: 0.001}); err != nil {
		t.Fatal(err)
	}
	docs := jsonLines(t, out.String())
	want := []struct {
		figure                           float64
		unseen, holding, sending, noEvid float64
	}{
		// 0s: the two holders and the unseen client, none can have learnt.
		{1, 1, 2, 0, 0},
		// 1s: 0.75 · 0.75 for the holder and the unseen client, 0.75/0.875 for the sender.
		{1 - 0.25*0.25*(1-0.75/0.875), 1, 1, 1, 0},
		// 2s: the client that left is out; 0.5 for the unseen one, 0.5/0.625 for the sender.
		{1 - 0.5*0.2, 1, 0, 1, 0},
	}
	if len(docs) != len(want) {
		t.Fatalf("%d samples, want %d:\n%s", len(docs), len(want), out.String())
	}
	for i, w := range want {
		k, ok := docs[i]["risk"].(map[string]any)
		if !ok {
			t.Fatalf("sample %d has no risk: %v", i, docs[i])
		}
		if got := k["figure"].(float64); math.Abs(got-w.figure) > 1e-9 {
			t.Errorf("sample %d: figure %v, want %v", i, got, w.figure)
		}
		if k["unseen"] != w.unseen || k["holding"] != w.holding || k["sending"] != w.sending || k["no_evidence"] != w.noEvid || k["level"] != 0.001 {
			t.Errorf("sample %d: %v", i, k)
		}
	}
}

// Without per-client evidence (a Linkerd proxy, --clients=false) the figure counts, as the
// hook does, the unseen client and one sender at the last sample whose requests moved; the
// text says what it is and what it is not.
func TestStatusRiskFigureWithoutClients(t *testing.T) {
	admin := &scriptedAdmin{state: StateLive, script: []scripted{{snap: httpSnapshot(10, 0)}, {snap: httpSnapshot(12, 0)}, {snap: httpSnapshot(12, 0)}}}
	var out bytes.Buffer
	if err := Run(context.Background(), Envoy(admin), &out, Options{AdminURL: "http://admin", Output: OutputJSON, Watch: true, Interval: time.Second,
		Samples: 3, Clock: clock.NewAutoFake(time.Unix(0, 0)), Lag: riskLag(t), Risk: 0.001}); err != nil {
		t.Fatal(err)
	}
	docs := jsonLines(t, out.String())
	// At 2s the sender, not learnt by 1s, has been silent a second at the 1/s it sent at
	// (2 requests in 2s): 0.5 / (0.5 + 0.25·(e − 1)) that it still routes.
	figures := []float64{1, 1, 1 - 0.5*(1-0.5/(0.5+0.25*math.Expm1(1)))}
	for i, want := range figures {
		k := docs[i]["risk"].(map[string]any)
		if got := k["figure"].(float64); math.Abs(got-want) > 1e-9 {
			t.Errorf("sample %d: figure %v, want %v", i, got, want)
		}
	}
	if k := docs[2]["risk"].(map[string]any); k["sending"] != 1.0 || k["unseen"] != 1.0 {
		t.Errorf("last sample's clients: %v", k)
	}

	var text bytes.Buffer
	if err := Run(context.Background(), Envoy(&scriptedAdmin{state: StateLive, script: []scripted{{snap: httpSnapshot(10, 0)}}}), &text,
		Options{AdminURL: "http://admin", Clock: clock.NewAutoFake(time.Unix(0, 0)), Lag: riskLag(t), Risk: 0.001}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"risk:    1 (above --risk 0.001: a hook would not stop yet)",
		"what prestop --lag-dist would state now had its preStop started at status's first sample",
		"from 1 client(s) not seen yet, 0 holding, 0 sending, 0 without evidence"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("text lacks %q:\n%s", want, text.String())
		}
	}
}

// Without --lag-dist there is no figure anywhere: status shows what it showed.
func TestStatusWithoutLagDistShowsNoRisk(t *testing.T) {
	for _, output := range []string{OutputText, OutputJSON} {
		var out bytes.Buffer
		admin := &scriptedAdmin{state: StateLive, script: []scripted{{snap: httpSnapshot(10, 0)}}}
		if err := Run(context.Background(), Envoy(admin), &out, Options{AdminURL: "http://admin", Output: output, Clock: clock.NewAutoFake(time.Unix(0, 0))}); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(out.String(), "risk") {
			t.Errorf("-o %s shows a risk without --lag-dist:\n%s", output, out.String())
		}
	}
}
