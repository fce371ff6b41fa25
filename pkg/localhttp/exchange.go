package localhttp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync/atomic"
	"syscall"
)

// Doer sends one HTTP request; *http.Client is one. Clients take a Doer so that tests can
// stand in for the transport.
type Doer interface {
	Do(*http.Request) (*http.Response, error)
}

// The errors every admin client in a pod reports the same way, whichever sidecar it reads:
// the drain logic decides "no sidecar", "sidecar gone" and "sidecar sick" from them alone.
var (
	// ErrRefused means nothing listens on the admin port: the sidecar is not running (yet, or
	// any more).
	ErrRefused = errors.New("admin port refused the connection")
	// ErrNotConnected means an attempt ended before any connection to the admin port was
	// made: net/http reports a dial cut short by the context as the context's error alone.
	ErrNotConnected = errors.New("no connection to the admin port was made")
)

// IsRefused reports whether err means the admin port is closed.
func IsRefused(err error) bool {
	return errors.Is(err, ErrRefused) || errors.Is(err, syscall.ECONNREFUSED)
}

// IsUnreachable reports whether err means no connection to the admin port could be made at
// all (refused, or the dial itself failed), as opposed to an admin that answered badly.
func IsUnreachable(err error) bool {
	if IsRefused(err) || errors.Is(err, ErrNotConnected) {
		return true
	}
	var opErr *net.OpError
	return errors.As(err, &opErr) && opErr.Op == "dial"
}

// maxErrorBody is how much of a non-2xx answer a StatusError keeps.
const maxErrorBody = 512

// StatusError is an answer with a status other than the one expected.
type StatusError struct {
	Method, URL string
	Code        int
	Body        string
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("%s %s: status %d: %s", e.Method, e.URL, e.Code, strings.TrimSpace(e.Body))
}

// NewStatusError reads the start of resp's body into a StatusError.
func NewStatusError(method, endpoint string, resp *http.Response) *StatusError {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	return &StatusError{Method: method, URL: endpoint, Code: resp.StatusCode, Body: string(body)}
}

// Exchange sends one request for path (and rawQuery) under t with doer and hands the answer
// to read, with the endpoint as errors should name it: credentials redacted, a socket in its
// unix: form, and never the query (an Envoy stats filter is a long regex). A failure to get
// an answer wraps ErrRefused when nothing listens, ErrNotConnected when no connection was
// made. ctx bounds the whole exchange, reading the body included: closing a body that was
// not read to its end closes the connection (net/http's client never drains it), so an
// endless answer costs no more than ctx allows.
func Exchange(ctx context.Context, doer Doer, t Target, method, path, rawQuery string, read func(resp *http.Response, endpoint string) error) error {
	u := t.Join(path, rawQuery)
	shown := Target{URL: t.Join(path, ""), Socket: t.Socket}.String()
	var connected atomic.Bool
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		GotConn: func(httptrace.GotConnInfo) { connected.Store(true) },
	})
	req, err := http.NewRequestWithContext(ctx, method, u.String(), nil)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, shown, stripURLError(err))
	}
	resp, err := doer.Do(req)
	if err != nil {
		// url.Error repeats the whole URL, query and credentials included.
		err = stripURLError(err)
		switch {
		case errors.Is(err, syscall.ECONNREFUSED):
			return fmt.Errorf("%s %s: %w: %w", method, shown, ErrRefused, err)
		case !connected.Load():
			return fmt.Errorf("%s %s: %w: %w", method, shown, ErrNotConnected, err)
		}
		return fmt.Errorf("%s %s: %w", method, shown, err)
	}
	defer resp.Body.Close()
	return read(resp, shown)
}
