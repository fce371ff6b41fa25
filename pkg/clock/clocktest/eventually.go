// Package clocktest holds what tests that must wait in real time share.
package clocktest

import (
	"testing"
	"time"
)

// EventuallyBound is how long Eventually waits: what a test waits for happens within
// milliseconds on an idle machine, and a busy one can stall a goroutine for seconds. It stays
// below every later time (a default drain time, a 15 s read timeout) that a test rules out.
const EventuallyBound = 10 * time.Second

// Eventually polls cond every 5 ms until it holds, and fails the test, naming what it waited
// for, if it does not within EventuallyBound.
func Eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(EventuallyBound)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", EventuallyBound, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
