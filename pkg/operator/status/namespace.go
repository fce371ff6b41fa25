package status

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/meshdrain/meshdrain/pkg/mesh/kernel"
)

// machineInits are the names a machine's own PID 1 has (/proc/1/comm). A pod's PID 1 is its
// container's first process (the app, a container init such as tini, dumb-init or
// docker-init, or pause where the pod shares its PID namespace), none of which is named so.
var machineInits = []string{"systemd", "init", "openrc-init", "runit"}

// namespaceFound says what check saw of the network namespace it runs in, once
// kernel.CheckNamespace found no sign of a node's. That check cannot tell a pod's namespace
// from a machine's without a kubelet (a laptop, a CI runner), so the item says what was
// checked, and what PID 1 shows: a process in PID 1's network namespace whose PID 1 is a
// machine's init runs in the machine's own namespace, whose socket table and TCP counters are
// every process's; one in another namespace than PID 1's has one of its own. proc is the
// proc file system's root ("/proc"); a link it cannot read is said as such.
func namespaceFound(proc string, ignore []netip.Prefix) string {
	var ports []string
	for _, p := range kernel.KubeletPorts {
		ports = append(ports, fmt.Sprint(p))
	}
	checked := "no kubelet listens here (ports " + strings.Join(ports, ", ") + ")"
	if len(ignore) > 0 {
		checked += " and no --ignore-source address is one of this namespace's"
	}
	checked = "not a node's: " + checked

	pid1, isInit := "unknown", false
	if comm, err := os.ReadFile(filepath.Join(proc, "1", "comm")); err == nil {
		pid1 = strings.TrimSpace(string(comm))
		isInit = slices.Contains(machineInits, pid1)
	}
	own, errOwn := os.Readlink(filepath.Join(proc, "self", "ns", "net"))
	first, errFirst := os.Readlink(filepath.Join(proc, "1", "ns", "net"))
	const runInPod = "what check finds here says nothing of a pod: run it in the app's pod (kubectl exec)"
	switch {
	case errOwn == nil && errFirst == nil && own != first:
		return fmt.Sprintf("%s; a network namespace of its own (%s), not PID 1's (%s; PID 1 is %s)", checked, own, first, pid1)
	case errOwn == nil && errFirst == nil && isInit:
		return fmt.Sprintf("%s; but it is PID 1's, and PID 1 is %s, a machine's init: this is a machine's own network namespace, not a pod's; %s",
			checked, pid1, runInPod)
	case errOwn == nil && errFirst == nil:
		return fmt.Sprintf("%s; shared with PID 1 (%s), as in a container, where PID 1 is its first process", checked, pid1)
	}
	why := errFirst
	if errOwn != nil {
		why = errOwn
	}
	if isInit {
		return fmt.Sprintf("%s; PID 1 is %s, a machine's init, and its network namespace cannot be read to compare (%v): this looks like a machine's own namespace, not a pod's; %s",
			checked, pid1, why, runInPod)
	}
	return fmt.Sprintf("%s; a pod's or a machine's: cannot be told (PID 1 is %s, and its network namespace cannot be read to compare: %v)", checked, pid1, why)
}
