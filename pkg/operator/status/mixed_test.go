package status

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshdrain/meshdrain/pkg/clock"
	"github.com/meshdrain/meshdrain/pkg/hook/drain"
	"github.com/meshdrain/meshdrain/pkg/hook/evidence"
	"github.com/meshdrain/meshdrain/pkg/hook/evidence/evidencetest"
	"github.com/meshdrain/meshdrain/pkg/mesh"
	"github.com/meshdrain/meshdrain/pkg/sockets"
)

// Issue 27, as an operator sees it: status --watch on a terminal (frames redrawn in place)
// and in a log (a line per sample, a line per client change) while a busy client and two idle
// ones are drained, in both regimes, and prestop's counts at the same polls. At every poll the
// frame's client table and the client lines so far show each client where the ground truth
// puts it, and prestop counts the same clients the same way.
func TestWatchShowsClientsAsPrestopCountsThem(t *testing.T) {
	for _, regime := range []evidencetest.Regime{evidencetest.SidecarDrains, evidencetest.DrainDeferred} {
		t.Run(regime.String(), func(t *testing.T) {
			pod := evidencetest.Start(t, regime)
			var skew time.Duration // prestop reads at every poll (see TestMixedBusyAndIdleClientsPerPoll)
			table := &evidence.Table{Reader: sockets.NewReader(), Ports: []int{pod.Port}, Every: evidencetest.Every,
				Now: func() time.Time { return time.Now().Add(skew) }, Undrained: regime == evidencetest.DrainDeferred}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			runs := []*watchRun{startWatch(ctx, t, pod, true), startWatch(ctx, t, pod, false)}
			for i, step := range pod.Steps() {
				if step.Do != nil {
					step.Do(t)
					for _, r := range runs {
						r.next()
					}
				}
				for _, r := range runs {
					r.sampled(t)
				}
				snap := pod.Snapshot(t)
				if i == 0 {
					if err := table.Begin(ctx, time.Time{}, snap); err != nil {
						t.Fatalf("prestop: %v", err)
					}
				} else {
					skew += evidence.BusyReads * evidencetest.Every
				}
				counts, err := table.Counts(ctx, drain.TrafficOf(snap, snap.Read()))
				if err != nil {
					t.Fatalf("poll %d, prestop: %v", i, err)
				}
				want := fmt.Sprint(wantStates(step))
				for _, r := range runs {
					if got := fmt.Sprint(r.clients(t)); got != want {
						t.Errorf("poll %d (%s), status %s:\n  got  %s\n  want %s\n%s", i, step.Name, r.name, got, want, r.out.String())
					}
				}
				if got, want := countsText(counts), countsText(countsOf(step)); got != want {
					t.Errorf("poll %d (%s), prestop: %s, want %s", i, step.Name, got, want)
				}
			}
			cancel()
			for _, r := range runs {
				<-r.done
			}
		})
	}
}

// watchRun is one status --watch, on a clock the test steps.
type watchRun struct {
	name     string
	terminal bool
	clock    *clock.Fake
	out      *lockedBuffer
	done     chan struct{}
}

func startWatch(ctx context.Context, t *testing.T, pod *evidencetest.Pod, terminal bool) *watchRun {
	r := &watchRun{name: map[bool]string{true: "on a terminal", false: "in line mode"}[terminal], terminal: terminal,
		clock: clock.NewFake(time.Now()), out: &lockedBuffer{}, done: make(chan struct{})}
	watch := &evidence.Watch{Reader: sockets.NewReader(), Ports: []int{pod.Port}, Every: evidencetest.Every}
	go func() {
		defer close(r.done)
		defer watch.Close()
		err := Run(ctx, Envoy(pod.Admin), r.out, Options{AdminURL: pod.Sidecar.AdminURL(), Selector: mesh.Selector{Ports: []int{8080}},
			Watch: true, Interval: time.Millisecond, Terminal: terminal, Clock: r.clock, Clients: watch})
		if err != nil {
			t.Errorf("status %s: %v", r.name, err)
		}
	}()
	return r
}

// next lets the watch take its next sample: its clock catches up with real time, which the
// kernel's tcp_info counts in (more than its interval).
func (r *watchRun) next() { r.clock.Advance(time.Since(r.clock.Now())) }

// sampled waits until the watch has written its sample and waits for the next one.
func (r *watchRun) sampled(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for r.clock.Waiters() == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("status %s took no sample:\n%s", r.name, r.out.String())
		}
		time.Sleep(time.Millisecond)
	}
}

// clients is each client's state and open connections as the output shows them: the last
// frame's client table on a terminal; the client lines so far in line mode.
func (r *watchRun) clients(t *testing.T) map[string]string {
	t.Helper()
	out := r.out.String()
	shown := map[string]string{}
	if r.terminal {
		frame := out[strings.LastIndex(out, clearScreen)+len(clearScreen):]
		rows := false
		for _, line := range strings.Split(frame, "\n") {
			fields := strings.Fields(line)
			switch {
			case len(fields) > 0 && fields[0] == "CLIENT":
				rows = true
			case rows && len(fields) >= 3:
				shown[fields[0]] = fields[1] + "/" + fields[2]
			case rows:
				rows = false
			}
		}
		return shown
	}
	for _, line := range strings.Split(out, "\n") {
		if !strings.Contains(line, " client=") {
			continue
		}
		var addr, state, open string
		for _, field := range strings.Fields(line) {
			key, value, _ := strings.Cut(field, "=")
			switch key {
			case "client":
				addr = value
			case "state":
				state = value
			case "open":
				open = value
			}
		}
		shown[addr] = state + "/" + open
	}
	return shown
}

// wantStates is the ground truth of a step as the output writes it.
func wantStates(step evidencetest.Step) map[string]string {
	want := map[string]string{}
	for ip, state := range step.Want {
		want[ip] = state.String() + "/" + strconv.Itoa(step.WantOpen[ip])
	}
	return want
}

// countsOf is the ground truth of a step as prestop counts it.
func countsOf(step evidencetest.Step) drain.ClientCounts {
	var c drain.ClientCounts
	var holders evidence.Holders
	for _, ip := range evidencetest.Clients {
		switch step.Want[ip] {
		case sockets.Holding:
			c.Holding++
			holders = append(holders, ip)
		case sockets.Sending:
			c.Sending++
		case sockets.Left:
			c.Left++
		default:
			c.NoEvidence++
		}
	}
	if len(holders) > 0 {
		c.Named = holders
	}
	return c
}

func countsText(c drain.ClientCounts) string {
	holders := slices.Clone(evidence.HoldersOf(c))
	slices.Sort(holders)
	return fmt.Sprintf("holding %d %v, sending %d, left %d, no evidence %d", c.Holding, holders, c.Sending, c.Left, c.NoEvidence)
}

// lockedBuffer is the output of a watch the test reads while it runs.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
