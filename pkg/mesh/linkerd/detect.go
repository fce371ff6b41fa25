package linkerd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/meshdrain/meshdrain/pkg/localhttp"
	"github.com/meshdrain/meshdrain/pkg/mesh"
)

// ErrNotASidecar means the port answered, but not as a Linkerd proxy or an Envoy admin.
var ErrNotASidecar = errors.New("the admin port answered, but neither as a Linkerd proxy nor as Envoy")

// Detect tells what answers at baseURL by its /ready, which both sidecars serve and answer
// differently: a Linkerd proxy with "ready" or "not ready" (linkerd/app/admin/src/server.rs),
// Envoy with its server state, "LIVE", "DRAINING", ... (docs/facts.md §2). The guess is then
// confirmed by an endpoint only that sidecar has: Linkerd's /live ("live"), Envoy's
// /server_info (JSON with a state). Both are a few bytes; /metrics and /stats are never
// fetched for this. A refused connection is returned as is, so the caller can tell "no
// sidecar here" from "something else here". hc, when not nil, sends the requests.
func Detect(ctx context.Context, hc *http.Client, baseURL string) (mesh.Mesh, error) {
	opts := Options{}
	if hc != nil {
		opts.HTTPClient = hc
	}
	return DetectWith(ctx, baseURL, opts)
}

// DetectWith is Detect with the client's options: RequestTimeout bounds each of its two
// requests, and AllowRemote lets `meshdrain status` and `check --allow-remote` look at a
// sidecar that is not on loopback.
func DetectWith(ctx context.Context, baseURL string, opts Options) (mesh.Mesh, error) {
	c, err := New(baseURL, opts)
	if err != nil {
		return "", err
	}
	var readyBody string
	err = c.get(ctx, "/ready", func(resp *http.Response, endpoint string) error {
		body, err := readSmall(resp)
		if err != nil {
			return fmt.Errorf("GET %s: %w", endpoint, err)
		}
		readyBody = body
		return nil
	})
	if err != nil {
		return "", err
	}
	switch readyBody {
	case "ready", "not ready":
		err := c.get(ctx, "/live", func(resp *http.Response, endpoint string) error {
			body, err := readSmall(resp)
			if err != nil || resp.StatusCode != http.StatusOK || body != "live" {
				return &localhttp.StatusError{Method: http.MethodGet, URL: endpoint, Code: resp.StatusCode, Body: body}
			}
			return nil
		})
		if err != nil {
			return "", fmt.Errorf("%w: /ready looked like Linkerd's but /live did not: %w", ErrNotASidecar, err)
		}
		return mesh.Linkerd, nil
	case "LIVE", "DRAINING", "PRE_INITIALIZING", "INITIALIZING":
		err := c.get(ctx, "/server_info", func(resp *http.Response, endpoint string) error {
			var info struct {
				State string `json:"state"`
			}
			raw, err := localhttp.ReadBody(resp.Body, 1<<20)
			if err != nil || resp.StatusCode != http.StatusOK || json.Unmarshal(raw, &info) != nil || info.State == "" {
				if len(raw) > 512 {
					raw = raw[:512]
				}
				return &localhttp.StatusError{Method: http.MethodGet, URL: endpoint, Code: resp.StatusCode, Body: string(raw)}
			}
			return nil
		})
		if err != nil {
			return "", fmt.Errorf("%w: /ready looked like Envoy's but /server_info did not: %w", ErrNotASidecar, err)
		}
		return mesh.Envoy, nil
	}
	if len(readyBody) > 64 {
		readyBody = readyBody[:64] + "..."
	}
	return "", fmt.Errorf("%w: GET %s answered %q", ErrNotASidecar, c.target.Join("/ready", "").Redacted(), readyBody)
}

// DetectAny tries each candidate admin URL in order and returns the first that answers as a
// sidecar, with its URL. When none does, the error joins what each candidate answered.
func DetectAny(ctx context.Context, hc *http.Client, candidates []string) (mesh.Mesh, string, error) {
	var errs []error
	for _, u := range candidates {
		mesh, err := Detect(ctx, hc, u)
		if err == nil {
			return mesh, u, nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", localhttp.Redact(u), err))
		if ctx.Err() != nil {
			break
		}
	}
	return "", "", fmt.Errorf("no sidecar admin port found: %w", errors.Join(errs...))
}
