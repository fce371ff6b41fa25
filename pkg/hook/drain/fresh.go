package drain

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/meshdrain/meshdrain/pkg/localhttp"
	"github.com/meshdrain/meshdrain/pkg/mesh"
)

// A frozen admin (a cache in front of the admin port, or an admin thread replaying one
// answer) shows counters that stand still while traffic goes on: exactly what "the clients
// have left" looks like. So a still counter is only believed when the answer is known to be
// fresh, by one of two proofs:
//
//   - the sidecar's own admin request counter is in the answer (Envoy's
//     http.admin.downstream_rq_total; a Linkerd proxy's request_total of its admin port):
//     every admin request moves it, meshdrain's included, so it must have grown since the
//     previous poll. Istio's default stats do not include Envoy's.
//   - otherwise /server_info's uptime: whole wall-clock seconds, so a reading taken at or
//     before the quiet window's start and one taken at its end, at least a second later,
//     must differ. It is only asked for when the rule is about to decide quiet.
//
// A poll that fails the check is an admin error, never "no movement".

// UptimeReader is the optional part of a Sidecar that reads Envoy's uptime
// (*envoy.Client has it). Without it, freshness rests on the admin counter alone.
type UptimeReader interface {
	Uptime(ctx context.Context) (time.Duration, error)
}

// ErrFrozen marks an admin answer that cannot be fresh.
var ErrFrozen = errors.New("admin answers are frozen")

type uptimeReading struct {
	sent, done time.Time
	uptime     time.Duration
}

type freshness struct {
	adminLast   *float64
	uptimes     []uptimeReading
	unavailable bool // /server_info answered 404: no uptime to check
}

// maxUptimeReadings bounds the readings kept. Only the first reading of each uptime value
// (and the newest) is kept, so the history spans the whole drain at one reading per second.
const maxUptimeReadings = 64

// freshStats checks a successful poll's admin request counter against the previous poll's.
func (c *coordinator) freshStats(snap mesh.Snapshot) error {
	cur := snap.AdminRequestsTotal
	if cur == nil {
		return nil
	}
	prev := c.fresh.adminLast
	v := *cur
	c.fresh.adminLast = &v
	if prev != nil && v == *prev {
		c.result.FrozenAnswers++
		return fmt.Errorf("%w: %s stayed at %g between two polls, although every admin request moves it", ErrFrozen, c.sidecar.Hints().AdminCounter, v)
	}
	return nil
}

// readUptime takes one uptime reading; false when it could not.
func (c *coordinator) readUptime(ctx context.Context) bool {
	reader, ok := c.sidecar.(UptimeReader)
	if !ok || c.fresh.unavailable {
		return false
	}
	callCtx, cancel := context.WithTimeout(ctx, c.cfg.ConnectTimeout)
	defer cancel()
	sent := c.clock.Now()
	uptime, err := reader.Uptime(callCtx)
	if err != nil {
		var status *localhttp.StatusError
		if errors.As(err, &status) && status.Code == 404 {
			c.fresh.unavailable = true
			c.log.Warn("admin answers cannot be checked for freshness: no /server_info and no admin request counter in the stats",
				zap.String("error", err.Error()))
			return false
		}
		c.adminError(err)
		return false
	}
	c.fresh.add(uptimeReading{sent: sent, done: c.clock.Now(), uptime: uptime})
	return true
}

// add keeps a reading. Of a run of readings with the same uptime only the first and the
// newest are kept: the first is what proves an answer frozen a second later, and any of them
// serves as well as an anchor.
func (f *freshness) add(r uptimeReading) {
	n := len(f.uptimes)
	if n >= 2 && f.uptimes[n-1].uptime == r.uptime && f.uptimes[n-2].uptime == r.uptime {
		f.uptimes[n-1] = r
	} else {
		f.uptimes = append(f.uptimes, r)
	}
	if len(f.uptimes) > maxUptimeReadings {
		f.uptimes = f.uptimes[len(f.uptimes)-maxUptimeReadings:]
	}
}

// beginFreshness takes the first uptime reading before the watch starts, so that it can
// anchor the first quiet window, when the stats carry no admin counter.
func (c *coordinator) beginFreshness(ctx context.Context, snap mesh.Snapshot) {
	if snap.AdminRequestsTotal != nil {
		v := *snap.AdminRequestsTotal
		c.fresh.adminLast = &v
		return
	}
	c.readUptime(ctx)
}

// confirmQuiet reports whether a quiet decision may stand: the answers are known to be fresh
// across the window that started at windowStart. A false answer keeps the watch going.
func (c *coordinator) confirmQuiet(ctx context.Context, windowStart time.Time, snap mesh.Snapshot) bool {
	if snap.AdminRequestsTotal != nil {
		return true // checked at every poll
	}
	if _, ok := c.sidecar.(UptimeReader); !ok || c.fresh.unavailable {
		return true
	}
	if !c.readUptime(ctx) {
		return c.fresh.unavailable
	}
	now := c.fresh.uptimes[len(c.fresh.uptimes)-1]
	// A reading sent a second or more after an earlier one was answered must be larger.
	for _, earlier := range c.fresh.uptimes[:len(c.fresh.uptimes)-1] {
		if gap := now.sent.Sub(earlier.done); gap >= time.Second && now.uptime <= earlier.uptime {
			c.result.FrozenAnswers++
			c.adminError(fmt.Errorf("%w: /server_info uptime %v, no more than %v read %v earlier", ErrFrozen, now.uptime, earlier.uptime, gap.Round(time.Millisecond)))
			return false
		}
	}
	for i := len(c.fresh.uptimes) - 2; i >= 0; i-- {
		anchor := c.fresh.uptimes[i]
		if !anchor.done.After(windowStart) {
			return now.uptime > anchor.uptime
		}
	}
	return false // no reading from before the window yet: the next one will be
}
