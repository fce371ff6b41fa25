// Package requestloop is the check a rollout's owner runs from outside the pod: requests sent
// to a URL in a loop while the rollout goes on, every failure sorted by what the client saw
// (refused, reset, timeout, the proxy's 502, ...). A rollout is clean when the loop saw none:
// it is what the user's second report's curl loop does, with the kinds counted and timed so
// that a failure can be matched with the pod that caused it (docs/meshless.md).
package requestloop

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"sync"
	"syscall"
	"time"

	"github.com/meshdrain/meshdrain/pkg/clock"
)

// Mode is how the loop's requests use connections: the two ways clients reach a pod.
type Mode string

const (
	// KeepAlive reuses each worker's connection, as pooled clients and proxies do: a
	// connection opened before the pod's removal keeps going to it, so the loop sees what
	// the app's own shutdown does to kept-alive clients.
	KeepAlive Mode = "keep-alive"
	// NewConnection opens a connection per request (Connection: close), as the report's curl
	// loop does: each request is routed afresh, so the loop sees the endpoint propagation.
	NewConnection Mode = "new-connection"
)

// Modes are the accepted modes, for flag help.
var Modes = []Mode{KeepAlive, NewConnection}

// Kinds of failure, as the client saw it.
const (
	// Refused: nothing listened (ECONNREFUSED): the app closed its listener while this
	// client was still routed to it.
	Refused = "refused"
	// Reset: the connection was reset (ECONNRESET): the app or a proxy dropped it.
	Reset = "reset"
	// Closed: the server closed the connection before answering (EOF): a kept-alive
	// connection closed as the request went out, which a client retries only for requests
	// it may replay.
	Closed = "closed"
	// Timeout: no answer within --timeout.
	Timeout = "timeout"
	// Other is any other error (DNS, TLS, a malformed answer).
	Other = "other"
)

// httpKind is the kind of a 5xx answer: its status code, so that an ingress's 502 (its
// upstream refused or reset) is told from the app's own 500 or a 503.
func httpKind(code int) string { return fmt.Sprintf("http %d", code) }

// Options configure a loop.
type Options struct {
	// URL is where each request goes.
	URL string
	// Method is the request's method: GET is retried by Go's client on a kept-alive
	// connection the server closed, POST is not (so it shows that race).
	Method string
	// Mode is KeepAlive or NewConnection.
	Mode Mode
	// Workers are the concurrent senders, each with its own connection in KeepAlive mode.
	Workers int
	// Interval is each worker's time from one request's start to the next's.
	Interval time.Duration
	// Timeout bounds each request.
	Timeout time.Duration
	// Count stops the loop after this many requests in all (0: no limit).
	Count int
	// Duration stops the loop after this long (0: until ctx ends).
	Duration time.Duration
	// Clock is the loop's clock; nil is the real one.
	Clock clock.Clock
	// Transport, if set, is the transport the requests use (tests); the mode's settings are
	// applied to it.
	Transport *http.Transport
}

// KindCount is one kind of failure: how many, the first and the last, and one message.
type KindCount struct {
	Kind        string
	Count       int
	First, Last time.Time
	Example     string
}

// Report is what the loop saw.
type Report struct {
	URL      string
	Mode     Mode
	Method   string
	Start    time.Time
	Elapsed  time.Duration
	Requests int
	OK       int
	// Kinds are the failures, the most frequent first.
	Kinds []KindCount
}

// Failures is the number of requests that failed.
func (r Report) Failures() int { return r.Requests - r.OK }

// Validate says what is wrong with o, naming the flag.
func (o Options) Validate() error {
	var errs []error
	if o.URL == "" {
		errs = append(errs, errors.New("a URL is needed: where the requests go (a Service's address through the ingress, or inside the cluster)"))
	}
	if o.Mode != KeepAlive && o.Mode != NewConnection {
		errs = append(errs, fmt.Errorf("--mode %q: want %s or %s", o.Mode, KeepAlive, NewConnection))
	}
	if o.Workers < 1 {
		errs = append(errs, fmt.Errorf("--workers %d: at least 1", o.Workers))
	}
	if o.Interval < 0 || o.Timeout <= 0 || o.Duration < 0 || o.Count < 0 {
		errs = append(errs, errors.New("--interval, --duration and --count must not be negative, and --timeout must be positive"))
	}
	return errors.Join(errs...)
}

// Run sends requests until ctx ends, Duration has passed or Count requests were sent, and
// reports what they met. A request cut by the loop's own end is not counted.
func Run(ctx context.Context, o Options) (Report, error) {
	if err := o.Validate(); err != nil {
		return Report{}, err
	}
	if o.Method == "" {
		o.Method = http.MethodGet
	}
	clk := o.Clock
	if clk == nil {
		clk = clock.Real{}
	}
	tr := o.Transport
	if tr == nil {
		tr = http.DefaultTransport.(*http.Transport).Clone()
	}
	tr.DisableKeepAlives = o.Mode == NewConnection
	tr.MaxIdleConnsPerHost = o.Workers
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: o.Timeout,
		// A redirect is an answer: the loop checks the Service, not where it points.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

	if o.Duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, clk.Now().Add(o.Duration))
		defer cancel()
	}
	l := &loop{o: o, clk: clk, client: client, budget: newBudget(o.Count),
		rep: Report{URL: o.URL, Mode: o.Mode, Method: o.Method, Start: clk.Now()}, kinds: map[string]*KindCount{}}
	var wg sync.WaitGroup
	for range o.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l.work(ctx)
		}()
	}
	wg.Wait()
	return l.report(), nil
}

// loop is one Run: what its workers share, and what their requests met.
type loop struct {
	o      Options
	clk    clock.Clock
	client *http.Client
	// budget hands out request slots when Count bounds the loop.
	budget chan struct{}

	mu    sync.Mutex
	rep   Report
	kinds map[string]*KindCount
}

// newBudget holds count request slots, and is closed once they are taken; with no count it
// is never read.
func newBudget(count int) chan struct{} {
	budget := make(chan struct{}, max(count, 1))
	if count > 0 {
		for range count {
			budget <- struct{}{}
		}
		close(budget)
	}
	return budget
}

// work is one worker: a request every Interval until the loop ends or the budget is spent.
func (l *loop) work(ctx context.Context) {
	for ctx.Err() == nil {
		if l.o.Count > 0 {
			if _, ok := <-l.budget; !ok {
				return
			}
		}
		started := l.clk.Now()
		kind, msg := send(ctx, l.client, l.o)
		if ctx.Err() != nil && kind != "" {
			return // cut by the loop's end, not by the server
		}
		l.record(started, kind, msg)
		if wait := l.o.Interval - l.clk.Now().Sub(started); wait > 0 {
			t := l.clk.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C():
			}
		}
	}
}

// record counts a request that started at started and met kind ("" for an answer).
func (l *loop) record(started time.Time, kind, msg string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.rep.Requests++
	if kind == "" {
		l.rep.OK++
		return
	}
	k := l.kinds[kind]
	if k == nil {
		k = &KindCount{Kind: kind, First: started, Example: msg}
		l.kinds[kind] = k
	}
	k.Count++
	k.Last = started
}

// report is what the loop saw, once its workers are done: the failures the most frequent
// first.
func (l *loop) report() Report {
	rep := l.rep
	rep.Elapsed = l.clk.Now().Sub(rep.Start)
	for _, k := range l.kinds {
		rep.Kinds = append(rep.Kinds, *k)
	}
	sort.Slice(rep.Kinds, func(i, j int) bool {
		if rep.Kinds[i].Count != rep.Kinds[j].Count {
			return rep.Kinds[i].Count > rep.Kinds[j].Count
		}
		return rep.Kinds[i].Kind < rep.Kinds[j].Kind
	})
	return rep
}

// send makes one request and reads its answer; kind is "" when it succeeded (any status
// below 500), else the kind of failure with its message.
func send(ctx context.Context, client *http.Client, o Options) (kind, msg string) {
	req, err := http.NewRequestWithContext(ctx, o.Method, o.URL, nil)
	if err != nil {
		return Other, err.Error()
	}
	resp, err := client.Do(req)
	if err == nil {
		// The body too: a reset in the middle of it is a failure the client sees.
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode >= 500 {
			return httpKind(resp.StatusCode), resp.Status
		}
	}
	if err != nil {
		return Classify(err), err.Error()
	}
	return "", ""
}

// Classify sorts a request's error into a kind.
func Classify(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return Refused
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return Reset
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return Timeout
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return Closed
	}
	return Other
}

// WriteText prints the report for a person: the totals, then one line per kind of failure
// with its count and when it was first and last seen (from the loop's start, and the wall
// clock, to match with the pods' logs).
func WriteText(w io.Writer, r Report) error {
	verdict := "clean: no request failed"
	if r.Failures() > 0 {
		verdict = fmt.Sprintf("%d of %d requests failed", r.Failures(), r.Requests)
	}
	if _, err := fmt.Fprintf(w, "%s %s (%s): %d requests in %s, %d answered below 500; %s\n",
		r.Method, r.URL, r.Mode, r.Requests, r.Elapsed.Round(time.Millisecond), r.OK, verdict); err != nil {
		return err
	}
	if len(r.Kinds) == 0 {
		return nil
	}
	if _, err := fmt.Fprintf(w, "  %-10s %6s  %-27s  %-27s  %s\n", "KIND", "COUNT", "FIRST", "LAST", "EXAMPLE"); err != nil {
		return err
	}
	for _, k := range r.Kinds {
		if _, err := fmt.Fprintf(w, "  %-10s %6d  %-27s  %-27s  %s\n", k.Kind, k.Count, when(r, k.First), when(r, k.Last), k.Example); err != nil {
			return err
		}
	}
	return nil
}

// when is a moment as the offset from the loop's start and the wall clock's time of day.
func when(r Report, t time.Time) string {
	return fmt.Sprintf("+%s (%s)", t.Sub(r.Start).Round(time.Millisecond), t.UTC().Format("15:04:05.000Z"))
}

// JSON is the report as -o json prints it: durations in milliseconds, times in RFC 3339.
type JSON struct {
	URL       string     `json:"url"`
	Mode      Mode       `json:"mode"`
	Method    string     `json:"method"`
	Start     time.Time  `json:"start"`
	ElapsedMS int64      `json:"elapsed_ms"`
	Requests  int        `json:"requests"`
	OK        int        `json:"ok"`
	Failures  int        `json:"failures"`
	Kinds     []JSONKind `json:"kinds"`
}

// JSONKind is one kind of failure in JSON.
type JSONKind struct {
	Kind    string    `json:"kind"`
	Count   int       `json:"count"`
	First   time.Time `json:"first"`
	Last    time.Time `json:"last"`
	FirstMS int64     `json:"first_ms"`
	LastMS  int64     `json:"last_ms"`
	Example string    `json:"example"`
}

// ToJSON converts the report.
func (r Report) ToJSON() JSON {
	out := JSON{URL: r.URL, Mode: r.Mode, Method: r.Method, Start: r.Start, ElapsedMS: r.Elapsed.Milliseconds(),
		Requests: r.Requests, OK: r.OK, Failures: r.Failures(), Kinds: []JSONKind{}}
	for _, k := range r.Kinds {
		out.Kinds = append(out.Kinds, JSONKind{k.Kind, k.Count, k.First, k.Last, k.First.Sub(r.Start).Milliseconds(), k.Last.Sub(r.Start).Milliseconds(), k.Example})
	}
	return out
}
