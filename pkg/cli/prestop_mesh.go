package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/meshdrain/meshdrain/pkg/drain"
	"github.com/meshdrain/meshdrain/pkg/envoyadmin"
	"github.com/meshdrain/meshdrain/pkg/inbound"
	"github.com/meshdrain/meshdrain/pkg/linkerd"
	"github.com/meshdrain/meshdrain/pkg/localhttp"
)

// prestop's --mesh takes the values of status and check (sidecarMeshes). Its default is
// istio, not auto: a hook runs once, at the worst moment, and must not spend its budget
// asking which sidecar it has, nor risk a guess that would skip Envoy's drain call; a hook
// written before --mesh existed keeps exactly what it did; and plan writes --mesh=linkerd
// into every Linkerd hook. auto is for a hook shared across meshes (README, "Which sidecar").
const defaultPrestopMesh = meshIstio

// sidecarFor builds the sidecar prestop drains for a mesh chosen at start (istio, envoy or
// linkerd), with the problems that make the configuration unusable for it and the warnings
// worth a log line. adminURL is --admin, already resolved to the mesh's default when unset.
func (o *prestopOptions) sidecarFor(mesh, adminURL string, drainModeSet bool, cfg *drain.Config) (drain.Sidecar, []string, []error) {
	if mesh != meshLinkerd {
		// Each admin request may take up to --connect-timeout: filtering still walks every
		// stat of a large sidecar on Envoy's main thread.
		admin, err := envoyadmin.New(adminURL, envoyadmin.Options{RequestTimeout: o.connectTimeout, AllowRemote: o.allowRemote})
		if err != nil {
			return nil, nil, []error{usageError("--admin: %v", err)}
		}
		return admin, nil, nil
	}
	client, err := linkerd.New(adminURL, linkerd.Options{RequestTimeout: o.connectTimeout, AllowRemote: o.allowRemote})
	if err != nil {
		return nil, nil, []error{usageError("--admin: %v", err)}
	}
	warnings, problems := o.linkerdChecks(client.AdminPort(), drainModeSet)
	// No drain call: the coordinator then claims none (drain_called false), and the hints
	// say why (no_drain_call).
	cfg.DrainMode = envoyadmin.DrainNone
	return &linkerdHook{Client: client, hints: linkerdHints(cfg.Deadline, o.appDrain)}, warnings, problems
}

// linkerdChecks are the start checks of a Linkerd drain.
func (o *prestopOptions) linkerdChecks(adminPort int, drainModeSet bool) (warnings []string, problems []error) {
	if len(o.clusters) > 0 || len(o.httpPrefixes) > 0 {
		problems = append(problems, usageError("--cluster and --http-prefix name Envoy stats; a Linkerd proxy counts per target port: use --port"))
	}
	if err := linkerd.CheckPorts(o.ports, adminPort); err != nil {
		problems = append(problems, usageError("--port: %v", err))
	}
	if drainModeSet && o.drainMode != string(envoyadmin.DrainNone) {
		warnings = append(warnings, fmt.Sprintf("--drain-mode %s has no effect on a Linkerd proxy: it has no drain endpoint, and meshdrain makes no drain call", o.drainMode))
	}
	return warnings, problems
}

// linkerdHints are a Linkerd drain's fixes, with the numbers of this hook.
func linkerdHints(deadline, appDrain time.Duration) drain.Hints {
	return drain.Hints{
		MissingStats: linkerd.NoSeriesHint,
		SidecarGone:  linkerd.SidecarGoneFix(deadline, appDrain),
		Unreachable:  linkerd.UnreachableHint(deadline, appDrain),
		NoDrainCall:  linkerd.NoDrainCallReason,
		AdminCounter: linkerd.AdminCounter,
	}
}

// linkerdHook is the Linkerd proxy as the drain sees it: the client's inbound view, the
// Linkerd hints, and one warning when a --port has no series, which the lead's rule reads as
// quiet (pkg/linkerd ReadAbsentAsZero) but which is also what a mistyped port looks like.
type linkerdHook struct {
	*linkerd.Client
	hints  drain.Hints
	log    *zap.Logger
	warned bool
}

func (h *linkerdHook) Hints() drain.Hints { return h.hints }

func (h *linkerdHook) Inbound(ctx context.Context, sel inbound.Selector) (inbound.Snapshot, error) {
	lsel, err := linkerd.SelectorFor(sel, h.AdminPort())
	if err != nil {
		return inbound.Snapshot{}, err
	}
	snap, err := h.Snapshot(ctx, lsel)
	if err != nil {
		return inbound.Snapshot{}, err
	}
	if !h.warned && len(sel.Ports) > 0 {
		h.warned = true
		h.warnSilentPorts(ctx, snap)
	}
	return snap.Inbound(), nil
}

// warnSilentPorts logs the --ports the proxy has no series for, with the ports it has, once.
func (h *linkerdHook) warnSilentPorts(ctx context.Context, snap linkerd.Snapshot) {
	var silent []int
	for _, e := range snap.Endpoints {
		if e.Port != nil && e.Silent() {
			silent = append(silent, *e.Port)
		}
	}
	if len(silent) == 0 || h.log == nil {
		return
	}
	fields := []zap.Field{zap.Ints("ports", silent)}
	if all, err := h.Snapshot(ctx, linkerd.Selector{}); err == nil {
		var with []int
		for _, e := range all.Endpoints {
			if e.Port != nil && !e.Silent() {
				with = append(with, *e.Port)
			}
		}
		fields = append(fields, zap.Ints("ports_with_series", with))
	}
	h.log.Warn("--port names a port the Linkerd proxy has no series for: no request in the last 10 minutes, or not a port this pod receives on; "+
		"read as no arrivals and nothing in flight (the proxy drops idle label sets), so a mistyped port would look quiet", fields...)
}

// detection is what prestop --mesh auto found at start.
type detection struct {
	mesh linkerd.Mesh
	url  string
	// unreachable: no candidate could be connected to within the time allowed; the drain then
	// ends no-sidecar, as it does for a chosen mesh whose admin port never answers.
	unreachable bool
	err         error
	took        time.Duration
}

// detectSidecar asks each candidate admin URL which sidecar it is (linkerd.DetectWith:
// /ready, then /live or /server_info; a few bytes each), every --poll until one answers as a
// sidecar, within --connect-timeout of the hook's start (and its deadline). Something that
// answers as neither ends the detection at once: it will not become a sidecar.
func detectSidecar(ctx context.Context, o prestopOptions, candidates []string, start time.Time, deadline time.Duration) detection {
	limit := start.Add(min(o.connectTimeout, deadline))
	ctx, cancel := context.WithDeadline(ctx, limit)
	defer cancel()
	var errs []error
	for {
		errs = errs[:0]
		allUnreachable := true
		for _, u := range candidates {
			mesh, err := linkerd.DetectWith(ctx, u, linkerd.Options{RequestTimeout: o.connectTimeout, AllowRemote: o.allowRemote})
			if err == nil {
				return detection{mesh: mesh, url: u, took: time.Since(start)}
			}
			err = fmt.Errorf("%s: %w", localhttp.Redact(u), err)
			if errors.Is(err, linkerd.ErrNotASidecar) {
				return detection{err: err, took: time.Since(start)}
			}
			if !localhttp.IsUnreachable(err) {
				// It connected: something is there, hanging or answering badly.
				allUnreachable = false
			}
			errs = append(errs, err)
		}
		timer := time.NewTimer(o.poll)
		select {
		case <-timer.C:
			continue
		case <-ctx.Done():
			timer.Stop()
		}
		return detection{unreachable: allUnreachable, err: joinOneLine(errs), took: time.Since(start)}
	}
}

// joinOneLine wraps every error on one line (errors.Join puts each on its own), so that a log
// field stays one line.
func joinOneLine(errs []error) error {
	if len(errs) == 0 {
		return nil
	}
	args := make([]any, len(errs))
	for i, err := range errs {
		args[i] = err
	}
	return fmt.Errorf(strings.Repeat("%w; ", len(errs)-1)+"%w", args...)
}

// undetected stands for the sidecar of a pod where --mesh auto reached no admin port: every
// call fails as unreachable, so the coordinator ends no-sidecar at once (detection already
// spent --connect-timeout), with its usual final line.
// The detection's own warning has already named every candidate and its error.
type undetected struct{}

func (undetected) Inbound(context.Context, inbound.Selector) (inbound.Snapshot, error) {
	return inbound.Snapshot{}, fmt.Errorf("%w: --mesh auto found no sidecar admin port", localhttp.ErrNotConnected)
}

func (undetected) DrainListeners(context.Context, envoyadmin.DrainMode) error {
	return fmt.Errorf("%w: --mesh auto found no sidecar admin port", localhttp.ErrNotConnected)
}
