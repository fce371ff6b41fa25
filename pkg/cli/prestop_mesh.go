package cli

import (
	"context"

	"github.com/meshdrain/meshdrain/pkg/hook/drain"
	"github.com/meshdrain/meshdrain/pkg/hook/evidence"
	"github.com/meshdrain/meshdrain/pkg/localhttp"
	"github.com/meshdrain/meshdrain/pkg/mesh"
	"github.com/meshdrain/meshdrain/pkg/mesh/backends"
)

// prestop's --mesh takes the values of status and check (mesh.Names(mesh.Choices...)). Its default is
// istio, not auto: a hook runs once, at the worst moment, and must not spend its budget
// asking which sidecar it has, nor risk a guess that would skip Envoy's drain call; a hook
// written before --mesh existed keeps exactly what it did; and plan writes --mesh=linkerd
// into every Linkerd hook. auto is for a hook shared across meshes (README, "Which sidecar").
const defaultPrestopMesh = mesh.Istio

// sidecarOptions are the options every admin client of this hook is opened with, detection's
// included. Each admin request may take up to --connect-timeout: filtering still walks every
// stat of a large sidecar on Envoy's main thread.
func (o *prestopOptions) sidecarOptions(cfg *drain.Config) backends.Options {
	return backends.Options{RequestTimeout: o.connectTimeout, AllowRemote: o.allowRemote, Deadline: cfg.Deadline, AppDrain: o.appDrain}
}

// backendOptions are prestop's flags as backends.Open takes them, for --mesh and --admin;
// lookup reads --ignore-source's $(NAME) from the hook's environment.
func (o *prestopOptions) backendOptions(drainModeSet bool, cfg *drain.Config, lookup func(string) (string, bool)) backends.Options {
	opts := o.sidecarOptions(cfg)
	opts.Mesh, opts.AdminURL, opts.Hook = o.mesh, o.admin, true
	opts.Selector = mesh.Selector{Ports: o.ports, Clusters: o.clusters, HTTPPrefixes: o.httpPrefixes}
	opts.Given = backends.Given{
		InboundListenerPorts: len(o.listenerPorts) > 0,
		DrainAtEnd:           o.drainAt == drainAtEnd,
		AppMetrics:           o.appMetrics != "",
	}
	if drainModeSet {
		opts.Given.DrainMode = mesh.DrainMode(o.drainMode)
	}
	if o.clientEvidence == clientEvidenceAuto {
		opts.Evidence = &backends.Evidence{ListenerPorts: o.listenerPorts, Every: evidence.ReadPolls * o.poll, Undrained: o.drainAt == drainAtEnd}
	}
	opts.Kernel = backends.KernelOptions{
		IgnoreSources: o.ignoreSources, Lookup: lookup, LagBound: o.edsLagBound, WaitPastBoundOpeners: o.waitPastBoundOpeners,
		AppMetrics: o.appMetrics, AppRequests: o.appRequests, AppRequestsSet: o.appRequestsSet,
		Offline: o.offline, InPod: true, ListenersToo: o.validate,
	}
	return opts
}

// openBackend opens the backend of --mesh at start (with --mesh auto, only checks the
// candidates detection will ask) and takes in its problems and warnings.
func (setup *prestopSetup) openBackend(ctx context.Context, cfg *drain.Config, lookup func(string) (string, bool)) {
	b := backends.Open(ctx, setup.opts.backendOptions(setup.drainModeSet, cfg, lookup))
	setup.warnings = append(setup.warnings, b.Warnings...)
	setup.problems = append(setup.problems, usageErrors(b.Problems)...)
	setup.sidecar, setup.candidates = useBackend(b, cfg), b.Candidates
	if b.AdminURL != "" {
		setup.adminURL = localhttp.Redact(b.AdminURL)
	}
}

// sidecarFor opens the sidecar of the mesh --mesh auto found at adminURL, with the problems
// that make the configuration unusable for it and the warnings worth a log line.
func (o *prestopOptions) sidecarFor(found mesh.Mesh, adminURL string, drainModeSet bool, cfg *drain.Config) (drain.Sidecar, []string, []error) {
	opts := o.backendOptions(drainModeSet, cfg, nil)
	opts.Mesh, opts.AdminURL = found, adminURL
	// Detection finds a sidecar, whose client Open builds without reading anything.
	b := backends.Open(context.Background(), opts)
	return useBackend(b, cfg), b.Warnings, usageErrors(b.Problems)
}

// useBackend sets what the drain takes from the backend: its client evidence, what it makes
// of the reads for the final event (an Envoy sidecar's drain regime), and no drain call
// where it has nothing to drain (the coordinator then claims none, drain_called false,
// and the hints say why, no_drain_call).
func useBackend(b backends.Backend, cfg *drain.Config) drain.Sidecar {
	cfg.Clients, cfg.Reads = b.Clients, b.Reads
	if b.NoDrainCall {
		cfg.DrainMode = mesh.DrainNone
	}
	return b.Sidecar
}

// usageErrors marks each start problem as a usage error: they all name a flag.
func usageErrors(problems []error) []error {
	out := make([]error, len(problems))
	for i, p := range problems {
		out[i] = usageError("%w", p)
	}
	return out
}
