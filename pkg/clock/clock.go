// Package clock lets every wait in meshdrain run on an injected time source, so that the
// drain logic is tested in milliseconds of real time while it reasons in seconds of pod time.
package clock

import "time"

// Clock is the part of package time that the drain logic depends on.
type Clock interface {
	Now() time.Time
	// NewTimer behaves like time.NewTimer.
	NewTimer(d time.Duration) Timer
}

// Timer is the part of *time.Timer that the drain logic depends on.
type Timer interface {
	C() <-chan time.Time
	Stop() bool
}

// Real is the wall clock.
type Real struct{}

// Now returns time.Now().
func (Real) Now() time.Time { return time.Now() }

// NewTimer returns a real timer.
func (Real) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

type realTimer struct{ t *time.Timer }

func (r realTimer) C() <-chan time.Time { return r.t.C }
func (r realTimer) Stop() bool          { return r.t.Stop() }
