// Package mesh is what meshdrain knows of a pod's sidecar whatever its mesh: which mesh it is
// (Mesh), what the hook and the operator tools ask of it (Sidecar), and the one model of its
// inbound side that every backend fills in (Snapshot, read by the drain rule as a Reading).
// The backends live beside it: mesh/envoy for Istio and any Envoy, mesh/linkerd, and
// mesh/kernel for a pod without a sidecar (--mesh none), whose own kernel stands in for one;
// mesh/backends opens them. Nothing that decides when to stop imports them.
package mesh

import (
	"context"
	"fmt"
	"strings"
)

// Mesh names the service mesh whose sidecar runs beside the app. It decides where the admin
// port is, which stat names to read, whether there is a drain call, and which fix a hint
// names: an Istio pod needs an annotation, a plain Envoy needs --cluster/--http-prefix, a
// Linkerd proxy needs nothing but traffic.
type Mesh string

// Meshes.
const (
	// Istio is an Envoy run by Istio's pilot-agent: Istio's stat names and ports.
	Istio Mesh = "istio"
	// Envoy is any other Envoy (Consul, a hand-written bootstrap): its inbound side is not
	// marked in stat names, so it is named with --cluster/--http-prefix.
	Envoy Mesh = "envoy"
	// Linkerd is linkerd2-proxy: metrics on its admin port, no drain endpoint.
	Linkerd Mesh = "linkerd"
	// Auto asks the admin ports which sidecar answers (Detect).
	Auto Mesh = "auto"
	// None is a pod without a sidecar: the kernel is the sidecar. Its inbound side is the
	// app's own listening ports (--port), read from the pod's socket table and TCP counters
	// (mesh/kernel); there is no admin port and no drain call.
	None Mesh = "none"
)

// Choices are the values of every --mesh flag that reads a live sidecar (prestop, status,
// check), in the order help lists them.
var Choices = []Mesh{Auto, Istio, Envoy, Linkerd, None}

// Parse reads a --mesh value against the accepted ones (Choices, or a command's subset).
func Parse(s string, accepted ...Mesh) (Mesh, error) {
	if len(accepted) == 0 {
		accepted = Choices
	}
	for _, m := range accepted {
		if string(m) == s {
			return m, nil
		}
	}
	return "", fmt.Errorf("--mesh %q: want %s", s, strings.Join(Names(accepted...), ", "))
}

// IsEnvoy says whether the sidecar is an Envoy (Istio's or another).
func (m Mesh) IsEnvoy() bool { return m == Istio || m == Envoy }

// Sidecar is what the hook and the operator tools ask of the pod's sidecar: its inbound side
// now, a drain of its inbound listeners, and the fixes to name when something is missing.
// Each backend's client is one; a backend with no drain endpoint answers DrainListeners with
// nil and says why in Hints.NoDrainCall.
type Sidecar interface {
	Inbound(ctx context.Context, sel Selector) (Snapshot, error)
	DrainListeners(ctx context.Context, mode DrainMode) error
	Hints() Hints
}

// Hints are what a log or a report tells the user to change, and they depend on the sidecar:
// an Istio sidecar needs an annotation before it exposes inbound stats, a Linkerd proxy needs
// none; an Envoy killed under live traffic is fixed in Istio's proxy config, a Linkerd proxy
// in its injection. A hint that names the other mesh's setting sends the user the wrong way
// at the moment they need it.
type Hints struct {
	// MissingStats is the fix when the sidecar exposes no usable inbound stat.
	MissingStats string
	// MoreNoSignalFixes are added to the no-signal event beside MissingStats, each under its
	// own key: the fixes that only one kind of sidecar has (an Envoy that is not Istio's
	// names its inbound side only when told).
	MoreNoSignalFixes []Fix
	// SidecarGone is the fix when the sidecar went away under live traffic.
	SidecarGone string
	// Unreachable, when set, is added to the event of an admin port never reached.
	Unreachable string
	// NoDrainCall, when set, says why the sidecar gets no drain call; the drain started and
	// the final events carry it as no_drain_call.
	NoDrainCall string
	// AdminCounter names the sidecar's own admin request counter (Snapshot
	// AdminRequestsTotal) in frozen-answer errors.
	AdminCounter string
}

// Fix is a hint under the key an event gives it.
type Fix struct {
	Key, Text string
}

// Names are the meshes' names, for flag help and shell completion.
func Names(meshes ...Mesh) []string {
	names := make([]string, len(meshes))
	for i, m := range meshes {
		names[i] = string(m)
	}
	return names
}
