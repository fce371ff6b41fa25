// Package localhttp is how meshdrain speaks HTTP inside a pod: to the sidecar's admin API and
// to the app's own shutdown endpoint. Both live on the pod's loopback (or a unix socket). A
// preStop hook that could be pointed anywhere by a mistyped flag or an injected MESHDRAIN_*
// variable would be a request-forgery tool in every pod (cloud metadata at 169.254.169.254,
// the cluster's internal services), so every target is checked twice: when it is parsed,
// before any DNS lookup or connect, and again by the dialer on the address it is about to
// connect to. The client is net/http's, with every limit a hook needs: no proxy from the
// environment, no redirects, no HTTP/2, response headers and bodies capped, every call bounded
// by its context, reading and closing the body included.
package localhttp

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
)

// Target is where requests go: an http:// base URL, or a unix socket with the HTTP path to
// ask for on it.
type Target struct {
	// URL builds the requests. For a unix socket its host is "localhost" (what Envoy and most
	// servers expect in the Host header) and its path is the HTTP path after the socket.
	URL *url.URL
	// Socket is the unix socket path; "" for TCP.
	Socket string
	// Remote says the target was accepted only because remote targets were allowed.
	Remote bool
}

// unixPrefix starts the unix socket form: unix:/run/envoy/admin.sock for a base URL, or
// unix:/run/app.sock:/actuator/shutdown with the HTTP path after the socket. Docker's
// unix:///path spelling is accepted too.
const unixPrefix = "unix:"

// Syntax describes the accepted forms, for error messages and help texts.
const Syntax = "http://HOST[:PORT][/PATH] with HOST 127.0.0.1 (any 127.0.0.0/8), [::1] or localhost; or unix:/SOCKET[:/PATH]"

// ErrNotLoopback marks a target refused by the loopback guard.
var ErrNotLoopback = errors.New("not a loopback address")

// Parse parses and checks a target. Unless allowRemote is set, the host must be a loopback
// literal or "localhost"; nothing is resolved here.
func Parse(raw string, allowRemote bool) (Target, error) {
	if strings.HasPrefix(raw, unixPrefix) {
		return parseUnix(raw)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return Target{}, fmt.Errorf("%q: %w", redactRaw(raw), stripURLError(err))
	}
	if u.Scheme != "http" {
		return Target{}, fmt.Errorf("%q: scheme %q: want %s", u.Redacted(), u.Scheme, Syntax)
	}
	if u.Opaque != "" || u.Host == "" {
		return Target{}, fmt.Errorf("%q: no host: want %s", u.Redacted(), Syntax)
	}
	if port := u.Port(); port != "" {
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return Target{}, fmt.Errorf("%q: port %q is not a port number", u.Redacted(), port)
		}
	}
	host := u.Hostname()
	t := Target{URL: u}
	switch {
	case IsLoopbackHost(host):
	case allowRemote:
		t.Remote = true
	default:
		return Target{}, fmt.Errorf("%q: host %q is %w: meshdrain only calls the pod's own loopback (%s); pass --allow-remote to call another host",
			u.Redacted(), host, ErrNotLoopback, Syntax)
	}
	return t, nil
}

func parseUnix(raw string) (Target, error) {
	rest := strings.TrimPrefix(raw, unixPrefix)
	rest = strings.TrimPrefix(rest, "//") // unix:///path, as Docker spells it
	socket, path := rest, "/"
	if i := strings.Index(rest, ":/"); i >= 0 {
		socket, path = rest[:i], rest[i+1:]
	}
	if !strings.HasPrefix(socket, "/") || len(socket) < 2 {
		return Target{}, fmt.Errorf("%q: the socket path must be absolute: want unix:/SOCKET[:/PATH]", raw)
	}
	u, err := url.Parse("http://localhost" + path)
	if err != nil {
		return Target{}, fmt.Errorf("%q: path %q: %w", raw, path, stripURLError(err))
	}
	return Target{URL: u, Socket: socket}, nil
}

// IsLoopbackHost reports whether host (without port or brackets) is "localhost" or a loopback
// IP literal: 127.0.0.0/8, ::1, or an IPv4-mapped form of them.
func IsLoopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	addr, err := netip.ParseAddr(host)
	if err != nil || addr.Zone() != "" {
		return false
	}
	return addr.Unmap().IsLoopback()
}

// String is the target for logs: credentials redacted, a socket in its unix: form.
func (t Target) String() string {
	if t.URL == nil {
		return ""
	}
	if t.Socket != "" {
		if t.URL.Path == "/" || t.URL.Path == "" {
			return unixPrefix + t.Socket
		}
		return unixPrefix + t.Socket + ":" + t.URL.RequestURI()
	}
	return t.URL.Redacted()
}

// Join returns the URL for path (and raw query) under the target's base path.
func (t Target) Join(path, rawQuery string) *url.URL {
	u := *t.URL
	u.Path = strings.TrimSuffix(u.Path, "/") + path
	u.RawPath = ""
	u.RawQuery = rawQuery
	return &u
}

// Redact returns raw with any URL credentials replaced, for values that may not parse.
func Redact(raw string) string {
	if strings.HasPrefix(raw, unixPrefix) {
		return raw
	}
	u, err := url.Parse(raw)
	if err != nil {
		return redactRaw(raw)
	}
	if u.User == nil {
		return raw
	}
	return u.Redacted()
}

// redactRaw hides what could be a password in a URL that does not parse: anything between
// "://" and the last "@" of the authority.
func redactRaw(raw string) string {
	scheme := strings.Index(raw, "://")
	if scheme < 0 {
		return raw
	}
	authority := raw[scheme+3:]
	if end := strings.IndexAny(authority, "/?#"); end >= 0 {
		authority = authority[:end]
	}
	at := strings.LastIndex(authority, "@")
	if at < 0 {
		return raw
	}
	return raw[:scheme+3] + "xxxxx" + raw[scheme+3+at:]
}

// stripURLError drops url.Error's copy of the raw URL, which may hold credentials.
func stripURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// hostPortLoopback reports whether a dial address is a loopback literal or localhost.
func hostPortLoopback(addr string) (host string, ok bool) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return addr, false
	}
	return host, IsLoopbackHost(host)
}
