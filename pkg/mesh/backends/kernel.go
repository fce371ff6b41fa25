package backends

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/meshdrain/meshdrain/pkg/hook/evidence"
	"github.com/meshdrain/meshdrain/pkg/mesh"
	"github.com/meshdrain/meshdrain/pkg/mesh/appmetrics"
	"github.com/meshdrain/meshdrain/pkg/mesh/kernel"
	"github.com/meshdrain/meshdrain/pkg/sockets"
)

// KernelOptions are how --mesh none opens the pod's kernel.
type KernelOptions struct {
	// IgnoreSources are --ignore-source as given; Lookup reads the $(NAME) among them from
	// the environment.
	IgnoreSources []string
	Lookup        func(string) (string, bool)
	// LagBound is --eds-lag-bound; WaitPastBoundOpeners is --wait-past-bound-openers.
	LagBound             time.Duration
	WaitPastBoundOpeners bool
	// AppMetrics and AppRequests are --app-metrics and --app-requests; AppRequestsSet says
	// --app-requests was given (it needs --app-metrics).
	AppMetrics, AppRequests string
	AppRequestsSet          bool
	// Offline checks a hook away from its pod (plan): the pod's environment, kernel and app
	// are not this machine's, so only the flags are checked.
	Offline bool
	// InPod checks, at open, what the hook needs of the pod's kernel: the TCP counters and a
	// network namespace of the pod's own. ListenersToo (--validate) adds a listener on
	// every --port.
	InPod, ListenersToo bool
}

// ParseIgnoreSources reads --ignore-source: each a CIDR, an IP or $(NAME), a variable lookup
// reads. Offline, a $(NAME) is left out unread: the pod's env has the variable (plan writes
// it from the downward API), the machine that checks the hook's flags does not.
func ParseIgnoreSources(values []string, lookup func(string) (string, bool), offline bool) ([]netip.Prefix, []error) {
	var ignore []netip.Prefix
	var problems []error
	for _, v := range values {
		if _, ref := kernel.EnvRef(v); ref && offline {
			continue
		}
		p, err := kernel.ParseIgnoreSource(v, lookup)
		if err != nil {
			problems = append(problems, err)
			continue
		}
		ignore = append(ignore, p)
	}
	return ignore, problems
}

// openKernel opens the kernel as the backend (--mesh none) and checks, in the pod, what it
// needs (KernelOptions.InPod). A --port nobody listens on is not refused without
// ListenersToo: the drain names the port and falls back to --fallback-wait, as a sidecar's
// missing port does.
func openKernel(ctx context.Context, o Options, b *Backend) {
	k := o.Kernel
	ignore, problems := ParseIgnoreSources(k.IgnoreSources, k.Lookup, k.Offline)
	b.Problems = append(b.Problems, problems...)
	b.NoDrainCall = true
	// The lag bound runs from the hook's start: the app's start-up reads below may take up
	// to the request timeout each.
	start := time.Now()
	app := openAppRequests(ctx, o, b)
	reader := sockets.NewReader()
	opts := kernel.Options{Ports: o.Selector.Ports, Ignore: ignore, LagBound: k.LagBound, Reader: reader, Start: start,
		WaitPastBoundOpeners: k.WaitPastBoundOpeners}
	if app != nil {
		opts.AppRequests, opts.Own = app, app.Own
	}
	kern, err := kernel.New(opts)
	if err != nil {
		b.problem("%w", err)
		return
	}
	b.Sidecar, b.Clients, b.Reader, b.Ignore = kern, evidence.Kernel{Kernel: kern}, reader, ignore
	if k.Offline || !k.InPod {
		return // the pod's kernel is not this machine's, or only the flags are wanted
	}
	if err := kernel.CheckCounters(""); err != nil {
		b.problem("%w", err)
	}
	if err := kernel.CheckNamespace(reader, ignore); err != nil {
		b.problem("%w", err)
	}
	if !k.ListenersToo {
		return
	}
	notListening, listening, err := kernel.CheckListening(reader, o.Selector.Ports)
	switch {
	case err != nil:
		b.problem("%w", err)
	case len(notListening) > 0:
		b.problem("%s; as a hook it would hold the app for --fallback-wait", mesh.None.Terms().PortsMissing(notListening, listening))
	}
}

// openAppRequests opens the app's request counter of --app-metrics (nil without one) and, in
// the pod, reads it once within the request timeout: a URL that does not answer, or a counter
// the app types as something else, is a start problem naming the flag. A counter with no
// series yet is only a warning: client libraries create a labelled series at its first
// request.
func openAppRequests(ctx context.Context, o Options, b *Backend) *appmetrics.Source {
	k := o.Kernel
	if k.AppMetrics == "" {
		if k.AppRequestsSet {
			b.problem("--app-requests names the counter --app-metrics reads: give --app-metrics too")
		}
		return nil
	}
	sel, err := appmetrics.ParseSelector(k.AppRequests)
	if err != nil {
		b.problem("--app-requests: %w", err)
		return nil
	}
	src, err := appmetrics.New(k.AppMetrics, sel, appmetrics.Options{Timeout: o.RequestTimeout, AllowRemote: o.AllowRemote})
	if err != nil {
		b.problem("--app-metrics: %w", err)
		return nil
	}
	if k.Offline || !k.InPod {
		return src // the app is in the pod, not on this machine
	}
	r, err := src.Read(ctx)
	if err == nil && r.Matched > 0 {
		warnSelfCounted(ctx, src, r, b)
	}
	switch {
	case errors.Is(err, appmetrics.ErrNotACounter):
		b.problem("--app-requests: %w", err)
	case err != nil:
		b.problem("--app-metrics: %w", err)
	case r.Series == 0:
		b.Warnings = append(b.Warnings, fmt.Sprintf("--app-requests %s: %s has no such series yet; a client library creates one at its first request, so it is read at every poll (the kernel's view counts meanwhile)", sel, src.URL()))
	case r.Matched == 0:
		b.Warnings = append(b.Warnings, fmt.Sprintf("--app-requests %s: none of the %d series of %s match the labels: until one does, the app's counter adds nothing", sel, r.Series, sel.Name))
	}
	return src
}

// warnSelfCounted reads the counter twice more, at once: a series that grew by exactly one at
// each read is most likely counting the reads of the metrics themselves (an app that counts
// every path), and would make every poll look like a request until the lag bound. It is only
// a warning: real requests can do the same.
func warnSelfCounted(ctx context.Context, src *appmetrics.Source, first appmetrics.Reading, b *Backend) {
	prev, series := first, ""
	for i := 0; i < 2; i++ {
		r, err := src.Read(ctx)
		if err != nil {
			return
		}
		grew := r.GrewByOne(prev)
		if grew == "" || (series != "" && grew != series) {
			return
		}
		prev, series = r, grew
	}
	b.Warnings = append(b.Warnings, fmt.Sprintf("--app-requests %s: the series %s grew by one at each of three reads of %s: if it counts the reads of the metrics themselves, leave their path out with a label matcher, or every poll looks like a request until --eds-lag-bound",
		src.Selector(), series, src.URL()))
}
