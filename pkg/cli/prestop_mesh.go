package cli

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/meshdrain/meshdrain/pkg/hook/drain"
	"github.com/meshdrain/meshdrain/pkg/hook/evidence"
	"github.com/meshdrain/meshdrain/pkg/mesh"
	"github.com/meshdrain/meshdrain/pkg/mesh/appmetrics"
	"github.com/meshdrain/meshdrain/pkg/mesh/kernel"
	"github.com/meshdrain/meshdrain/pkg/mesh/linkerd"
	"github.com/meshdrain/meshdrain/pkg/mesh/sidecars"
	"github.com/meshdrain/meshdrain/pkg/sockets"
)

// prestop's --mesh takes the values of status and check (mesh.Names(mesh.Choices...)). Its default is
// istio, not auto: a hook runs once, at the worst moment, and must not spend its budget
// asking which sidecar it has, nor risk a guess that would skip Envoy's drain call; a hook
// written before --mesh existed keeps exactly what it did; and plan writes --mesh=linkerd
// into every Linkerd hook. auto is for a hook shared across meshes (README, "Which sidecar").
const defaultPrestopMesh = mesh.Istio

// sidecarOptions are the options every admin client of this hook is opened with. Each admin
// request may take up to --connect-timeout: filtering still walks every stat of a large
// sidecar on Envoy's main thread.
func (o *prestopOptions) sidecarOptions(cfg *drain.Config) sidecars.Options {
	return sidecars.Options{RequestTimeout: o.connectTimeout, AllowRemote: o.allowRemote, Deadline: cfg.Deadline, AppDrain: o.appDrain}
}

// sidecarFor builds the sidecar prestop drains for a mesh chosen at start (istio, envoy or
// linkerd), with the problems that make the configuration unusable for it and the warnings
// worth a log line. adminURL is --admin, already resolved to the mesh's default when unset.
func (o *prestopOptions) sidecarFor(chosen mesh.Mesh, adminURL string, drainModeSet bool, cfg *drain.Config) (drain.Sidecar, []string, []error) {
	sidecar, err := sidecars.Open(chosen, adminURL, o.sidecarOptions(cfg))
	if err != nil {
		return nil, nil, []error{usageError("--admin: %v", err)}
	}
	client, ok := sidecar.(*linkerd.Client)
	if !ok {
		return sidecar, nil, nil
	}
	warnings, problems := o.linkerdChecks(client.AdminPort(), drainModeSet)
	// No drain call: the coordinator then claims none (drain_called false), and the hints
	// say why (no_drain_call).
	cfg.DrainMode = mesh.DrainNone
	return &linkerd.HookSidecar{Client: client}, warnings, problems
}

// linkerdChecks are the start checks of a Linkerd drain.
func (o *prestopOptions) linkerdChecks(adminPort int, drainModeSet bool) (warnings []string, problems []error) {
	if len(o.clusters) > 0 || len(o.httpPrefixes) > 0 {
		problems = append(problems, usageError("--cluster and --http-prefix name Envoy stats; a Linkerd proxy counts per target port: use --port"))
	}
	if err := linkerd.CheckPorts(o.ports, adminPort); err != nil {
		problems = append(problems, usageError("--port: %v", err))
	}
	if drainModeSet && o.drainMode != string(mesh.DrainNone) {
		warnings = append(warnings, fmt.Sprintf("--drain-mode %s has no effect on a Linkerd proxy: it has no drain endpoint, and meshdrain makes no drain call", o.drainMode))
	}
	return warnings, problems
}

// chooseKernel builds the kernel as the sidecar (--mesh none) and checks, in the pod, what
// it needs: the TCP counters, a network namespace of the pod's own, and (with --validate)
// a listener on every --port. A hook whose --port nobody listens on is not refused here: its
// drain names the port and falls back to --fallback-wait, as a sidecar's missing port does.
func (setup *prestopSetup) chooseKernel(ctx context.Context, cfg *drain.Config, lookup func(string) (string, bool)) {
	o := &setup.opts
	add := func(format string, args ...any) { setup.problems = append(setup.problems, usageError(format, args...)) }
	for _, f := range []struct {
		flag  string
		given bool
	}{{"admin", o.admin != ""}, {"cluster", len(o.clusters) > 0}, {"http-prefix", len(o.httpPrefixes) > 0}, {"inbound-listener-port", len(o.listenerPorts) > 0}} {
		if f.given {
			add("--%s names a sidecar's setting; --mesh none has no sidecar: watch the app's own ports with --port", f.flag)
		}
	}
	if o.drainAt == drainAtEnd {
		add("--drain-at end defers a sidecar's drain call; --mesh none has no sidecar and makes none")
	}
	if setup.drainModeSet && o.drainMode != string(mesh.DrainNone) {
		setup.warnings = append(setup.warnings, fmt.Sprintf("--drain-mode %s has no effect with --mesh none: there is no sidecar, and meshdrain makes no drain call", o.drainMode))
	}
	var ignore []netip.Prefix
	for _, v := range o.ignoreSources {
		if _, ref := kernel.EnvRef(v); ref && o.offline {
			// plan's check away from the pod: the pod's env has the variable (plan writes it
			// from the downward API), this machine's does not.
			continue
		}
		p, err := kernel.ParseIgnoreSource(v, lookup)
		if err != nil {
			add("%v", err)
			continue
		}
		ignore = append(ignore, p)
	}
	cfg.DrainMode = mesh.DrainNone
	// The lag bound runs from the hook's start: the app's start-up reads below may take up
	// to --connect-timeout each.
	start := time.Now()
	app := setup.appRequests(ctx)
	reader := sockets.NewReader()
	opts := kernel.Options{Ports: o.ports, Ignore: ignore, LagBound: o.edsLagBound, Reader: reader, Start: start,
		WaitPastBoundOpeners: o.waitPastBoundOpeners}
	if app != nil {
		opts.AppRequests, opts.Own = app, app.Own
	}
	k, err := kernel.New(opts)
	if err != nil {
		add("%v", err)
		return
	}
	setup.sidecar = k
	cfg.Clients = evidence.Kernel{Kernel: k}
	if o.offline {
		return // the pod's kernel is not this machine's
	}
	if err := kernel.CheckCounters(""); err != nil {
		add("%v", err)
	}
	if err := kernel.CheckNamespace(reader, ignore); err != nil {
		add("%v", err)
	}
	if o.validate {
		notListening, listening, err := kernel.CheckListening(reader, o.ports)
		switch {
		case err != nil:
			add("%v", err)
		case len(notListening) > 0:
			add("%s; as a hook it would hold the app for --fallback-wait", mesh.None.Terms().PortsMissing(notListening, listening))
		}
	}
}

// appRequests builds the app's request counter of --app-metrics (nil without one) and, in the
// pod, reads it once within --connect-timeout: a URL that does not answer, or a counter the
// app types as something else, is a start error naming the flag. A counter with no series
// yet is only a warning: client libraries create a labelled series at its first request.
func (setup *prestopSetup) appRequests(ctx context.Context) *appmetrics.Source {
	o := &setup.opts
	if o.appMetrics == "" {
		if o.appRequestsSet {
			setup.problems = append(setup.problems, usageError("--app-requests names the counter --app-metrics reads: give --app-metrics too"))
		}
		return nil
	}
	sel, err := appmetrics.ParseSelector(o.appRequests)
	if err != nil {
		setup.problems = append(setup.problems, usageError("--app-requests: %v", err))
		return nil
	}
	src, err := appmetrics.New(o.appMetrics, sel, appmetrics.Options{Timeout: o.connectTimeout, AllowRemote: o.allowRemote})
	if err != nil {
		setup.problems = append(setup.problems, usageError("--app-metrics: %v", err))
		return nil
	}
	if o.offline {
		return src // the app is in the pod, not on this machine
	}
	r, err := src.Read(ctx)
	if err == nil && r.Matched > 0 {
		setup.warnSelfCounted(ctx, src, r)
	}
	switch {
	case errors.Is(err, appmetrics.ErrNotACounter):
		setup.problems = append(setup.problems, usageError("--app-requests: %v", err))
	case err != nil:
		setup.problems = append(setup.problems, usageError("--app-metrics: %v", err))
	case r.Series == 0:
		setup.warnings = append(setup.warnings, fmt.Sprintf("--app-requests %s: %s has no such series yet; a client library creates one at its first request, so it is read at every poll (the kernel's view counts meanwhile)", sel, src.URL()))
	case r.Matched == 0:
		setup.warnings = append(setup.warnings, fmt.Sprintf("--app-requests %s: none of the %d series of %s match the labels: until one does, the app's counter adds nothing", sel, r.Series, sel.Name))
	}
	return src
}

// warnSelfCounted reads the counter twice more, at once: a series that grew by exactly one at
// each read is most likely counting the reads of the metrics themselves (an app that counts
// every path), and would make every poll look like a request until the lag bound. It is only
// a warning: real requests can do the same.
func (setup *prestopSetup) warnSelfCounted(ctx context.Context, src *appmetrics.Source, first appmetrics.Reading) {
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
	setup.warnings = append(setup.warnings, fmt.Sprintf("--app-requests %s: the series %s grew by one at each of three reads of %s: if it counts the reads of the metrics themselves, leave their path out with a label matcher, or every poll looks like a request until --eds-lag-bound",
		src.Selector(), series, src.URL()))
}
