package plan

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/meshdrain/meshdrain/pkg/localhttp"
	"github.com/meshdrain/meshdrain/pkg/mesh"
	"github.com/meshdrain/meshdrain/pkg/mesh/appmetrics"
	"github.com/meshdrain/meshdrain/pkg/operator/yamlnode"
	yaml "go.yaml.in/yaml/v3"
)

// Ambient is Istio's ambient mode, a plan input only: the pod has no sidecar, and ztunnel,
// which routes per connection and drains nothing when an endpoint goes, lives in the pod's
// network namespace (docs/facts.md §7). What the hook can see there is what it sees in a pod
// without a mesh, so the preStop runs --mesh=none; what differs is the plan around it: the
// kubelet's probes arrive from 169.254.7.127 (istio-cni's SNAT, so that ztunnel lets them
// through), not from the node's IP, and the clients' lag is istiod's push to every ztunnel.
const Ambient mesh.Mesh = "ambient"

// AmbientModeLabel: AmbientModeValue on a pod (or, more often, its namespace) enrols it in
// Istio's ambient mode.
const (
	AmbientModeLabel = "istio.io/dataplane-mode"
	AmbientModeValue = "ambient"
)

// Names of what a meshless plan writes into the app container.
const (
	// HostIPEnv is the app container's variable that holds the node's IP, from the downward
	// API. The kubelet's probes come from the node, so prestop leaves that source out:
	// --ignore-source=$(HOST_IP), which prestop reads from its environment itself because the
	// kubelet does not expand $(VAR) in a lifecycle exec command (docs/facts.md §1, "The
	// preStop's environment").
	HostIPEnv = "HOST_IP"
	// HostIPFieldPath is the downward API field HostIPEnv takes its value from.
	HostIPFieldPath = "status.hostIP"
	// IgnoreHostIP is prestop's --ignore-source value for the node's IP.
	IgnoreHostIP = "$(" + HostIPEnv + ")"
	// AmbientProbeSource is where the kubelet's probes come from in an Istio ambient pod:
	// istio-cni rewrites their source to this link-local address (docs/facts.md §7).
	AmbientProbeSource = "169.254.7.127"
	// ReadinessPeriodSeconds is the period of the readiness probe plan adds where the app
	// container has none: a new pod is in its Service's endpoints within 2 s of listening,
	// and the probes' connections, from the node, are left out of prestop's count.
	ReadinessPeriodSeconds = 2
)

// Meshless: the pod has no sidecar (--mesh none or ambient), and the kernel is the signal.
func (p Plan) Meshless() bool { return !p.mesh().sidecar() }

// IsMeshless says whether plan's mesh m means a pod without a sidecar.
func IsMeshless(m mesh.Mesh) bool {
	mp := meshPlanOf(m)
	return mp != nil && !mp.sidecar()
}

// meshlessPlan is the plan of a pod without a sidecar (--mesh none), or in Istio's ambient
// mode (ambient): the preStop reads the kernel, and the app's own SIGTERM handling is the
// other half of the plan.
type meshlessPlan struct{ ambient bool }

func (meshlessPlan) sidecar() bool        { return false }
func (meshlessPlan) fillsAutoImage() bool { return false }

func (meshlessPlan) refuses(flag string, m mesh.Mesh) string {
	switch flag {
	case "sidecar", "drain-duration", "defer-sidecar-drain":
		return fmt.Sprintf("--%s is a sidecar's: a pod of --mesh %s has none (the kernel is the signal)", flag, m)
	}
	return ""
}

func (meshlessPlan) normalize(in *Input) []error {
	in.DeferSidecarDrain = false
	return meshlessInputProblems(*in)
}

// fromWorkload reads the ports clients use and the probes on the loopback, and keeps the
// app's metrics, facts about the app, from the preStop.
func (meshlessPlan) fromWorkload(in *Input, w *Workload, given func(string) bool, _ bool) ([]string, error) {
	// A --port that is not a number would otherwise be dropped without a word.
	for _, v := range w.PrestopFlagValues("port") {
		for _, s := range strings.Split(v, ",") {
			if _, err := strconv.Atoi(strings.TrimSpace(s)); err != nil {
				return nil, fmt.Errorf("%s/%s: its preStop's --port %q is not a port number: fix it, or pass --port", w.Kind, w.Name, v)
			}
		}
	}
	var ports []int
	if given("port") {
		ports = in.Ports
	}
	watch := w.MeshlessWatch(ports)
	in.Ports, in.IgnoreLoopback = watch.Ports, watch.IgnoreLoopback
	for _, f := range []struct {
		flag  string
		value *string
	}{{"app-metrics", &in.AppMetrics}, {"app-requests", &in.AppRequests}} {
		if v, ok := w.PrestopFlag(f.flag); ok && !given(f.flag) {
			*f.value = v
		}
	}
	in.AllowRemote = w.PrestopHas("allow-remote")
	return watch.Notes, nil
}

func (meshlessPlan) recommend(p *Plan) { p.recommendMeshless() }

func (meshlessPlan) timeline(p Plan) []Step { return meshlessTimeline(p) }

func (m meshlessPlan) name(Plan) string {
	if m.ambient {
		return "none, Istio ambient (ztunnel in the pod's network namespace)"
	}
	return "none, the kernel is the signal"
}

func (meshlessPlan) prestopArgs(p Plan) []string { return p.meshlessArgs() }

func (meshlessPlan) ownsFlag(_ Plan, it prestopToken) bool {
	switch it.name {
	case "mesh":
		return true
	case "drain-at", "admin":
		// A meshless pod has no sidecar to drain or read: prestop refuses both with --mesh none.
		return true
	case "port":
		// Derived again at each plan, with the user's own that the container still has
		// (Workload.MeshlessWatch).
		return true
	}
	return false
}

func (meshlessPlan) annotations(Plan) []Annotation { return nil }

func (meshlessPlan) writeSettings(ew *errWriter, p Plan) { writeMeshlessSettings(ew, p) }

func (meshlessPlan) keptGraceNote(Plan, time.Duration) string { return "" }

func (meshlessPlan) derive(e *Edit, _ string) ([]string, error) { return e.deriveMeshless() }

func (meshlessPlan) writeJSON(p Plan, _ string, e *Edit, out *jsonPlan) {
	out.Mesh = p.Input.Mesh
	out.Env = map[string]string{HostIPEnv: HostIPFieldPath}
	if probe, ok := p.ReadinessProbe(); ok && (e == nil || e.readiness != nil || e.workload == nil) {
		out.ReadinessProbe = &jsonProbe{probe.Port, probe.PeriodSeconds}
	}
}

// rolloutCheck: meshdrain check reads a sidecar; without one, prestop's own start checks in
// the pod say what it needs: the TCP counters, a network namespace of the pod's own, a
// listener on every --port, and HOST_IP resolved from the pod's env.
func (meshlessPlan) rolloutCheck(_ Plan, e *Edit) []string {
	return append(e.PrestopCommand(), "--validate")
}

// IgnoredSources are prestop's --ignore-source values of a meshless plan: the node's IP (the
// kubelet's probes), and in ambient the probes' SNAT address.
func (p Plan) IgnoredSources() []string {
	if !p.Meshless() {
		return nil
	}
	sources := []string{IgnoreHostIP}
	if p.Input.Mesh == Ambient {
		sources = append(sources, AmbientProbeSource)
	}
	if p.Input.IgnoreLoopback {
		sources = append(sources, IgnoreLoopback4, IgnoreLoopback6)
	}
	return sources
}

// meshlessArgs are the preStop flags only a meshless plan writes: the mode, the app's ports
// and the sources that are never clients.
func (p Plan) meshlessArgs() []string {
	args := []string{"--mesh=" + string(mesh.None)}
	for _, port := range p.Input.Ports {
		args = append(args, "--port="+strconv.Itoa(port))
	}
	for _, src := range p.IgnoredSources() {
		args = append(args, "--ignore-source="+src)
	}
	if p.Input.AppMetrics != "" {
		args = append(args, "--app-metrics="+p.Input.AppMetrics)
		if p.Input.AppRequests != "" {
			args = append(args, "--app-requests="+p.Input.AppRequests)
		}
	}
	return args
}

// Probe is the readiness probe a meshless plan adds where the app container has none: a TCP
// connect to the app's first port. It says the app listens, which is what a new pod needs
// before a Service sends it connections; an HTTP probe on a path that checks what the app
// needs to serve (its database, its caches) says more, and plan leaves one the app has alone.
type Probe struct {
	Port          int
	PeriodSeconds int
}

// ReadinessProbe is the probe the plan adds where the app container has none; ok is false
// when the plan has no port to probe.
func (p Plan) ReadinessProbe() (Probe, bool) {
	if !p.Meshless() || len(p.Input.Ports) == 0 {
		return Probe{}, false
	}
	return Probe{Port: p.Input.Ports[0], PeriodSeconds: ReadinessPeriodSeconds}, true
}

// recommendMeshless adds what a pod without a sidecar needs to the mesh-independent plan:
// no sidecar outlives anything, so the app's own SIGTERM handling is the other half of the
// plan, and the notes say what it must do.
func (p *Plan) recommendMeshless() {
	in := p.Input
	probe, _ := p.ReadinessProbe()
	notes := []string{
		fmt.Sprintf("no sidecar: the app container's env gets %s from the downward API (fieldRef %s), the node's IP, from which the kubelet's probes come; "+
			"prestop reads --ignore-source=%s from its own environment, since the kubelet passes a lifecycle exec command as written (docs/facts.md §1). "+
			"Where the CNI sends probes from another node address (a bridge's gateway), add it: --ignore-source=ADDR",
			HostIPEnv, HostIPFieldPath, IgnoreHostIP),
		fmt.Sprintf("a readiness probe is added where the app container has none: tcpSocket :%d every %ds, so that a new pod gets connections only once it listens; "+
			"better is an httpGet on a path that checks what the app needs to serve (its database, its caches); plan leaves a probe the app has alone",
			probe.Port, probe.PeriodSeconds),
		fmt.Sprintf("the app's SIGTERM duties (meshdrain returns only once the clients have stopped, so the listener may close then, not before): "+
			"answer the next request on each kept-alive connection with Connection: close and close idle ones; HTTP/2 and gRPC: send GOAWAY "+
			"(grpc-go GracefulStop; a MaxConnectionAge bounds how long a client stays on one pod); WebSockets: a close frame (1001, going away); "+
			"finish what is in flight within --app-drain %s, then exit. A keep-alive client routed per connection never learns of the removal: "+
			"only the app's close moves it, and prestop names it in its final event rather than wait for it", fmtD(p.AppDrain)),
		fmt.Sprintf("node drains: kubectl drain evicts every pod of the node at once, each running this preStop; a PodDisruptionBudget (e.g. maxUnavailable: 1) "+
			"keeps enough replicas serving, and kubectl drain --grace-period must not be shorter than %ds (it overrides the pod's)", int(p.GracePeriod.Seconds())),
		"callers that address the pod directly (a metrics scraper) are clients to prestop: scrape on a port left out of --port, or add --ignore-source=CIDR for them",
	}
	if in.AppMetrics != "" {
		counter := in.AppRequests
		if counter == "" {
			counter = appmetrics.DefaultCounter
		}
		notes = append(notes, fmt.Sprintf("the app's own counter %s at %s is read beside the kernel until the lag bound (--app-metrics): "+
			"prestop checks at start that it answers and is a count; leave out with label matchers the paths that are nobody's requests, "+
			"the probes' and the metrics' own (prestop's reads), or each poll looks like a request until the bound", counter, localhttp.Redact(in.AppMetrics)))
	}
	if in.Mesh == Ambient {
		notes = append(notes,
			fmt.Sprintf("ambient: the preStop runs --mesh=none (ztunnel has no admin API for this pod's drain, and its inner connections to the app carry the client's address); "+
				"--ignore-source=%s leaves out the kubelet's probes, which istio-cni sends from that address; ztunnel's own ports (15008, 15006, 15001) are not --port. "+
				"--eds-lag is istiod's push to every ztunnel (pilot_proxy_convergence_time); with a waypoint, the waypoint's Envoy routes per request and learns by the same push",
				AmbientProbeSource))
	}
	p.Warnings = append(append(currentGraceWarnings(*p), implausibleInputs(in)...), notes...)
}

// meshlessTimeline lays out a pod without a sidecar: the kernel is what meshdrain reads, and
// the app's own shutdown is what moves the clients that never learn.
func meshlessTimeline(p Plan) []Step {
	in := p.Input
	dataPlanes := "EndpointSlice → every node's kube-proxy or Cilium, and the ingress controllers and gateways that send to pod IPs"
	reader := "the pod's socket table and TCP counters"
	if in.Mesh == Ambient {
		dataPlanes = "EndpointSlice → istiod → every node's ztunnel, and any waypoint"
	}
	probes := fmt.Sprintf("the node (%s)", HostIPEnv)
	if in.Mesh == Ambient {
		probes = AmbientProbeSource + " (istio-cni rewrites their source so that ztunnel lets them through)"
	}
	ports := make([]string, len(in.Ports))
	for i, port := range in.Ports {
		ports[i] = strconv.Itoa(port)
	}
	steps := []Step{
		{Who: "kubelet", What: fmt.Sprintf("pod deleted. Endpoint removal starts, asynchronously (%s). At the same moment the kubelet runs the app container's preStop (meshdrain); "+
			"there is no sidecar. Readiness probes go on during termination, from %s", dataPlanes, probes)},
		{Who: "meshdrain", What: fmt.Sprintf("makes no drain call (there is no proxy); reads %s every %s: the connections each client opens to port %s and the data it sends on "+
			"open ones, leaving out the probes' source (--ignore-source %s)", reader, fmtD(in.Poll), strings.Join(ports, ", "), strings.Join(p.IgnoredSources(), " "))},
		{Until: p.LastClientLag, Who: "clients", What: fmt.Sprintf(
			"routed per connection (kube-proxy, Cilium, ztunnel): a node stops opening connections here once its proxy has synced the removal (%s, the slowest by %s), "+
				"but a connection opened before keeps flowing until a side closes it. Routed per request (ingress-nginx, gateways, load balancers in IP mode): "+
				"the proxy stops choosing this pod once it learns, and leaves its idle connections open", clientsTypical(p), fmtD(p.LastClientLag))},
		{At: p.LastRequestDone, Who: "app", What: fmt.Sprintf(
			"still listening, answers the last requests of clients that had not learnt yet (arrived by %s, each ≤ p99 %s)", fmtD(p.LastClientLag), fmtD(in.P99))},
		{At: p.ExpectedFinish, Worst: p.Deadline, Who: "meshdrain", What: fmt.Sprintf(
			"no client has opened a connection or sent for %s (%s): returns; clients still sending on old connections past --eds-lag-bound %s are named "+
				"in its final event and left to the app's shutdown; bounded by --deadline %s, where it returns anyway and says so",
			fmtD(p.Quiet), meshdrainWaitSum(p), fmtD(p.LastClientLag), fmtD(p.Deadline))},
		{At: p.ExpectedFinish, Worst: p.Deadline, Who: "kubelet", What: "sends SIGTERM to the app as soon as its preStop returns"},
		{At: p.AppExitExpected, Worst: p.AppExitWorst, Who: "app", What: fmt.Sprintf(
			"on SIGTERM, and only then, stops accepting; answers the next request on each kept-alive connection with Connection: close and closes the idle ones "+
				"(HTTP/2, gRPC: GOAWAY; WebSockets: a close frame); finishes what is in flight and exits, within --app-drain %s", fmtD(p.AppDrain))},
	}
	return append(steps, killStep(p))
}

// writeMeshlessSettings prints what a meshless plan sets in the app container.
func writeMeshlessSettings(ew *errWriter, p Plan) {
	writeAnnotations(ew, p, "none needed")
	ew.printf("  app container env:             %s from the downward API (fieldRef %s): the node's IP, read by --ignore-source=%s\n",
		HostIPEnv, HostIPFieldPath, IgnoreHostIP)
	if probe, ok := p.ReadinessProbe(); ok {
		ew.printf("  app readiness probe:           where it has none: tcpSocket :%d, periodSeconds %d (better: an httpGet that checks what the app needs)\n",
			probe.Port, probe.PeriodSeconds)
	}
	ew.printf("  sidecar:                       none: the kernel's socket table and counters are what meshdrain reads\n")
}

// meshlessInputProblems are what a meshless plan cannot do without: the app's ports, each a
// port number, and no sidecar kind.
func meshlessInputProblems(in Input) []error {
	var errs []error
	if len(in.Ports) == 0 {
		errs = append(errs, fmt.Errorf("--mesh %s needs --port P, the app's own listening ports (with -f: the app container's TCP containerPorts): "+
			"with no sidecar, meshdrain reads the clients' connections to them", in.Mesh))
	}
	for _, port := range in.Ports {
		if port < 1 || port > 65535 {
			errs = append(errs, fmt.Errorf("--port %d: not a port number", port))
		}
	}
	if in.Sidecar != "" {
		errs = append(errs, fmt.Errorf("--sidecar %s: a pod of --mesh %s has no sidecar", in.Sidecar, in.Mesh))
	}
	if in.AppRequests != "" && in.AppMetrics == "" {
		errs = append(errs, errors.New("--app-requests names the counter --app-metrics reads: give --app-metrics too"))
	}
	if in.AppMetrics != "" {
		// prestop's own checks at start, but the read: the app runs in the pod.
		if _, err := localhttp.Parse(in.AppMetrics, in.AllowRemote); err != nil {
			errs = append(errs, fmt.Errorf("--app-metrics: %w", err))
		}
		if in.AppRequests != "" {
			if _, err := appmetrics.ParseSelector(in.AppRequests); err != nil {
				errs = append(errs, fmt.Errorf("--app-requests: %w", err))
			}
		}
	}
	return errs
}

// deriveMeshless derives, in a meshless plan, the app container's HOST_IP variable and, where
// it has no readiness probe, the probe; it refuses a pod on the node's network (prestop
// refuses --mesh none there: every socket and counter it would read is the node's) and a
// HOST_IP of the container's own that is not the node's IP.
func (e *Edit) deriveMeshless() ([]string, error) {
	p, w := e.plan, e.workload
	if !p.Meshless() {
		return nil, nil
	}
	var changes []string
	name := e.opts.Container
	if w != nil {
		id := w.Kind + "/" + w.Name
		if w.HostNetwork {
			return nil, fmt.Errorf("%s runs on the node's network (hostNetwork: true): its sockets and TCP counters are the node's, "+
				"so --mesh %s could not tell this pod's clients from any other's; prestop refuses it there", id, p.Input.Mesh)
		}
		if _, env := yamlnode.ItemByKey(yamlnode.Lookup(w.container, "env"), "name", HostIPEnv); env != nil {
			if yamlnode.Scalar(yamlnode.Path(env, "valueFrom", "fieldRef", "fieldPath")) != HostIPFieldPath || yamlnode.Lookup(env, "value") != nil {
				return nil, fmt.Errorf("container %s of %s sets %s to something other than the node's IP (fieldRef %s), which prestop's --ignore-source=%s reads: "+
					"rename your variable", name, id, HostIPEnv, HostIPFieldPath, IgnoreHostIP)
			}
		} else {
			e.hostIPEnv = hostIPEnvNode()
		}
	} else {
		e.hostIPEnv = hostIPEnvNode()
	}
	if e.hostIPEnv != nil {
		changes = append(changes, fmt.Sprintf("container %s: env %s from the downward API (fieldRef %s), the node's IP, read by --ignore-source=%s",
			name, HostIPEnv, HostIPFieldPath, IgnoreHostIP))
	}
	if probe, ok := p.ReadinessProbe(); ok && w != nil && !w.HasReadinessProbe {
		e.readiness = yamlnode.MapOf("tcpSocket", yamlnode.MapOf("port", yamlnode.Int(int64(probe.Port))), "periodSeconds", yamlnode.Int(int64(probe.PeriodSeconds)))
		changes = append(changes, fmt.Sprintf("container %s: readinessProbe tcpSocket :%d every %ds (it had none; an httpGet that checks what the app needs is better)",
			name, probe.Port, probe.PeriodSeconds))
	}
	return changes, nil
}

func hostIPEnvNode() *yaml.Node {
	return yamlnode.MapOf("name", yamlnode.Str(HostIPEnv), "valueFrom", yamlnode.MapOf("fieldRef", yamlnode.MapOf("fieldPath", yamlnode.Str(HostIPFieldPath))))
}
