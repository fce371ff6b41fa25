package linkerd

import (
	"fmt"
	"time"
)

// What meshdrain tells the user about a Linkerd proxy, where an Istio sidecar would get an
// annotation or a proxy-config fix. Shared by prestop's log and the docs' wording.
const (
	// NoSeriesHint is the fix when a proxy shows no inbound request series to watch.
	NoSeriesHint = "a Linkerd proxy needs no annotation (its request metrics are on by default), but it writes a port's series only once a request has used it " +
		"and drops them after 10 minutes without one (LINKERD2_PROXY_METRICS_RETAIN_IDLE): a port with no request in the last 10 minutes has no series. " +
		"Pass --port with the app's target port(s): a watched port without series is read as no arrivals and nothing in flight"
	// NoDrainCallReason says why a Linkerd pod's drain makes no call.
	NoDrainCallReason = "a Linkerd proxy has no drain endpoint: it stops accepting only at its own SIGTERM (a native sidecar gets it after the app has exited); " +
		"clients move away as their endpoint lists update, which is what meshdrain waits for"
)

// SidecarGoneFix is the fix when the proxy stopped under live traffic: a classic proxy gets
// SIGTERM at the pod's deletion and stops accepting at once, so its preStop sleep must
// outlast the app's latest exit (the hook's deadline plus the app's drain), or the proxy
// must be a native sidecar, which the kubelet stops after the app.
func SidecarGoneFix(deadline, appDrain time.Duration) string {
	return fmt.Sprintf("make the proxy outlive the app's drain: use a native sidecar (Linkerd's default since 2.20, Kubernetes >= 1.29; "+
		`config.linkerd.io/proxy-enable-native-sidecar: "true"), or, with classic injection, set config.alpha.linkerd.io/proxy-wait-before-exit-seconds: "%d" `+
		"(at least the preStop deadline %v + the app's drain %v; the grace period 1s more) with config.linkerd.io/proxy-enable-native-sidecar: \"false\"; "+
		"meshdrain plan --mesh linkerd prints both", waitSeconds(deadline+appDrain), deadline, appDrain)
}

// UnreachableHint explains an admin port never reached in a pod that has a Linkerd proxy.
func UnreachableHint(deadline, appDrain time.Duration) string {
	return fmt.Sprintf("a classic linkerd-proxy closes its admin port with every other at its SIGTERM, which comes at the pod's deletion unless "+
		`config.alpha.linkerd.io/proxy-wait-before-exit-seconds makes it sleep first: if this pod's proxy is classic, it stopped under the app and late clients `+
		`are refused (set the annotation to at least "%d", or use a native sidecar)`, waitSeconds(deadline+appDrain))
}

// AdminCounter names the admin port's request counter in messages. Which port's series it
// is (the URL's, or 4191 behind a port-forward) is not known in advance.
const AdminCounter = `the admin port's request_total{direction="inbound"}`

// waitSeconds is proxy-wait-before-exit-seconds for a duration: whole seconds, rounded up.
func waitSeconds(d time.Duration) int {
	return int((d + time.Second - 1) / time.Second)
}
