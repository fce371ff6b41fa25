package status

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/meshdrain/meshdrain/pkg/mesh"
	"github.com/meshdrain/meshdrain/pkg/mesh/backends"
	"github.com/meshdrain/meshdrain/pkg/mesh/envoy"
)

// Sampler takes samples of a sidecar for status and check: an Envoy admin API or a Linkerd
// proxy's admin port, or whichever of the two answers (Detect). Each sample is one Report,
// whatever the mesh, so the watch loop, the rates and the rules do not care which it is.
type Sampler interface {
	// Sample takes one sample; adminURL is the address shown in the report and messages.
	Sample(ctx context.Context, adminURL string, sel mesh.Selector, now time.Time) (Report, error)
}

// SamplerFor samples what backends.Open opened, with the reader of its mesh: the pod's kernel
// (--mesh none) as Kernel does.
func SamplerFor(sc mesh.Sidecar) (Sampler, error) {
	switch admin := sc.(type) {
	case KernelReader:
		return Kernel(admin), nil
	case LinkerdAdmin:
		return Linkerd(admin), nil
	case Admin:
		return Envoy(admin), nil
	}
	return nil, fmt.Errorf("status cannot read a %T", sc)
}

// Envoy samples an Envoy admin API (Istio's istio-proxy, Consul's, any Envoy).
func Envoy(admin Admin) Sampler { return envoySampler{admin} }

type envoySampler struct{ admin Admin }

func (e envoySampler) Sample(ctx context.Context, adminURL string, sel mesh.Selector, now time.Time) (Report, error) {
	return Gather(ctx, e.admin, adminURL, sel, now)
}

// Linkerd samples a Linkerd proxy's admin port.
func Linkerd(admin LinkerdAdmin) Sampler { return linkerdSampler{admin} }

type linkerdSampler struct{ admin LinkerdAdmin }

func (l linkerdSampler) Sample(ctx context.Context, adminURL string, sel mesh.Selector, now time.Time) (Report, error) {
	return GatherLinkerd(ctx, l.admin, adminURL, sel, now)
}

// DetectFunc tells which sidecar answers at an admin URL (backends.Detect, in production).
type DetectFunc func(ctx context.Context, adminURL string) (mesh.Mesh, error)

// BuildFunc builds the client of the sidecar found at an admin URL.
type BuildFunc func(found mesh.Mesh, adminURL string) (Sampler, error)

// Detect samples whichever sidecar answers first at candidates, tried in order: the pod has
// one mesh, and what its admin port answers tells which (linkerd.Detect reads /ready, a few
// bytes on both). The choice is kept once made; until then each sample tries again, so a
// watch started before the sidecar is up finds it when it comes.
func Detect(candidates []string, detect DetectFunc, build BuildFunc) Sampler {
	return &detectingSidecar{candidates: candidates, detect: detect, build: build}
}

type detectingSidecar struct {
	candidates []string
	detect     DetectFunc
	build      BuildFunc

	mu    sync.Mutex
	found Sampler
	url   string
}

func (d *detectingSidecar) Sample(ctx context.Context, _ string, sel mesh.Selector, now time.Time) (Report, error) {
	found, url, err := d.sidecar(ctx)
	if err != nil {
		return Report{Admin: strings.Join(d.candidates, ", ")}, err
	}
	return found.Sample(ctx, url, sel, now)
}

func (d *detectingSidecar) sidecar(ctx context.Context) (Sampler, string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.found != nil {
		return d.found, d.url, nil
	}
	var unreachable, other []error
	for _, u := range d.candidates {
		sidecarMesh, err := d.detect(ctx, u)
		if err == nil {
			found, err := d.build(sidecarMesh, u)
			if err != nil {
				return nil, "", err
			}
			d.found, d.url = found, u
			return found, u, nil
		}
		err = fmt.Errorf("%s: %w", u, err)
		if envoy.IsUnreachable(err) {
			unreachable = append(unreachable, err)
		} else {
			other = append(other, err)
		}
		if ctx.Err() != nil {
			break
		}
	}
	if len(other) > 0 {
		// Something answered: say what, rather than "nothing there".
		return nil, "", &NotASidecarError{Err: backends.JoinOneLine(other)}
	}
	return nil, "", &UnreachableError{URL: strings.Join(d.candidates, ", "), Err: backends.JoinOneLine(unreachable), Mesh: mesh.Auto}
}

// NotASidecarError means an admin address answered, but as neither a Linkerd proxy nor an
// Envoy admin API: --admin (or --mesh) points at the wrong thing.
type NotASidecarError struct{ Err error }

func (e *NotASidecarError) Error() string {
	return fmt.Sprintf("no sidecar admin port found: %v", e.Err)
}

func (e *NotASidecarError) Unwrap() error { return e.Err }
