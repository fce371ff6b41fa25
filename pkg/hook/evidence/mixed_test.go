package evidence

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/meshdrain/meshdrain/pkg/hook/drain"
	"github.com/meshdrain/meshdrain/pkg/hook/evidence/evidencetest"
	"github.com/meshdrain/meshdrain/pkg/sockets"
)

// Issue 27: a busy client and two idle pooled ones, each from its own loopback address, read
// back through the kernel, in both drain regimes. Each idle client lets go while the busy one
// sends, so requests reach the pod in the very interval of its close. At every poll, prestop's
// Table and status's Watch each read the table and judge it, and each client must be where the
// ground truth puts it: the Watch began before the drain in regime (a) is seen (the
// undrained rules, then the drain's), the Table with the drain.
func TestMixedBusyAndIdleClientsPerPoll(t *testing.T) {
	for _, regime := range []evidencetest.Regime{evidencetest.SidecarDrains, evidencetest.DrainDeferred} {
		t.Run(regime.String(), func(t *testing.T) {
			pod := evidencetest.Start(t, regime)
			// prestop reads the table only every BusyReads intervals while requests keep
			// arriving (they do here at every step): its clock is stepped by that much at each
			// poll, so that every poll reads.
			var skew time.Duration
			table := &Table{Reader: sockets.NewReader(), Ports: []int{pod.Port}, Every: evidencetest.Every,
				Now: func() time.Time { return time.Now().Add(skew) }, Undrained: regime == evidencetest.DrainDeferred}
			watch := &Watch{Reader: sockets.NewReader(), Ports: []int{pod.Port}, Every: evidencetest.Every}
			defer watch.Close()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			for i, step := range pod.Steps() {
				if step.Do != nil {
					step.Do(t)
				}
				watch.Read()
				snap := pod.Snapshot(t)
				traffic := drain.TrafficOf(snap, snap.Read())
				shown, err := watch.Clients(time.Now(), snap.Listener, traffic, DrainOf(snap))
				if err != nil {
					t.Fatalf("poll %d, status: %v", i, err)
				}
				if i == 0 {
					if err := table.Begin(ctx, time.Time{}, snap); err != nil {
						t.Fatalf("prestop: %v", err)
					}
				} else {
					skew += BusyReads * evidencetest.Every
					if _, err := table.Counts(ctx, traffic); err != nil {
						t.Fatalf("poll %d, prestop: %v", i, err)
					}
				}
				for name, clients := range map[string][]sockets.Client{"status": shown, "prestop": table.table.clients()} {
					states, open := byAddr(clients)
					if fmt.Sprint(states) != fmt.Sprint(step.Want) || fmt.Sprint(open) != fmt.Sprint(step.WantOpen) {
						t.Errorf("poll %d (%s), %s:\n  got %s\n want %s", i, step.Name, name,
							evidencetest.Describe(states, open), evidencetest.Describe(step.Want, step.WantOpen))
					}
				}
			}
		})
	}
}

// byAddr is each client's state and open connections, by address.
func byAddr(clients []sockets.Client) (map[string]sockets.ClientState, map[string]int) {
	states, open := map[string]sockets.ClientState{}, map[string]int{}
	for _, c := range clients {
		states[c.Addr.String()], open[c.Addr.String()] = c.State, c.Open
	}
	return states, open
}
