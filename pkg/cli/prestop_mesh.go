package cli

import (
	"fmt"
	"net/netip"

	"github.com/meshdrain/meshdrain/pkg/hook/drain"
	"github.com/meshdrain/meshdrain/pkg/hook/evidence"
	"github.com/meshdrain/meshdrain/pkg/mesh"
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
func (setup *prestopSetup) chooseKernel(cfg *drain.Config, lookup func(string) (string, bool)) {
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
	reader := sockets.NewReader()
	k, err := kernel.New(kernel.Options{Ports: o.ports, Ignore: ignore, LagBound: o.edsLagBound, Reader: reader})
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
			add("--port %v: nothing listens on it in this pod (listening: %v); as a hook it would hold the app for --fallback-wait", notListening, listening)
		}
	}
}
