package drain

import (
	"context"
	"testing"
	"time"

	"github.com/meshdrain/meshdrain/pkg/clock"
	"github.com/meshdrain/meshdrain/pkg/mesh"
)

// usedOnlySidecar adds a cheaper poll to a scripted sidecar whose answers stop showing the
// arrival counter move from hideFrom on, as Envoy's usedonly answers would once the counter's
// used flag is cleared after every move: the counter is left out, and the last picture's
// value (the last complete read's, as envoy.Client keeps it) stands in for it.
type usedOnlySidecar struct {
	*scriptedSidecar
	hideFrom time.Duration
	picture  mesh.Snapshot
	cheap    int
}

func (u *usedOnlySidecar) Inbound(ctx context.Context, sel mesh.Selector) (mesh.Snapshot, error) {
	snap, err := u.scriptedSidecar.Inbound(ctx, sel)
	if err == nil {
		u.picture = snap
	}
	return snap, err
}

func (u *usedOnlySidecar) InboundUsed(ctx context.Context, sel mesh.Selector) (mesh.Snapshot, error) {
	u.cheap++
	if at := u.clock.Now().Sub(t0); u.hideFrom > 0 && at >= u.hideFrom {
		return u.picture, nil
	}
	return u.Inbound(ctx, sel)
}

func runUsedOnly(t *testing.T, cfg Config, script func(time.Duration) (mesh.Snapshot, error), hideFrom time.Duration) (Result, *usedOnlySidecar) {
	t.Helper()
	fake := clock.NewAutoFake(t0)
	cfg.Clock = fake
	u := &usedOnlySidecar{scriptedSidecar: &scriptedSidecar{clock: fake, script: script}, hideFrom: hideFrom}
	return Run(context.Background(), cfg, u), u
}

// A cheap poll that misses arrivals never ends the wait: every decision it proposes is made
// again on a complete read, which sees the counter moving.
func TestCheapPollNeverDecides(t *testing.T) {
	cfg := baseConfig()
	cfg.Deadline = 8 * time.Second
	res, u := runUsedOnly(t, cfg, steadyTraffic(time.Hour, 0), 2*time.Second)
	if res.Reason != ReasonDeadline {
		t.Fatalf("traffic never stops, cheap polls hide it: reason %s, want deadline", res.Reason)
	}
	if u.cheap == 0 || res.CompleteReads != 1 {
		t.Errorf("cheap polls %d, complete reads %d: want the watch on cheap polls until the one complete read that showed them wrong", u.cheap, res.CompleteReads)
	}
	// From then on every poll is complete and sees the traffic: the last arrival is recent.
	within(t, "last arrival", res.LastArrival, cfg.Deadline-2*cfg.Poll, cfg.Deadline)
}

// When the cheap polls tell the truth, the wait ends as it does on complete reads alone, with
// one complete read to confirm it; when they hide the last arrivals, it ends once the complete
// read agrees, one quiet window after it saw them.
func TestCheapPollEndsLikeCompleteReads(t *testing.T) {
	cfg := baseConfig()
	traffic := steadyTraffic(3*time.Second, 0)
	plain, _, _, _ := run(t, cfg, traffic)
	honest, u := runUsedOnly(t, cfg, traffic, 0)
	if plain.Reason != ReasonQuiet || honest.Reason != ReasonQuiet {
		t.Fatalf("reasons %s and %s, want quiet", plain.Reason, honest.Reason)
	}
	within(t, "honest cheap polls: elapsed", honest.Elapsed, plain.Elapsed, plain.Elapsed+cfg.Poll)
	if honest.CompleteReads != 1 || u.cheap == 0 {
		t.Errorf("complete reads %d, cheap polls %d: want the watch on cheap polls and one complete read", honest.CompleteReads, u.cheap)
	}
	hiding, _ := runUsedOnly(t, cfg, traffic, 2*time.Second)
	if hiding.Reason != ReasonQuiet {
		t.Fatalf("hiding: reason %s, want quiet", hiding.Reason)
	}
	// Cheap polls show nothing from the last complete answer before 2 s; a window later the
	// complete read sees the arrivals since, as one arrival after a pause of that window
	// (their times are unknown, and the pause is its upper bound), so the gaps term
	// doubles it: the wait ends two windows after that read at most.
	within(t, "hiding cheap polls: elapsed", hiding.Elapsed, plain.Elapsed, 2*time.Second+cfg.Quiet+2*cfg.Poll+2*(cfg.Quiet+cfg.Poll))
	if hiding.CompleteReads < 1 {
		t.Errorf("complete reads %d, want the first proposal read again", hiding.CompleteReads)
	}
}
