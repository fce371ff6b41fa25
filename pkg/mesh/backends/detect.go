package backends

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/meshdrain/meshdrain/pkg/localhttp"
	"github.com/meshdrain/meshdrain/pkg/mesh"
	"github.com/meshdrain/meshdrain/pkg/mesh/envoy"
	"github.com/meshdrain/meshdrain/pkg/mesh/linkerd"
)

// ErrNotASidecar means an admin port answered, but neither as a Linkerd proxy nor as Envoy.
var ErrNotASidecar = linkerd.ErrNotASidecar

// Detect asks one admin URL which sidecar answers there (a few bytes: /ready, then /live or
// /server_info); mesh.Envoy stands for any Envoy, Istio's included.
func Detect(ctx context.Context, adminURL string, o Options) (mesh.Mesh, error) {
	return linkerd.DetectWith(ctx, adminURL, linkerd.Options{RequestTimeout: o.RequestTimeout, AllowRemote: o.AllowRemote})
}

// Detection is what DetectUntil found.
type Detection struct {
	Mesh mesh.Mesh
	URL  string
	// Unreachable: no candidate could be connected to in time; a hook then ends no-sidecar,
	// as it does for a chosen mesh whose admin port never answers.
	Unreachable bool
	Err         error
	Took        time.Duration
}

// DetectUntil asks each candidate which sidecar it is, every poll, until one answers as a
// sidecar or limit passes (a hook's --connect-timeout, within its deadline). Something that
// answers as neither ends the detection at once: it will not become a sidecar.
func DetectUntil(ctx context.Context, candidates []string, o Options, poll time.Duration, start, limit time.Time) Detection {
	ctx, cancel := context.WithDeadline(ctx, limit)
	defer cancel()
	var errs []error
	for {
		errs = errs[:0]
		allUnreachable := true
		for _, u := range candidates {
			found, err := Detect(ctx, u, o)
			if err == nil {
				return Detection{Mesh: found, URL: u, Took: time.Since(start)}
			}
			err = fmt.Errorf("%s: %w", localhttp.Redact(u), err)
			if errors.Is(err, ErrNotASidecar) {
				return Detection{Err: err, Took: time.Since(start)}
			}
			if !localhttp.IsUnreachable(err) {
				// It connected: something is there, hanging or answering badly.
				allUnreachable = false
			}
			errs = append(errs, err)
		}
		timer := time.NewTimer(poll)
		select {
		case <-timer.C:
			continue
		case <-ctx.Done():
			timer.Stop()
		}
		return Detection{Unreachable: allUnreachable, Err: JoinOneLine(errs), Took: time.Since(start)}
	}
}

// JoinOneLine wraps every error on one line (errors.Join puts each on its own), so that a log
// field or a terminal message stays one line.
func JoinOneLine(errs []error) error {
	if len(errs) == 0 {
		return nil
	}
	args := make([]any, len(errs))
	for i, err := range errs {
		args[i] = err
	}
	return fmt.Errorf(strings.Repeat("%w; ", len(errs)-1)+"%w", args...)
}

// Undetected stands for the sidecar of a pod where --mesh auto reached no admin port: every
// call fails as unreachable, so a drain ends no-sidecar at once (detection already spent
// the connect timeout), with its usual final line.
type Undetected struct{}

var errUndetected = fmt.Errorf("%w: --mesh auto found no sidecar admin port", localhttp.ErrNotConnected)

// Inbound fails as unreachable.
func (Undetected) Inbound(context.Context, mesh.Selector) (mesh.Snapshot, error) {
	return mesh.Snapshot{}, errUndetected
}

// DrainListeners fails as unreachable.
func (Undetected) DrainListeners(context.Context, mesh.DrainMode) error { return errUndetected }

// Hints are Envoy's: with no sidecar found, Istio's is the likeliest.
func (Undetected) Hints() mesh.Hints { return envoy.EnvoyHints() }
