package drain

import (
	"time"

	"go.uber.org/zap"

	"github.com/meshdrain/meshdrain/pkg/mesh"
)

// DefaultProgressInterval is how often a long watch says where it stands: often enough that
// a 20 s wait is not silent between "phase watch" and "drain finished", rarely enough not to
// flood the app's log (it is written to the app container's stdout).
const DefaultProgressInterval = 5 * time.Second

type progressState struct {
	last     time.Time
	arrivals *float64
}

// progress logs one "waiting" event per ProgressInterval of the watch: the arrivals since the
// previous event, what is in flight, how long the counter has been still and the time left.
func (c *coordinator) progress(now time.Time, r mesh.Reading) {
	if c.progressAt.last.IsZero() {
		c.progressAt = progressState{last: now, arrivals: copyPtr(r.Arrivals)}
		return
	}
	if now.Sub(c.progressAt.last) < c.cfg.ProgressInterval {
		return
	}
	var since *float64
	if r.Arrivals != nil && c.progressAt.arrivals != nil {
		d := *r.Arrivals - *c.progressAt.arrivals
		if d < 0 {
			d = *r.Arrivals // reset
		}
		since = &d
	}
	c.log.Info("waiting",
		optionalField("arrivals_since_last", since),
		zap.Int64("since_last_ms", now.Sub(c.progressAt.last).Milliseconds()),
		optionalField("active", r.Active),
		optionalField("connections", r.Connections),
		zap.Int64("still_for_ms", now.Sub(c.start.Add(c.result.LastArrival)).Milliseconds()),
		zap.Int64("elapsed_ms", now.Sub(c.start).Milliseconds()),
		zap.Int64("left_ms", c.deadline.Sub(now).Milliseconds()),
		zap.Int("admin_errors", c.result.AdminErrors),
		c.riskNow())
	c.progressAt = progressState{last: now, arrivals: copyPtr(r.Arrivals)}
}

func copyPtr(v *float64) *float64 {
	if v == nil {
		return nil
	}
	c := *v
	return &c
}
