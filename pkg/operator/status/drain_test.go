package status

import (
	"bytes"
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/meshdrain/meshdrain/pkg/clock"
	"github.com/meshdrain/meshdrain/pkg/hook/drain"
	"github.com/meshdrain/meshdrain/pkg/hook/evidence"
	"github.com/meshdrain/meshdrain/pkg/mesh"
	"github.com/meshdrain/meshdrain/pkg/sockets"
)

// drainingSnapshot is httpSnapshot whose sidecar has told closes connections to close.
func drainingSnapshot(total, closes float64) mesh.Snapshot {
	snap := httpSnapshot(total, 0)
	snap.Endpoints[0].HTTPDrainCloses = f(closes)
	return snap
}

// A draining Envoy stays LIVE with its listeners active: status says it drains, from its
// drain-close counter, and since which sample. A counter left out of a usedonly poll is 0
// where the HTTP stats show; without them, the drain is unknown.
func TestStatusShowsTheDrainAndSinceWhen(t *testing.T) {
	admin := &scriptedAdmin{state: StateLive, script: []scripted{
		{snap: httpSnapshot(10, 0)}, {snap: drainingSnapshot(12, 0)}, {snap: drainingSnapshot(15, 2)}, {snap: drainingSnapshot(20, 6)},
	}}
	var out bytes.Buffer
	start := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	if err := Run(context.Background(), Envoy(admin), &out, Options{AdminURL: "http://admin", Watch: true, Interval: time.Second,
		Samples: 4, Clock: clock.NewAutoFake(start)}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	want := []string{" drain=no ", " drain=no ", " drain=since:2026-12-04T10:00:02Z ", " drain=since:2026-12-04T10:00:02Z "}
	for i, w := range want {
		if i >= len(lines) || !strings.Contains(lines[i], w) {
			t.Errorf("sample %d: want %q in:\n%s", i, w, out.String())
		}
	}

	admin = &scriptedAdmin{state: StateLive, script: []scripted{{snap: drainingSnapshot(20, 6)}}}
	out.Reset()
	if err := Run(context.Background(), Envoy(admin), &out, Options{AdminURL: "http://admin", Watch: true, Terminal: true,
		Interval: time.Second, Samples: 1, Clock: clock.NewAutoFake(start)}); err != nil {
		t.Fatal(err)
	}
	if want := "drain:   DRAINING since before 2026-12-04T10:00:00Z, status's first sample (6 connections told to close)"; !strings.Contains(out.String(), want) {
		t.Errorf("want %q in:\n%s", want, out.String())
	}

	noHTTP := httpSnapshot(10, 0)
	noHTTP.Endpoints[0].HTTPRequestsTotal, noHTTP.Endpoints[0].HTTPRequestsActive = nil, nil
	noHTTP.Endpoints[0].ClusterRequestsTotal, noHTTP.Endpoints[0].ClusterRequestsActive = f(10), f(0)
	r, err := Gather(context.Background(), &scriptedAdmin{state: StateLive, script: []scripted{{snap: noHTTP}}}, "http://admin", mesh.Selector{}, start)
	if err != nil {
		t.Fatal(err)
	}
	var text bytes.Buffer
	if err := WriteText(&text, r); err != nil {
		t.Fatal(err)
	}
	if r.Drain != nil || !strings.Contains(text.String(), "drain:   unknown") {
		t.Errorf("without HTTP stats: drain %+v, text:\n%s", r.Drain, text.String())
	}
}

// scriptedClients is a ClientWatch that answers each sample with the next clients or error.
type scriptedClients struct {
	script []struct {
		clients []sockets.Client
		err     error
	}
	calls int
}

func (s *scriptedClients) Read() {}

func (s *scriptedClients) Clients(time.Time, *mesh.Listener, drain.Traffic, evidence.DrainSeen) ([]sockets.Client, error) {
	step := s.script[min(s.calls, len(s.script)-1)]
	s.calls++
	return step.clients, step.err
}

// In line mode a sample's line counts the clients, and a line per client says each change
// of state (every client at first), and once why there are none to show.
func TestWatchLinesSayEachClientChange(t *testing.T) {
	client := func(addr string, state sockets.ClientState, open int) sockets.Client {
		return sockets.Client{Addr: netip.MustParseAddr(addr), State: state, Open: open}
	}
	noListener := &evidence.NoListenerError{Ports: []uint16{15006}, FromStats: true}
	clients := &scriptedClients{script: []struct {
		clients []sockets.Client
		err     error
	}{
		{err: noListener},
		{err: noListener},
		{clients: []sockets.Client{client("10.1.0.1", sockets.Holding, 1), client("10.1.0.2", sockets.Holding, 1)}},
		{clients: []sockets.Client{client("10.1.0.1", sockets.Holding, 1), client("10.1.0.2", sockets.Holding, 1)}},
		{clients: []sockets.Client{client("10.1.0.1", sockets.Sending, 0), client("10.1.0.2", sockets.Left, 0)}},
	}}
	admin := &scriptedAdmin{state: StateLive, script: []scripted{{snap: httpSnapshot(10, 0)}}}
	var out bytes.Buffer
	if err := Run(context.Background(), Envoy(admin), &out, Options{AdminURL: "http://admin", Watch: true, Interval: time.Second,
		Samples: 5, Clock: clock.NewAutoFake(time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)), Clients: clients}); err != nil {
		t.Fatal(err)
	}
	var changes []string
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		if !strings.Contains(line, " state=LIVE ") {
			changes = append(changes, line)
		}
	}
	want := []string{
		"2026-12-04T10:00:00Z clients: none shown: " + noListener.Error(),
		"2026-12-04T10:00:02Z client=10.1.0.1 state=holding was=- open=1 last_sent=-",
		"2026-12-04T10:00:02Z client=10.1.0.2 state=holding was=- open=1 last_sent=-",
		"2026-12-04T10:00:04Z client=10.1.0.1 state=sending was=holding open=0 last_sent=-",
		"2026-12-04T10:00:04Z client=10.1.0.2 state=left was=holding open=0 last_sent=-",
	}
	if strings.Join(changes, "\n") != strings.Join(want, "\n") {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(changes, "\n"), strings.Join(want, "\n"))
	}
	if !strings.Contains(out.String(), " | clients holding=0 sending=1 left=1 no_evidence=0\n") {
		t.Errorf("the last sample's line does not count its clients:\n%s", out.String())
	}
}
