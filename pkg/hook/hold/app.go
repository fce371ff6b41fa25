package hold

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/meshdrain/meshdrain/pkg/hook/drain"
	"github.com/meshdrain/meshdrain/pkg/sockets"
)

// DefaultOutboundPort is Istio's outbound capture port: iptables redirects the app's outbound
// connections to Envoy there, so an established connection on it is the app (or another
// container of the pod) still calling out through the proxy.
const DefaultOutboundPort = 15001

// PodPortsVariable is the variable Istio's injector sets in the istio-proxy container with the
// pod's declared containerPorts, as JSON (manifests/charts/istio-control/istio-discovery/files/
// injection-template.yaml). A preStop exec runs with the container's environment, so hold
// finds the app's ports there without being told.
const PodPortsVariable = "ISTIO_META_POD_PORTS"

// PodPorts reads the TCP ports of ISTIO_META_POD_PORTS' value, e.g.
// [{"name":"http","containerPort":8080,"protocol":"TCP"}] (no protocol means TCP).
func PodPorts(value string) ([]uint16, error) {
	if strings.TrimSpace(value) == "" {
		return nil, nil
	}
	var declared []struct {
		ContainerPort int    `json:"containerPort"`
		Protocol      string `json:"protocol"`
	}
	if err := json.Unmarshal([]byte(value), &declared); err != nil {
		return nil, fmt.Errorf("%s: %w", PodPortsVariable, err)
	}
	var ports []uint16
	for _, p := range declared {
		if p.Protocol != "" && !strings.EqualFold(p.Protocol, "TCP") {
			continue
		}
		if p.ContainerPort < 1 || p.ContainerPort > 65535 {
			return nil, fmt.Errorf("%s: containerPort %d is not a port number", PodPortsVariable, p.ContainerPort)
		}
		if port := uint16(p.ContainerPort); !slices.Contains(ports, port) {
			ports = append(ports, port)
		}
	}
	return ports, nil
}

// Table is the part of the pod's socket table hold reads; *sockets.AutoReader is one.
type Table interface {
	sockets.Reader
	sockets.ListenerReader
}

// App is how hold sees whether the app still uses the proxy: through the pod's socket table,
// which every container of the pod shares.
type App struct {
	// Ports are the app's ports. Empty: the app cannot be seen, and hold waits --app-drain
	// after the app was told to stop.
	Ports []uint16
	// OutboundPort is the proxy's outbound capture port (0: none watched).
	OutboundPort uint16
	// ProxyUID is the proxy's user (hold runs as it): sockets it owns on the app's ports are
	// the proxy's (Istio's TPROXY interception accepts the clients' connections there), not
	// the app's.
	ProxyUID uint32
	Table    Table
}

// appView is what the reads have shown of the app. It believes the app gone only from
// drain.MinQuietPolls reads in a row: one read, taken while the app is between two
// connections or mid-exit, cannot tell a pause from the end.
type appView struct {
	App
	// seen are the ports on which the app was seen listening: a port on which it never
	// listened (a containerPort declared but not used) says nothing when it is empty.
	seen      map[uint16]bool
	listening bool
	// goneAt is the first read without any of the app's listeners once one was seen: the
	// app was told to stop about then.
	goneAt time.Time
	// clear is how many full reads in a row showed nothing of the app's.
	clear int
	// invisible is why the app cannot be seen at all (no ports, no socket table).
	invisible error
}

func newAppView(a App) *appView {
	v := &appView{App: a, seen: map[uint16]bool{}}
	switch {
	case len(a.Ports) == 0:
		v.invisible = errors.New("no app port is known (declare the app's containerPorts, or pass --port)")
	case a.Table == nil:
		v.invisible = errors.New("no socket table")
	}
	return v
}

func (v *appView) visible() bool { return v.invisible == nil }

// apps says whether a socket on the app's ports is the app's own.
func (v *appView) apps(s sockets.Socket) bool { return s.OwnerKnown() && s.UID != v.ProxyUID }

// readListeners reads the app's listeners; it returns the ports newly seen.
func (v *appView) readListeners(now time.Time) ([]uint16, error) {
	if !v.visible() {
		return nil, nil
	}
	socks, err := v.Table.Listeners(v.Ports)
	if err != nil {
		return nil, v.failed(err)
	}
	var fresh []uint16
	listening := false
	for _, s := range socks {
		if !v.apps(s) {
			continue
		}
		listening = true
		if port := s.Local.Port(); !v.seen[port] {
			v.seen[port] = true
			fresh = append(fresh, port)
		}
	}
	if v.listening && !listening && v.goneAt.IsZero() {
		v.goneAt = now
	}
	v.listening = listening
	return fresh, nil
}

// readAll reads the listeners and the connections: the app still uses the proxy while it
// listens, holds a connection on its ports, or has an outbound connection open through it.
func (v *appView) readAll(now time.Time) ([]uint16, error) {
	fresh, err := v.readListeners(now)
	if err != nil || !v.visible() {
		return fresh, err
	}
	ports := v.Ports
	if v.OutboundPort != 0 && !slices.Contains(ports, v.OutboundPort) {
		ports = append(slices.Clone(ports), v.OutboundPort)
	}
	socks, err := v.Table.Read(ports)
	if err != nil {
		return fresh, v.failed(err)
	}
	held := v.listening
	for _, s := range socks {
		if s.Local.Port() == v.OutboundPort {
			// The proxy's end: established while the caller's end is open.
			held = held || s.State == sockets.Established
			continue
		}
		held = held || v.apps(s)
	}
	if held {
		v.clear = 0
	} else {
		v.clear++
	}
	return fresh, nil
}

// failed makes a read say nothing; a table that cannot be read at all makes the app invisible.
func (v *appView) failed(err error) error {
	v.clear = 0
	if errors.Is(err, sockets.ErrUnavailable) {
		v.invisible = err
	}
	return err
}

// letGo: the app was seen listening, and now neither listens nor holds anything.
func (v *appView) letGo() bool {
	return v.watched() && v.clear >= drain.MinQuietPolls
}

// watched: the app can be seen and was seen listening, so its letting go can be watched.
func (v *appView) watched() bool { return v.visible() && len(v.seen) > 0 }

// neverThere: the app's ports never had its listener, and nothing of the app's is open: the
// app container is gone (or never served on its declared ports).
func (v *appView) neverThere() bool {
	return v.visible() && len(v.seen) == 0 && v.clear >= drain.MinQuietPolls
}

func (v *appView) seenPorts() []int {
	ports := make([]int, 0, len(v.seen))
	for p := range v.seen {
		ports = append(ports, int(p))
	}
	slices.Sort(ports)
	return ports
}
