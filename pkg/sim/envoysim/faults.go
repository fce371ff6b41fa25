package envoysim

import (
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"go.uber.org/zap"
)

// FaultMode is how the admin API misbehaves, so that meshdrain's handling of a sick sidecar
// can be tested against real sockets rather than mocked errors.
type FaultMode string

// Admin fault modes.
const (
	FaultNone     FaultMode = ""
	FaultRefuse   FaultMode = "refuse"   // the admin port refuses connections
	FaultHang     FaultMode = "hang"     // accepts, never answers (until cleared)
	FaultSlow     FaultMode = "slow"     // answers correctly after a delay
	FaultError    FaultMode = "500"      // answers 500 to everything
	FaultGarbage  FaultMode = "garbage"  // answers 200 with a body that is no stats format
	FaultTruncate FaultMode = "truncate" // announces the whole body, sends half, closes
	// FaultFrozen replays, for each request (method, path and query), the answer the admin
	// gave it last before the fault was set, as a cache in front of the admin port or an
	// admin thread stuck on one answer would: counters and /server_info's uptime stand
	// still while traffic goes on. A request never answered before is answered live once,
	// then frozen. Frozen answers do not reach Envoy, so they do not count as admin requests.
	FaultFrozen FaultMode = "frozen"
)

// maxFrozenAnswer bounds what the frozen fault remembers per request: a filtered poll is a
// few kilobytes; an unfiltered dump of a big emulated Envoy is not worth keeping.
const maxFrozenAnswer = 1 << 20

// Faults injects faults into a running sidecar. Every method is safe to call at any time.
type Faults struct {
	s *Sidecar

	mu            sync.Mutex
	mode          FaultMode
	slow          time.Duration
	release       chan struct{} // closed when the current fault is replaced
	dieAfterDrain time.Duration
	dieArmed      bool
	// answers is the last answer to each request, replayed under FaultFrozen.
	answers map[string]adminResponse
}

type faultState struct {
	mode    FaultMode
	slow    time.Duration
	release <-chan struct{}
}

// SetAdmin switches the admin API to mode; slow is the delay of FaultSlow. FaultNone (or
// Clear) restores normal behaviour and, after FaultRefuse, listens again on the same port.
func (f *Faults) SetAdmin(mode FaultMode, slow time.Duration) error {
	switch mode {
	case FaultNone, FaultRefuse, FaultHang, FaultSlow, FaultError, FaultGarbage, FaultTruncate, FaultFrozen:
	default:
		return fmt.Errorf("unknown admin fault %q", mode)
	}
	f.mu.Lock()
	previous := f.mode
	if f.release != nil {
		close(f.release)
	}
	f.mode, f.slow, f.release = mode, slow, make(chan struct{})
	f.mu.Unlock()
	f.s.log.Info("admin fault set", zap.String("fault", string(mode)), zap.Duration("delay", slow))
	if mode == FaultRefuse {
		f.s.admin.refuse()
		return nil
	}
	if previous == FaultRefuse {
		return f.s.admin.restore()
	}
	return nil
}

// AdminRefuse makes the admin port refuse connections, as when Envoy is not listening.
func (f *Faults) AdminRefuse() error { return f.SetAdmin(FaultRefuse, 0) }

// AdminHang makes the admin API accept requests and never answer them.
func (f *Faults) AdminHang() error { return f.SetAdmin(FaultHang, 0) }

// AdminSlow delays every admin answer by d, as a busy main thread does.
func (f *Faults) AdminSlow(d time.Duration) error { return f.SetAdmin(FaultSlow, d) }

// AdminError makes every admin request answer 500.
func (f *Faults) AdminError() error { return f.SetAdmin(FaultError, 0) }

// AdminGarbage makes every admin request answer 200 with a body in no known format.
func (f *Faults) AdminGarbage() error { return f.SetAdmin(FaultGarbage, 0) }

// AdminTruncate makes every admin answer stop halfway through its announced body.
func (f *Faults) AdminTruncate() error { return f.SetAdmin(FaultTruncate, 0) }

// AdminFrozen makes the admin API replay its last answer to each request.
func (f *Faults) AdminFrozen() error { return f.SetAdmin(FaultFrozen, 0) }

// Clear removes any admin fault.
func (f *Faults) Clear() error { return f.SetAdmin(FaultNone, 0) }

// ResetCounters zeroes every counter, as a restarted Envoy shows them: meshdrain must not read
// a counter going backwards as a huge rate.
func (f *Faults) ResetCounters() { f.s.store.resetCounters() }

// DieMidDrain makes Envoy crash `after` the next drain starts (at once if one already has).
func (f *Faults) DieMidDrain(after time.Duration) {
	f.mu.Lock()
	f.dieAfterDrain, f.dieArmed = after, true
	f.mu.Unlock()
	if f.s.draining() {
		f.drainStarted()
	}
}

// Crash makes Envoy exit at once, as a segfault or an OOM kill would.
func (f *Faults) Crash() { f.s.exit("crashed") }

// drainStarted is called by the drain logic when a drain sequence starts.
func (f *Faults) drainStarted() {
	f.mu.Lock()
	armed, after := f.dieArmed, f.dieAfterDrain
	f.dieArmed = false
	f.mu.Unlock()
	if armed {
		f.s.afterFunc(after, func() { f.s.exit("crashed mid-drain") })
	}
}

func (f *Faults) current() faultState {
	f.mu.Lock()
	defer f.mu.Unlock()
	return faultState{mode: f.mode, slow: f.slow, release: f.release}
}

// delay applies FaultHang and FaultSlow; false means the request must not be answered.
func (f *Faults) delay(r *http.Request, fault faultState) bool {
	var wait <-chan time.Time
	switch fault.mode {
	case FaultHang:
	case FaultSlow:
		t := time.NewTimer(fault.slow)
		defer t.Stop()
		wait = t.C
	default:
		return true
	}
	select {
	case <-wait:
		return true
	case <-fault.release:
		return true
	case <-r.Context().Done():
		return false
	case <-f.s.closing:
		return false
	}
}

func frozenKey(r *http.Request) string { return r.Method + " " + r.URL.RequestURI() }

// remember keeps a live answer to replay under FaultFrozen: the latest one while the admin is
// healthy, the first one for a request first seen while frozen.
func (f *Faults) remember(r *http.Request, resp adminResponse) {
	if len(resp.body) > maxFrozenAnswer || resp.after != nil {
		return
	}
	key := frozenKey(r)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.answers == nil {
		f.answers = map[string]adminResponse{}
	}
	if _, known := f.answers[key]; known && f.mode == FaultFrozen {
		return
	}
	f.answers[key] = resp
}

// frozenAnswer returns the answer to replay for r under FaultFrozen, if there is one.
func (f *Faults) frozenAnswer(r *http.Request) (adminResponse, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.mode != FaultFrozen {
		return adminResponse{}, false
	}
	resp, ok := f.answers[frozenKey(r)]
	return resp, ok
}

// writeFrozen replays an answer as a cache in front of the admin port would: Envoy never sees
// the request, so none of the admin stats move.
func (a *adminServer) writeFrozen(w http.ResponseWriter, resp adminResponse) {
	h := w.Header()
	h.Set("Content-Type", resp.contentType)
	h.Set("Server", "envoy")
	h.Set("Content-Length", strconv.Itoa(len(resp.body)))
	w.WriteHeader(resp.code)
	_, _ = w.Write(resp.body)
}
