package kernel

import (
	"context"
	"fmt"
	"math"
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
// some of them a read late), so the activity is never their sum, which would double the rate
// the rule measures and shorten its window: since the watch began, it is the larger of the
// two (Kernel.appExtra is what the app is ahead by), so whichever counts a request first moves
// the counter and the other, catching up, moves nothing.
//
// Past the lag bound the counter is not read at all: there, requests on connections opened
// before the bound are the holders' (item 2 of docs/meshless.md: they never learn, and the
// app's graceful shutdown serves them), which a count of requests cannot tell apart, and the
// requests of a connection opened past the bound are the kernel's to see.
type appRequests struct {
	src RequestCounter
	// based: the first read set base, the counter then, and kernelBase, the kernel's activity
	// then; last is the latest value read.
	based                  bool
	base, last, kernelBase float64
	lastAdded              time.Time
	reads, failed          int
	lastErr                string
}

// AppSummary is what the app's counter gave, for the final event.
type AppSummary struct {
	// Requests is what the counter counted since the watch began, Added how far it is ahead
	// of the kernel's activity (counted as activity), LastAdded when it last moved the
	// activity.
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

// foldApp takes one read of the app's counter at now. A failed read counts nothing and the
// next one catches up: the counter is cumulative. A value that is not a finite number counts
// nothing either.
func (k *Kernel) foldApp(now time.Time, v float64, err error) {
	a := k.app
	if err == nil && (math.IsNaN(v) || math.IsInf(v, 0)) {
		err = fmt.Errorf("the counter's value is %v", v)
	}
	if err != nil {
		a.failed++
		a.lastErr = err.Error()
		return
	}
	a.reads++
	kernel := k.totalActivity()
	if !a.based {
		a.based, a.base, a.last, a.kernelBase = true, v, v, kernel
		return
	}
	if v < a.last {
		// The counter went back (the app reset it): what it counted stays counted.
		a.base -= a.last - v
	}
	a.last = v
	before := kernel + k.appExtra
	k.appExtra = max(0, (v-a.base)-(kernel-a.kernelBase))
	if kernel+k.appExtra > before {
		a.lastAdded = now
		k.movedAt = now
		if !now.Before(k.lastActivity) {
			k.lastKind, k.lastActivity = ActivityAppRequest, now
		}
	}
}

// totalActivity is the activity the kernel counted on every port.
func (k *Kernel) totalActivity() float64 {
	var sum float64
	for _, n := range k.activity {
		sum += n
	}
	return sum
}

// appSummary is the app counter's account; nil without --app-metrics.
func (k *Kernel) appSummary() *AppSummary {
	a := k.app
	if a == nil {
		return nil
	}
	return &AppSummary{Requests: a.last - a.base, Added: k.appExtra, LastAdded: a.lastAdded, Reads: a.reads, Failed: a.failed, LastError: a.lastErr}
}
