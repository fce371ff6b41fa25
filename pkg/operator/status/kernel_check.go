package status

import (
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strings"

	"github.com/meshdrain/meshdrain/pkg/mesh"
	"github.com/meshdrain/meshdrain/pkg/mesh/kernel"
	"github.com/meshdrain/meshdrain/pkg/operator/output"
	"github.com/meshdrain/meshdrain/pkg/sockets"
)

// KernelCheck is one item of `meshdrain check --mesh none`: what prestop --mesh none needs of
// the pod's kernel, checked from the namespace check runs in (the pod's, under kubectl exec).
type KernelCheck struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail,omitempty"`
	Fix    string `json:"fix,omitempty"`
}

// CheckKernel checks a pod without a sidecar: its own network namespace (not hostNetwork),
// its TCP counters, a listener on every --port, the socket table with tcp_info, and the
// kernel's destruction records, each as prestop --mesh none would use them.
func CheckKernel(r *sockets.AutoReader, snmpPath string, ports []int, ignore []netip.Prefix) []KernelCheck {
	return checkKernel(r, snmpPath, ports, ignore, "/proc")
}

// checkKernel is CheckKernel with the proc file system at proc, where the namespace item
// reads PID 1's.
func checkKernel(r *sockets.AutoReader, snmpPath string, ports []int, ignore []netip.Prefix, proc string) []KernelCheck {
	var out []KernelCheck
	add := func(name string, err error, detail, fix string) {
		c := KernelCheck{Name: name, OK: err == nil, Detail: detail}
		if err != nil {
			c.Detail, c.Fix = err.Error(), fix
		}
		out = append(out, c)
	}
	add("namespace", kernel.CheckNamespace(r, ignore), namespaceFound(proc, ignore),
		"a hostNetwork pod sees the node's sockets and counters: use a mesh, or a fixed wait")
	add("counters", kernel.CheckCounters(snmpPath), "/proc/net/snmp Tcp: PassiveOpens and InSegs readable",
		"prestop --mesh none counts every accept there; without it, it falls back to --fallback-wait")
	notListening, listening, err := kernel.CheckListening(r, ports)
	if err == nil && len(notListening) > 0 {
		err = errors.New(mesh.None.Terms().PortsMissing(notListening, listening))
	}
	add("ports", err, fmt.Sprintf("--port %v listening", ports), "name the app's own listening ports with --port; run check in the app's pod (kubectl exec)")
	var watched []uint16
	for _, p := range ports {
		watched = append(watched, uint16(p))
	}
	_, err = r.Read(watched)
	if err == nil {
		if fell := r.FellBack(); fell != nil {
			err = fmt.Errorf("read from /proc only (inet_diag refused: %v): no tcp_info, so data on open connections is not seen", fell)
		}
	}
	add("socket-table", err, "inet_diag with tcp_info", "allow NETLINK_SOCK_DIAG (a seccomp profile or an LSM refuses it); /proc alone sees new connections only")
	w, err := r.WatchGone(watched)
	if err == nil {
		w.Close()
	}
	add("destroy-records", err, "the sock_diag destroy broadcasts can be joined",
		"without them, a connection opened and closed between two reads counts as an unknown client's")
	return out
}

// KernelCheckFailed says whether any item failed.
func KernelCheckFailed(items []KernelCheck) bool {
	for _, c := range items {
		if !c.OK {
			return true
		}
	}
	return false
}

// WriteKernelCheck writes the items as text, JSON or YAML.
func WriteKernelCheck(w io.Writer, items []KernelCheck, format string) error {
	if format != OutputText {
		return output.Write(w, format, struct {
			Mesh   string        `json:"mesh"`
			Checks []KernelCheck `json:"checks"`
			Passed bool          `json:"passed"`
		}{"none", items, !KernelCheckFailed(items)})
	}
	var b strings.Builder
	for _, c := range items {
		mark := "ok  "
		if !c.OK {
			mark = "FAIL"
		}
		fmt.Fprintf(&b, "%s %-16s %s\n", mark, c.Name, c.Detail)
		if c.Fix != "" {
			fmt.Fprintf(&b, "     fix: %s\n", c.Fix)
		}
	}
	if KernelCheckFailed(items) {
		b.WriteString("check --mesh none: FAILED\n")
	} else {
		b.WriteString("check --mesh none: passed\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}
