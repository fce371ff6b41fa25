package mesh

import "fmt"

// Terms are the words a message uses for the pod's inbound side. A sidecar has inbound
// endpoints in its stats; a pod without one (--mesh none) has the app's own listening ports in
// its socket table, and a message that speaks of a sidecar there sends the user looking for one
// the pod does not have. Every message about --port and the inbound side that any mesh can
// reach takes its words from here, so the wording per mesh lives in one place.
type Terms struct {
	// Ports names the ports the inbound side is read on.
	Ports string
	// NotOnPort completes "--port names a port ...": a --port with nothing to read.
	NotOnPort string
	// NoPortStats says why no --port can be checked against the inbound side at all.
	NoPortStats string
	// NoSignal says that there is nothing usable to watch, as a log event's subject.
	NoSignal string
	// missing is PortsMissing's format: the ports with nothing to read, then those found.
	missing string
}

// PortsMissing says that --port values name nothing to read, and which ports there are.
func (t Terms) PortsMissing(missing, found []int) string {
	return fmt.Sprintf(t.missing, missing, found)
}

var sidecarTerms = Terms{
	Ports:     "the sidecar's inbound ports",
	NotOnPort: "the sidecar has no inbound endpoint for",
	NoPortStats: "the sidecar exposes no per-port inbound stats, and a completed-requests or connections signal " +
		"covers every inbound port of the pod, not only --port",
	NoSignal: "sidecar exposes no inbound request stats",
	missing:  "--port %v: the sidecar has no inbound endpoint for it; its inbound ports are %v",
}

// kernelTerms speak of what mesh/kernel reads: the listening sockets of the network namespace
// the hook runs in, which in a pod of its own are the app's.
var kernelTerms = Terms{
	Ports:       "the ports listening in this network namespace (the pod's socket table)",
	NotOnPort:   "nothing listens on in this network namespace",
	NoPortStats: "nothing listens in this network namespace (the pod's socket table shows no listening port)",
	NoSignal:    "nothing to watch: no --port listens in this network namespace",
	missing:     "--port %v: nothing listens on it in this network namespace (listening: %v)",
}

// Terms are the words for this mesh's inbound side.
func (m Mesh) Terms() Terms {
	if m == None {
		return kernelTerms
	}
	return sidecarTerms
}

// Terms are the words for the inbound side a snapshot with this naming was read from: the
// drain knows its sidecar only by what it answers.
func (n Naming) Terms() Terms {
	if n == NamingKernel {
		return None.Terms()
	}
	return sidecarTerms
}
