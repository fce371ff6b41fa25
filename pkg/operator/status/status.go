package status

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/meshdrain/meshdrain/pkg/clock"
	"github.com/meshdrain/meshdrain/pkg/hook/drain"
	"github.com/meshdrain/meshdrain/pkg/hook/evidence"
	"github.com/meshdrain/meshdrain/pkg/hook/regime"
	"github.com/meshdrain/meshdrain/pkg/hook/risk"
	"github.com/meshdrain/meshdrain/pkg/mesh"
	"github.com/meshdrain/meshdrain/pkg/operator/output"
	"github.com/meshdrain/meshdrain/pkg/sockets"
)

// Options configure one status run.
type Options struct {
	// AdminURL is only used in messages; Admin does the requests.
	AdminURL string
	Selector mesh.Selector
	Output   string // OutputText (default), OutputJSON or OutputYAML
	// Watch samples every Interval until ctx ends (Ctrl-C), showing the request rate.
	Watch bool
	// Interval is the time between two samples (default 1s). Without Watch it separates the
	// two reads of a sampler that counts from its first (the kernel's, --mesh none).
	Interval time.Duration
	// SampleTimeout bounds one sample's admin calls (default 2s): the admin API runs on
	// Envoy's main thread and a hung one must not freeze the display.
	SampleTimeout time.Duration
	// Terminal redraws the text report in place on each refresh; otherwise --watch prints a
	// plain line per sample.
	Terminal bool
	// Samples stops a watch after this many samples (0: until ctx ends).
	Samples int
	Clock   clock.Clock
	// Clients, when set, adds the clients of the inbound listener to each sample, from the
	// socket table of the network namespace status runs in (the pod's, under kubectl exec).
	Clients ClientWatch
	// DrainAtStart: the pod's prestop drains when its hook starts (--drain-at start), so the
	// pod is in regime (a) by its configuration. Otherwise the regime line judges whether the
	// sidecar drains on its own before meshdrain's drain call, which regime (b) forbids.
	DrainAtStart bool
	// Lag is the pod's prestop --lag-dist and Risk its --risk: each sample then shows the
	// figure the hook would state (Report.Risk). A zero Lag: no figure.
	Lag  risk.Distribution
	Risk float64
}

// ClientWatch follows the inbound listener's clients (evidence.Watch in the pod), judged as
// prestop judges them.
type ClientWatch interface {
	// Read reads the socket table before the sample's stats are fetched, so that the stats
	// count the cause of any close the read shows (a response marked Connection: close).
	Read()
	// Clients judges the read with the sample's stats.
	Clients(now time.Time, listener *mesh.Listener, traffic drain.Traffic, drainSeen evidence.DrainSeen) ([]sockets.Client, error)
}

// clearScreen moves the cursor home and clears the terminal, as watch(1) does between frames.
const clearScreen = "\x1b[H\x1b[2J"

// Run prints the sidecar's inbound side to out. Without Watch it shows one sample and returns
// its error (an *UnreachableError when nothing answers); from the kernel (--mesh none) that
// sample is a second read, Interval after the first (oneShot). With Watch it keeps sampling until
// ctx ends, showing failures in place of a sample rather than stopping: watching a sidecar
// restart or come up is a use, not an error. The end of ctx is the normal end of a watch.
func Run(ctx context.Context, sc Sampler, out io.Writer, o Options) error {
	if o.Output == "" {
		o.Output = OutputText
	}
	if _, err := ParseOutput(o.Output); err != nil {
		return err
	}
	if o.Interval <= 0 {
		o.Interval = time.Second
	}
	if o.SampleTimeout <= 0 {
		o.SampleTimeout = 2 * time.Second
	}
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	regime := regimeWatch{drainAtEnd: !o.DrainAtStart}
	figure := riskWatch{lag: o.Lag, level: o.Risk}
	if !o.Watch {
		r, err := oneShot(ctx, sc, o)
		if err != nil {
			return err
		}
		regime.fill(&r)
		figure.fill(&r)
		return write(out, r, o)
	}

	var prev, prevShown *Report
	var drainSince drainWatch
	for n := 1; ; n++ {
		r, err := sample(ctx, sc, o)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			prev = nil // a rate across a gap would mix two sidecar lives
			if werr := writeError(out, err, o); werr != nil {
				return werr
			}
		} else {
			r = withRates(prev, r)
			drainSince.fill(&r)
			regime.fill(&r)
			figure.fill(&r)
			prev = &r
			if werr := write(out, r, o); werr != nil {
				return werr
			}
			if o.Watch && !o.Terminal && o.Output == OutputText {
				// A line per sample has no room for the clients: a line per change.
				if werr := WriteClientChanges(out, prevShown, r); werr != nil {
					return werr
				}
			}
			prevShown = &r
		}
		if o.Samples > 0 && n >= o.Samples {
			return nil
		}
		if !wait(ctx, o.Clock, o.Interval) {
			return nil
		}
	}
}

// baseliner is a Sampler whose counts start at its first sample: the kernel's (--mesh none)
// counts the activity and the clients' sends since its first read, where a sidecar's counters
// run since the sidecar started.
type baseliner interface {
	firstSampleIsBaseline() bool
}

// oneShot takes the sample a status without --watch shows. From a sampler that counts from its
// first sample, one read would show every port at 0 and every client idle, a client sending
// twice a second included: it reads twice, Interval apart, and shows the second read with its
// rates, so that a one-shot status shows who is sending as --watch does.
func oneShot(ctx context.Context, sc Sampler, o Options) (Report, error) {
	first, err := sample(ctx, sc, o)
	if b, ok := sc.(baseliner); err != nil || !ok || !b.firstSampleIsBaseline() {
		return first, err
	}
	if !wait(ctx, o.Clock, o.Interval) {
		return Report{}, fmt.Errorf("interrupted before the read that follows the first by --interval %s: %w", o.Interval, ctx.Err())
	}
	r, err := sample(ctx, sc, o)
	if err != nil {
		return r, err
	}
	return withRates(&first, r), nil
}

func sample(ctx context.Context, sc Sampler, o Options) (Report, error) {
	ctx, cancel := context.WithTimeout(ctx, o.SampleTimeout)
	defer cancel()
	if o.Clients != nil {
		o.Clients.Read()
	}
	r, err := sc.Sample(ctx, o.AdminURL, o.Selector, o.Clock.Now())
	// A Linkerd proxy closes connections itself on its drain: its clients' closes say nothing.
	if err == nil && o.Clients != nil && r.Mesh != mesh.Linkerd {
		withClients(&r, o.Clients, o.Clock.Now())
	}
	return r, err
}

// drainWatch remembers when a watch first saw the sidecar draining.
type drainWatch struct {
	samples int
	since   *time.Time
	before  bool // it drained already at the first sample
}

// fill sets the report's drain.Since from the samples so far.
func (d *drainWatch) fill(r *Report) {
	d.samples++
	if r.Drain == nil || !r.Drain.Draining {
		return
	}
	if d.since == nil {
		at := r.SampledAt
		d.since, d.before = &at, d.samples == 1
	}
	r.Drain.Since, r.Drain.BeforeFirstSample = d.since, d.before
}

// regimeWatch judges the drain regime from every sample of a status run: the first is the
// baseline, as meshdrain's first read is prestop's. A failed sample leaves it as it was (the
// rise it keeps is the most seen, so a restarted sidecar hides nothing).
type regimeWatch struct {
	drainAtEnd bool
	reads      regime.Watch
}

// RegimeSpan names status's samples in the regime's why.
const RegimeSpan = "since status's first sample"

// fill sets the report's regime from the samples so far, this one included.
func (w *regimeWatch) fill(r *Report) {
	if r.Mesh == mesh.Linkerd || r.Mesh == mesh.None { // no drain call: no regime
		return
	}
	w.reads.Observe(r.traffic, r.drainSeen.Known)
	r.regimeSeen = w.reads.Seen()
	r.regimeSeen.DrainAtEnd, r.regimeSeen.Span = w.drainAtEnd, RegimeSpan
	r.DrainRegime, r.DrainRegimeWhy = r.regimeSeen.Judge()
}

func write(out io.Writer, r Report, o Options) error {
	switch {
	case o.Output == OutputJSON || o.Output == OutputYAML:
		return output.Write(out, o.Output, r)
	case o.Watch && o.Terminal:
		if _, err := io.WriteString(out, clearScreen); err != nil {
			return err
		}
		if err := WriteText(out, r); err != nil {
			return err
		}
		_, err := fmt.Fprintf(out, "\nevery %s, Ctrl-C to stop\n", o.Interval)
		return err
	case o.Watch:
		return WriteLine(out, r)
	}
	return WriteText(out, r)
}

func writeError(out io.Writer, err error, o Options) error {
	now := o.Clock.Now().UTC().Format(time.RFC3339)
	switch {
	case o.Output == OutputJSON || o.Output == OutputYAML:
		return output.Write(out, o.Output, map[string]string{"sampled_at": now, "error": err.Error()})
	case o.Terminal:
		_, werr := fmt.Fprintf(out, "%s%s error: %v\n\nretrying every %s, Ctrl-C to stop\n", clearScreen, now, err, o.Interval)
		return werr
	}
	_, werr := fmt.Fprintf(out, "%s error: %v\n", now, err)
	return werr
}

// wait sleeps d on the injected clock; false when ctx ended first.
func wait(ctx context.Context, c clock.Clock, d time.Duration) bool {
	t := c.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C():
		return true
	}
}
