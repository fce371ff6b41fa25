// Package backends opens what prestop, status and check read in a pod, for every --mesh: an
// Envoy admin API (istio, envoy), a Linkerd proxy's admin port (linkerd), the pod's own
// kernel when it has no sidecar (none), or, for auto, the admin URLs that detection asks.
// It is the one place that knows every backend, so that the three commands open them the
// same way (admin clients on package localhttp: loopback only unless allowed, bounded
// calls), refuse the same flags per mesh, and read --ignore-source the same way; nothing
// else chooses between mesh/envoy, mesh/linkerd and mesh/kernel.
package backends

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/meshdrain/meshdrain/pkg/hook/drain"
	"github.com/meshdrain/meshdrain/pkg/hook/evidence"
	"github.com/meshdrain/meshdrain/pkg/hook/regime"
	"github.com/meshdrain/meshdrain/pkg/mesh"
	"github.com/meshdrain/meshdrain/pkg/mesh/envoy"
	"github.com/meshdrain/meshdrain/pkg/mesh/linkerd"
	"github.com/meshdrain/meshdrain/pkg/sockets"
)

// Options are a command's parsed flags as far as they say which backend to open and how.
type Options struct {
	// Mesh is --mesh: a chosen mesh, or Auto (Open then only checks the candidates that
	// DetectUntil asks, and the mesh found is opened once detected).
	Mesh mesh.Mesh
	// AdminURL is --admin, or the URL detection found; "" for the mesh's default.
	AdminURL string
	// Selector is --port, --cluster and --http-prefix.
	Selector mesh.Selector
	// Given are the other flags some mesh refuses (Refused).
	Given Given
	// RequestTimeout bounds each admin call.
	RequestTimeout time.Duration
	// AllowRemote accepts an admin URL that is not on the loopback (a person's --allow-remote).
	AllowRemote bool
	// Deadline and AppDrain are the hook's, quoted by the fixes a Linkerd proxy's hints name.
	Deadline, AppDrain time.Duration
	// Hook opens the backend for prestop's drain: a Linkerd proxy then warns once about a
	// --port without series (linkerd.HookSidecar).
	Hook bool
	// Evidence, when set, reads an Envoy sidecar's clients from the pod's socket table as
	// the drain's evidence (prestop's --client-evidence auto).
	Evidence *Evidence
	// Kernel is how --mesh none is read.
	Kernel KernelOptions
}

// Evidence is how the hook reads an Envoy sidecar's clients (evidence.Table).
type Evidence struct {
	// ListenerPorts are --inbound-listener-port (default: the listener the stats name).
	ListenerPorts []int
	// Every is the least time between two reads of the table.
	Every time.Duration
	// Undrained: the sidecar's own drain is deferred (--drain-at end).
	Undrained bool
}

// Backend is what Open opened: what to read, the drain's evidence of its clients, and what
// is wrong or worth a word at start.
type Backend struct {
	// Sidecar is what the drain and status read: an admin client, or the pod's kernel; nil
	// for Auto and when a problem kept it from opening.
	Sidecar mesh.Sidecar
	// AdminURL is the admin URL Sidecar reads (not redacted); "" for none and Auto.
	AdminURL string
	// Candidates are the admin URLs detection asks, in order (Auto only).
	Candidates []string
	// Clients is the drain's per-client evidence: the socket table for an Envoy sidecar
	// (with Options.Evidence), the kernel's own clients for none, nil otherwise.
	Clients drain.ClientEvidence
	// Reads is what the hook's drain makes of its reads beyond the rule, for its final event:
	// an Envoy sidecar's drain regime (regime.Prestop, Options.Hook only); nil otherwise.
	Reads drain.ReadObserver
	// NoDrainCall: this backend has nothing to drain (a Linkerd proxy, the kernel), so the
	// drain makes no call and says why in its hints.
	NoDrainCall bool
	// Reader and Ignore are the kernel's socket table and --ignore-source (none only), for
	// check's items.
	Reader *sockets.AutoReader
	Ignore []netip.Prefix
	// Warnings are worth a line at start; Problems make the configuration unusable, each
	// naming its flag.
	Warnings []string
	Problems []error
}

func (b *Backend) problem(format string, args ...any) {
	b.Problems = append(b.Problems, fmt.Errorf(format, args...))
}

// Open opens the backend of o.Mesh with every problem found at start, none stopping the
// others: the flags the mesh refuses, a bad admin URL, and for none the kernel's own checks.
// An admin client is only built, never connected; the kernel may be read (KernelOptions).
func Open(ctx context.Context, o Options) Backend {
	var b Backend
	if _, err := mesh.Parse(string(o.Mesh)); err != nil {
		b.problem("%v", err)
		return b
	}
	b.Problems, b.Warnings = Refused(o)
	switch o.Mesh {
	case mesh.None:
		openKernel(ctx, o, &b)
	case mesh.Auto:
		b.Candidates = Candidates(o.AdminURL)
		for _, u := range b.Candidates {
			// The same parse as the client detection will build: loopback unless allowed.
			if _, err := openSidecar(mesh.Linkerd, u, o); err != nil {
				b.problem("--admin: %w", err)
			}
		}
	default:
		openAdmin(o, &b)
	}
	return b
}

// openAdmin opens a sidecar's admin client, and its evidence.
func openAdmin(o Options, b *Backend) {
	b.AdminURL = o.AdminURL
	if b.AdminURL == "" {
		b.AdminURL = DefaultAdminURL(o.Mesh)
	}
	sc, err := openSidecar(o.Mesh, b.AdminURL, o)
	if err != nil {
		b.problem("--admin: %w", err)
		return
	}
	client, ok := sc.(*linkerd.Client)
	if !ok {
		b.Sidecar = sc
		if o.Hook {
			b.Reads = &regime.Prestop{DrainAtEnd: o.Given.DrainAtEnd}
		}
		if o.Evidence != nil && ReadsSocketTable(o.Mesh) {
			b.Clients = &evidence.Table{Reader: sockets.NewReader(), Ports: o.Evidence.ListenerPorts, Now: time.Now,
				Every: o.Evidence.Every, Undrained: o.Evidence.Undrained}
		}
		return
	}
	if err := linkerd.CheckPorts(o.Selector.Ports, client.AdminPort()); err != nil {
		b.problem("--port: %w", err)
	}
	// No drain call: the coordinator then claims none (drain_called false), and the hints
	// say why (no_drain_call).
	b.NoDrainCall = true
	b.Sidecar = client
	if o.Hook {
		b.Sidecar = &linkerd.HookSidecar{Client: client}
	}
}

// ReadsSocketTable says whether a mesh's clients are read from the pod's socket table around
// its sidecar's inbound listener (the hook's evidence, status's clients view). A Linkerd proxy
// closes every connection itself when it drains (hyper's graceful shutdown), so a close there
// says nothing about the client: silence alone decides (docs/linkerd.md). Without a sidecar,
// the kernel backend reads its clients itself.
func ReadsSocketTable(m mesh.Mesh) bool { return m != mesh.Linkerd && m != mesh.None }

// ClientWatch is status's view of a sidecar's clients, judged as the hook judges them, from
// the socket table of the namespace status runs in; nil where ReadsSocketTable says no.
func ClientWatch(m mesh.Mesh, listenerPorts []int, every time.Duration) *evidence.Watch {
	if !ReadsSocketTable(m) {
		return nil
	}
	return &evidence.Watch{Reader: sockets.NewReader(), Ports: listenerPorts, Every: every}
}

// DefaultAdminURL is where a mesh's sidecar answers in the pod; "" for Auto, which asks
// Candidates, and for None, which has no admin port.
func DefaultAdminURL(m mesh.Mesh) string {
	switch m {
	case mesh.Linkerd:
		return linkerd.DefaultAdminURL
	case mesh.Auto, mesh.None:
		return ""
	}
	return envoy.DefaultURL
}

// Candidates are the admin URLs --mesh auto asks: the one given, or Linkerd's then Envoy's.
// Linkerd's comes first because an Envoy admin never listens on 4191, while a Linkerd pod
// has nothing on 15000: the first answer is the pod's sidecar.
func Candidates(admin string) []string {
	if admin != "" {
		return []string{admin}
	}
	return []string{linkerd.DefaultAdminURL, envoy.DefaultURL}
}

// openSidecar returns the admin client of a chosen mesh's sidecar at adminURL. It checks the
// URL (localhttp.Syntax) and opens no connection.
func openSidecar(m mesh.Mesh, adminURL string, o Options) (mesh.Sidecar, error) {
	switch m {
	case mesh.Linkerd:
		return linkerd.New(adminURL, linkerd.Options{RequestTimeout: o.RequestTimeout, AllowRemote: o.AllowRemote, Deadline: o.Deadline, AppDrain: o.AppDrain})
	case mesh.Istio, mesh.Envoy:
		return envoy.New(adminURL, envoy.Options{RequestTimeout: o.RequestTimeout, AllowRemote: o.AllowRemote})
	}
	return nil, fmt.Errorf("no sidecar client for mesh %q", m)
}
