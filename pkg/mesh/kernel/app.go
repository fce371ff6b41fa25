package kernel

import (
	"context"
	"fmt"
	"math"
	"slices"
	"time"
)

// RequestCounter is the app's own count of the requests it served (appmetrics.Source): the
// optional second signal of a pod without a sidecar (--app-metrics).
type RequestCounter interface {
	Requests(ctx context.Context) (float64, error)
}

// ActivityAppRequest is a request the app counted that the kernel had not shown: the final
// event's last_activity when the app's counter moved last.
const ActivityAppRequest = "app-request"

// appRequests folds the app's request counter into the activity counter. The kernel shows
// connections and the data on them; the app's counter shows requests, which matters where
// tcp_info cannot be read (a /proc table shows no data on open connections) and wherever the
// app counts what the kernel cannot name. The two count the same requests in different units
// and at different moments (the app counts most requests when it answers them, the kernel
// some a read late), so their sum would count most requests twice and double the rate the
// rule measures (a shorter rate window), and their larger would let a lead of one hide the
// other's new counts for as long as it lasts. So each count of one is paired with a count of
// the other made within AppPairing of it, and a pair moves the counter once, when its first
// count came: the app's counts pay, oldest first, for the kernel's not yet paid for (a request
// the kernel saw arrive, answered since), and the kernel's pay for the app's (a read that
// names a connection late). A count nothing paid for within AppPairing stays counted on its
// own. So a count of one is never hidden for longer than AppPairing behind the other's, and
// only when its own pair never comes (a connection that carried no request the app counts);
// and only a request the app answers more than AppPairing after the kernel saw it, or named
// that late, counts twice.
//
// Past the lag bound the counter is not read at all: there, requests on connections opened
// before the bound are the holders' (item 2 of docs/meshless.md: they never learn, and the
// app's graceful shutdown serves them), which a count of requests cannot tell apart, and the
// requests of a connection opened past the bound are the kernel's to see.
type appRequests struct {
	src RequestCounter
	// first is the counter at the first read, last at the latest, and shown the kernel's
	// activity as the latest poll showed it.
	first, last float64
	shown       float64
	// kernelOwed are the kernel's counts the app has not paid for yet, appOwed the app's the
	// kernel has not, each oldest first.
	kernelOwed, appOwed []owed
	lastAdded           time.Time
	reads, failed       int
	lastErr             string
}

// owed are n counts of one signal made at at, which the other's may still pay for.
type owed struct {
	at time.Time
	n  float64
}

// AppPairing is how far apart a request's count by the app and by the kernel may come and
// still count once: --latency-allowance's default, the time by which completed-request
// counts trail arrivals.
const AppPairing = time.Second

// AppSummary is what the app's counter gave, for the final event.
type AppSummary struct {
	// Requests is what the counter counted since the watch began; Added what of the
	// activity the app's counts alone moved, LastAdded the latest time they did.
	Requests, Added float64
	LastAdded       time.Time
	// Reads and Failed count the reads of the app's metrics; LastError is the latest failure.
	Reads, Failed int
	LastError     string
}

// readApp reads the app's counter, outside the kernel's lock (an app slow to answer holds
// neither Clients nor Summary), and only before the lag bound; ok is false when it did not.
func (k *Kernel) readApp(ctx context.Context) (v float64, ok bool, err error) {
	if k.app == nil || k.pastBound(k.opts.Now()) {
		return 0, false, nil
	}
	v, err = k.app.src.Requests(ctx)
	return v, true, err
}

// foldApp pairs, at now, the kernel's counts of the poll just made and the app's counter read
// before it (read: it was read, with err). A failed read counts nothing and the next one
// catches up, the counter being cumulative; a value that is not a finite number is a failed
// read.
func (k *Kernel) foldApp(now time.Time, v float64, read bool, err error) {
	a := k.app
	if a == nil {
		return
	}
	kernel := k.shownActivity()
	dK := kernel - a.shown
	a.shown = kernel
	a.kernelOwed = unexpired(a.kernelOwed, now)
	a.appOwed = unexpired(a.appOwed, now)
	// The kernel's new counts first pay for the app's: those requests moved the counter when
	// the app counted them.
	paid := pay(&a.appOwed, dK)
	k.appExtra -= paid
	if dK > paid {
		a.kernelOwed = append(a.kernelOwed, owed{now, dK - paid})
	}
	if !read {
		return
	}
	if err == nil && (math.IsNaN(v) || math.IsInf(v, 0)) {
		err = fmt.Errorf("the counter's value is %v", v)
	}
	if err != nil {
		a.failed++
		a.lastErr = err.Error()
		return
	}
	a.reads++
	if a.reads == 1 {
		a.first, a.last = v, v
		return
	}
	if v < a.last {
		// The counter went back (reset): what it counted stays counted, and it counts on
		// from its new value.
		a.first -= a.last - v
		a.last = v
	}
	dA := v - a.last
	a.last = v
	added := dA - pay(&a.kernelOwed, dA)
	if added <= 0 {
		return
	}
	a.appOwed = append(a.appOwed, owed{now, added})
	k.appExtra += added
	a.lastAdded = now
	k.movedAt = now
	if !now.Before(k.lastActivity) {
		k.lastKind, k.lastActivity = ActivityAppRequest, now
	}
}

// pay takes up to n from the oldest of what is owed, and says how much it took.
func pay(debts *[]owed, n float64) float64 {
	paid := 0.0
	for len(*debts) > 0 && paid < n {
		d := &(*debts)[0]
		take := min(d.n, n-paid)
		d.n -= take
		paid += take
		if d.n <= 0 {
			*debts = (*debts)[1:]
		}
	}
	return paid
}

// unexpired is what is owed for less than AppPairing at now.
func unexpired(debts []owed, now time.Time) []owed {
	for len(debts) > 0 && now.Sub(debts[0].at) > AppPairing {
		debts = debts[1:]
	}
	return debts
}

// shownActivity is the kernel's own activity on the ports a snapshot shows: the watched ones
// that listen.
func (k *Kernel) shownActivity() float64 {
	var sum float64
	for _, p := range k.opts.Ports {
		if slices.Contains(k.listening, uint16(p)) {
			sum += k.activity[uint16(p)]
		}
	}
	return sum
}

// appSummary is the app counter's account; nil without --app-metrics.
func (k *Kernel) appSummary() *AppSummary {
	a := k.app
	if a == nil {
		return nil
	}
	return &AppSummary{Requests: a.last - a.first, Added: k.appExtra, LastAdded: a.lastAdded, Reads: a.reads, Failed: a.failed, LastError: a.lastErr}
}
