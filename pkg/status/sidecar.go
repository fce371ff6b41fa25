package status

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/meshdrain/meshdrain/pkg/envoyadmin"
	"github.com/meshdrain/meshdrain/pkg/inbound"
	"github.com/meshdrain/meshdrain/pkg/linkerd"
)

// Sidecar is a sidecar that status and check can sample: an Envoy admin API (Envoy), a
// Linkerd proxy's admin port (Linkerd), or whichever of the two answers (Detect). Each
// sample is one Report, whatever the mesh, so the watch loop, the rates and the rules do not
// care which it is.
type Sidecar interface {
	// Sample takes one sample; adminURL is the address shown in the report and messages.
	Sample(ctx context.Context, adminURL string, sel inbound.Selector, now time.Time) (Report, error)
}

// Envoy samples an Envoy admin API (Istio's istio-proxy, Consul's, any Envoy).
func Envoy(admin Admin) Sidecar { return envoySidecar{admin} }

type envoySidecar struct{ admin Admin }

func (e envoySidecar) Sample(ctx context.Context, adminURL string, sel inbound.Selector, now time.Time) (Report, error) {
	return Gather(ctx, e.admin, adminURL, sel, now)
}

// Linkerd samples a Linkerd proxy's admin port.
func Linkerd(admin LinkerdAdmin) Sidecar { return linkerdSidecar{admin} }

type linkerdSidecar struct{ admin LinkerdAdmin }

func (l linkerdSidecar) Sample(ctx context.Context, adminURL string, sel inbound.Selector, now time.Time) (Report, error) {
	return GatherLinkerd(ctx, l.admin, adminURL, sel, now)
}

// DetectFunc tells which sidecar answers at an admin URL (linkerd.Detect, in production).
type DetectFunc func(ctx context.Context, adminURL string) (linkerd.Mesh, error)

// BuildFunc builds the client of the sidecar found at an admin URL.
type BuildFunc func(mesh linkerd.Mesh, adminURL string) (Sidecar, error)

// Detect samples whichever sidecar answers first at candidates, tried in order: the pod has
// one mesh, and what its admin port answers tells which (linkerd.Detect reads /ready, a few
// bytes on both). The choice is kept once made; until then each sample tries again, so a
// watch started before the sidecar is up finds it when it comes.
func Detect(candidates []string, detect DetectFunc, build BuildFunc) Sidecar {
	return &detectingSidecar{candidates: candidates, detect: detect, build: build}
}

type detectingSidecar struct {
	candidates []string
	detect     DetectFunc
	build      BuildFunc

	mu    sync.Mutex
	found Sidecar
	url   string
}

func (d *detectingSidecar) Sample(ctx context.Context, _ string, sel inbound.Selector, now time.Time) (Report, error) {
	found, url, err := d.sidecar(ctx)
	if err != nil {
		return Report{Admin: strings.Join(d.candidates, ", ")}, err
	}
	return found.Sample(ctx, url, sel, now)
}

func (d *detectingSidecar) sidecar(ctx context.Context) (Sidecar, string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.found != nil {
		return d.found, d.url, nil
	}
	var unreachable, other []error
	for _, u := range d.candidates {
		mesh, err := d.detect(ctx, u)
		if err == nil {
			found, err := d.build(mesh, u)
			if err != nil {
				return nil, "", err
			}
			d.found, d.url = found, u
			return found, u, nil
		}
		err = fmt.Errorf("%s: %w", u, err)
		if envoyadmin.IsUnreachable(err) {
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
		return nil, "", &NotASidecarError{Err: joinErrors(other)}
	}
	return nil, "", &UnreachableError{URL: strings.Join(d.candidates, ", "), Err: joinErrors(unreachable), Mesh: meshAny}
}

// joinErrors is errors.Join on one line, so a message stays one line in a terminal or a log.
func joinErrors(errs []error) error {
	if len(errs) == 1 {
		return errs[0]
	}
	return oneLineErrors(errs)
}

type oneLineErrors []error

func (e oneLineErrors) Error() string {
	texts := make([]string, len(e))
	for i, err := range e {
		texts[i] = err.Error()
	}
	return strings.Join(texts, "; ")
}

func (e oneLineErrors) Unwrap() []error { return e }

// NotASidecarError means an admin address answered, but as neither a Linkerd proxy nor an
// Envoy admin API: --admin (or --mesh) points at the wrong thing.
type NotASidecarError struct{ Err error }

func (e *NotASidecarError) Error() string {
	return fmt.Sprintf("no sidecar admin port found: %v", e.Err)
}

func (e *NotASidecarError) Unwrap() error { return e.Err }
