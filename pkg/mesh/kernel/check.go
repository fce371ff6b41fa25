package kernel

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"

	"github.com/meshdrain/meshdrain/pkg/sockets"
)

// KubeletPorts are the kubelet's own listeners (its API on 10250, its healthz on
// 127.0.0.1:10248). The kubelet runs in the node's network namespace, never in a pod's: a
// pod that sees them listening shares the node's namespace (hostNetwork).
var KubeletPorts = []uint16{10250, 10248}

// ErrHostNetwork is wrapped by CheckNamespace's error for a pod that shares the node's network
// namespace.
var ErrHostNetwork = errors.New("--mesh none: this pod shares the node's network namespace (hostNetwork)")

// CheckNamespace refuses a network namespace that is the node's (hostNetwork: true): there the
// socket table and /proc/net/snmp are node-wide, so every connection and every accept of every
// host process would count as this app's clients, and the hook would hold until its deadline.
// Two signs, either enough: the kubelet's listeners are in the table (KubeletPorts), or one of
// the --ignore-source addresses (plan writes the node's, status.hostIP) is an address of an
// interface here, which in a pod of its own it never is. A PID-namespace check (comparing
// /proc/1/ns/net with /proc/self/ns/net) cannot tell: the pod's PID 1 is in the pod's
// namespace either way.
func CheckNamespace(r sockets.ListenerReader, ignore []netip.Prefix) error {
	ls, err := r.Listeners(KubeletPorts)
	if err != nil {
		return fmt.Errorf("--mesh none: reading the listening sockets: %w", err)
	}
	if len(ls) > 0 {
		return fmt.Errorf("%w: the kubelet's port %d listens here; without a namespace of its own, the pod's socket table and TCP counters are the node's: run meshdrain with a sidecar mesh or a fixed wait (--mesh none cannot work here)", ErrHostNetwork, ls[0].Local.Port())
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil // nothing more to tell
	}
	for _, a := range addrs {
		ipn, ok := a.(*net.IPNet)
		if !ok {
			continue
		}
		ip, ok := netip.AddrFromSlice(ipn.IP)
		if !ok || ip.IsLoopback() {
			continue
		}
		ip = ip.Unmap()
		for _, p := range ignore {
			if p.IsSingleIP() && p.Addr() == ip {
				return fmt.Errorf("%w: --ignore-source %s (the node's address) is an address of this namespace; the pod's socket table and TCP counters are the node's: --mesh none cannot work here", ErrHostNetwork, ip)
			}
		}
	}
	return nil
}

// CheckCounters reads the namespace's TCP counters once: without them, accepts between two
// reads cannot be counted.
func CheckCounters(path string) error {
	if path == "" {
		path = sockets.DefaultSNMPPath
	}
	if _, err := sockets.ReadTCPCounters(path); err != nil {
		return fmt.Errorf("--mesh none: the pod's TCP counters cannot be read (%w); they count every accepted connection, and without them none can be counted", err)
	}
	return nil
}

// CheckListening says which of ports nobody listens on in the namespace, and which ports do
// listen.
func CheckListening(r sockets.ListenerReader, ports []int) (notListening, listening []int, err error) {
	ls, err := r.Listeners(nil)
	if err != nil {
		return nil, nil, fmt.Errorf("--mesh none: reading the listening sockets: %w", err)
	}
	seen := map[int]bool{}
	for _, l := range ls {
		p := int(l.Local.Port())
		if !seen[p] {
			seen[p] = true
			listening = append(listening, p)
		}
	}
	for _, p := range ports {
		if !seen[p] {
			notListening = append(notListening, p)
		}
	}
	return notListening, listening, nil
}

// EnvRef returns NAME for a value written $(NAME), and whether it is one.
func EnvRef(v string) (string, bool) {
	name, ok := strings.CutPrefix(strings.TrimSpace(v), "$(")
	if !ok || !strings.HasSuffix(name, ")") || len(name) < 2 {
		return "", false
	}
	return strings.TrimSuffix(name, ")"), true
}

// ParseIgnoreSource reads one --ignore-source value: a CIDR, an IP, or $(NAME), an environment
// variable read here (so the value works whether or not the kubelet expanded it; plan writes
// $(HOST_IP) with HOST_IP from status.hostIP). lookup reads the environment.
func ParseIgnoreSource(v string, lookup func(string) (string, bool)) (netip.Prefix, error) {
	raw := strings.TrimSpace(v)
	if name, ok := EnvRef(raw); ok {
		if lookup == nil {
			lookup = os.LookupEnv
		}
		val, set := lookup(name)
		if !set || strings.TrimSpace(val) == "" {
			return netip.Prefix{}, fmt.Errorf("--ignore-source %s: the variable %s is not set (plan writes env %s from fieldRef status.hostIP)", v, name, name)
		}
		raw = strings.TrimSpace(val)
	}
	if p, err := netip.ParsePrefix(raw); err == nil {
		return p.Masked(), nil
	}
	a, err := netip.ParseAddr(raw)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("--ignore-source %q: want a CIDR, an IP or $(NAME)", v)
	}
	a = a.Unmap()
	return netip.PrefixFrom(a, a.BitLen()), nil
}
