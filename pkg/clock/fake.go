package clock

import (
	"sort"
	"sync"
	"time"
)

// Fake is a manually driven clock for tests. Time moves only through Advance, or, when
// AutoAdvance is set, whenever a timer is created: the clock jumps straight to the timer's
// deadline, which lets a single-goroutine poll loop run a minute of pod time instantly.
type Fake struct {
	mu          sync.Mutex
	now         time.Time
	timers      []*fakeTimer
	autoAdvance bool
}

// NewFake returns a Fake clock set to start.
func NewFake(start time.Time) *Fake { return &Fake{now: start} }

// NewAutoFake returns a Fake clock that advances to each new timer's deadline as soon as the
// timer is created. Only use it where one goroutine owns all waiting.
func NewAutoFake(start time.Time) *Fake { return &Fake{now: start, autoAdvance: true} }

// Now returns the fake time.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// NewTimer returns a timer that fires when the fake time reaches now+d.
func (f *Fake) NewTimer(d time.Duration) Timer {
	f.mu.Lock()
	t := &fakeTimer{f: f, at: f.now.Add(d), c: make(chan time.Time, 1)}
	f.timers = append(f.timers, t)
	auto := f.autoAdvance
	f.mu.Unlock()
	if auto {
		f.Advance(d)
	} else {
		f.fire()
	}
	return t
}

// Advance moves the fake time forward by d and fires every timer that is due.
func (f *Fake) Advance(d time.Duration) {
	f.mu.Lock()
	f.now = f.now.Add(d)
	f.mu.Unlock()
	f.fire()
}

// Waiters reports how many timers are pending: tests use it to know that the code under test
// has started waiting before they advance the clock.
func (f *Fake) Waiters() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.timers)
}

func (f *Fake) fire() {
	f.mu.Lock()
	defer f.mu.Unlock()
	sort.Slice(f.timers, func(i, j int) bool { return f.timers[i].at.Before(f.timers[j].at) })
	kept := f.timers[:0]
	for _, t := range f.timers {
		if !t.at.After(f.now) {
			t.c <- f.now
			continue
		}
		kept = append(kept, t)
	}
	f.timers = kept
}

type fakeTimer struct {
	f  *Fake
	at time.Time
	c  chan time.Time
}

func (t *fakeTimer) C() <-chan time.Time { return t.c }

func (t *fakeTimer) Stop() bool {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	for i, other := range t.f.timers {
		if other == t {
			t.f.timers = append(t.f.timers[:i], t.f.timers[i+1:]...)
			return true
		}
	}
	return false
}
