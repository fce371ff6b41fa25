package plan

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/meshdrain/meshdrain/pkg/operator/yamlnode"
	yaml "go.yaml.in/yaml/v3"
)

// Which of the app's ports a meshless preStop watches (--port). Every connection to a watched
// port is a client's to prestop, so a port that only the kubelet's probes or a metrics
// scraper use would make them clients: a monitor that connects every second then holds the
// hook to its deadline. The ports clients use are the ones a Service sends to; without a
// Service in the input, every port but those that say they serve probes or metrics.

// ContainerPort is one TCP port of a container, as its spec names it.
type ContainerPort struct {
	Number int
	Name   string
}

// containerPorts are a container's TCP containerPorts.
func containerPorts(c *yaml.Node) []ContainerPort {
	var ports []ContainerPort
	for _, p := range yamlnode.Items(yamlnode.Lookup(c, "ports")) {
		proto := yamlnode.Scalar(yamlnode.Lookup(p, "protocol"))
		number, err := strconv.Atoi(yamlnode.Scalar(yamlnode.Lookup(p, "containerPort")))
		if err == nil && (proto == "" || proto == "TCP") {
			ports = append(ports, ContainerPort{Number: number, Name: yamlnode.Scalar(yamlnode.Lookup(p, "name"))})
		}
	}
	return ports
}

// probe is one of the app container's probes: the port it connects to (a number or a port
// name, "" for an exec probe) or the command it runs.
type probe struct {
	kind    string // livenessProbe, readinessProbe, startupProbe
	port    string
	command string
}

var probeKinds = []string{"livenessProbe", "readinessProbe", "startupProbe"}

func readProbes(c *yaml.Node) []probe {
	var probes []probe
	for _, kind := range probeKinds {
		pr := yamlnode.Lookup(c, kind)
		if pr == nil {
			continue
		}
		for _, handler := range []string{"httpGet", "tcpSocket", "grpc"} {
			if port := yamlnode.Scalar(yamlnode.Path(pr, handler, "port")); port != "" {
				probes = append(probes, probe{kind: kind, port: port})
			}
		}
		if cmd := yamlnode.Strings(yamlnode.Path(pr, "exec", "command")); len(cmd) > 0 {
			probes = append(probes, probe{kind: kind, command: strings.Join(cmd, " ")})
		}
	}
	return probes
}

// Service is what plan reads of a Service in the input: which pods it selects and the
// container ports it sends to (targetPort: a number or a port's name).
type Service struct {
	Name        string
	TargetPorts []string
}

// servicesFor are the Services among objs that select w's pods: same namespace (one left
// empty is applied to kubectl's), every selector label on the pod template.
func servicesFor(objs []*yaml.Node, w *Workload) []Service {
	var out []Service
	for _, obj := range objs {
		if yamlnode.Scalar(yamlnode.Lookup(obj, "kind")) != "Service" {
			continue
		}
		ns := yamlnode.Scalar(yamlnode.Path(obj, "metadata", "namespace"))
		if ns != "" && w.Namespace != "" && ns != w.Namespace {
			continue
		}
		selector := yamlnode.Path(obj, "spec", "selector")
		if selector == nil || selector.Kind != yaml.MappingNode || len(selector.Content) == 0 {
			continue // no selector: its endpoints are someone's own, not this workload's
		}
		selects := true
		for i := 0; i+1 < len(selector.Content); i += 2 {
			if v, ok := w.Labels[selector.Content[i].Value]; !ok || v != yamlnode.Scalar(selector.Content[i+1]) {
				selects = false
			}
		}
		if !selects {
			continue
		}
		svc := Service{Name: yamlnode.Scalar(yamlnode.Path(obj, "metadata", "name"))}
		for _, p := range yamlnode.Items(yamlnode.Path(obj, "spec", "ports")) {
			if proto := yamlnode.Scalar(yamlnode.Lookup(p, "protocol")); proto != "" && proto != "TCP" {
				continue
			}
			target := yamlnode.Scalar(yamlnode.Lookup(p, "targetPort"))
			if target == "" {
				target = yamlnode.Scalar(yamlnode.Lookup(p, "port")) // Kubernetes' default: the same as port
			}
			svc.TargetPorts = append(svc.TargetPorts, target)
		}
		out = append(out, svc)
	}
	return out
}

// notClientPortWords are words in a port's name that say it serves the platform (probes,
// metrics, administration), not clients.
var notClientPortWords = []string{"metrics", "admin", "management", "mgmt", "health", "healthz", "monitoring", "prometheus", "pprof", "debug", "actuator", "probe", "probes"}

// PromPortAnnotation names the port Prometheus scrapes (the common scrape configuration's
// convention): a scraper's connections, not clients'.
const PromPortAnnotation = "prometheus.io/port"

// ClientPorts are the app container's ports clients use, for --port: those a Service of the
// input sends to, or without one, every TCP port but those that serve only probes or metrics.
// left says, a line each, which ports were left out and why, with the flag that adds each
// back; it is empty when every port is watched.
func (w *Workload) ClientPorts() (ports []int, left []string) {
	if len(w.ContainerPorts) == 0 {
		return nil, nil
	}
	if len(w.Services) > 0 {
		var names []string
		for _, svc := range w.Services {
			names = append(names, "Service/"+svc.Name)
		}
		targeted := func(p ContainerPort) bool {
			for _, svc := range w.Services {
				if slices.Contains(svc.TargetPorts, strconv.Itoa(p.Number)) || (p.Name != "" && slices.Contains(svc.TargetPorts, p.Name)) {
					return true
				}
			}
			return false
		}
		for _, p := range w.ContainerPorts {
			if targeted(p) {
				ports = append(ports, p.Number)
			} else {
				left = append(left, fmt.Sprintf("%s left out: no Service of the input (%s) sends to it; --port %d watches it too", w.portName(p), strings.Join(names, ", "), p.Number))
			}
		}
		if len(ports) > 0 {
			return ports, left
		}
		ports, left = nil, []string{fmt.Sprintf("%s send to none of container %s's ports (%s); where another container of the pod receives them, plan it with --container; "+
			"meanwhile its ports are chosen as without a Service", strings.Join(names, ", "), w.Container, w.portList())}
	}
	probed := map[int]bool{}
	for _, pr := range w.probes {
		if n, ok := w.portNumber(pr.port); ok {
			probed[n] = true
		}
	}
	platform := map[int]string{} // port → why it serves the platform
	for _, p := range w.ContainerPorts {
		switch {
		case w.Annotations[PromPortAnnotation] == strconv.Itoa(p.Number):
			platform[p.Number] = fmt.Sprintf("the pod's %s annotation names it: a metrics scraper's", PromPortAnnotation)
		case nameSays(p.Name):
			platform[p.Number] = fmt.Sprintf("its name %q says it serves probes, metrics or administration", p.Name)
		}
	}
	// A port that only probes use: probed, while another port is neither probed nor the
	// platform's. The first port stays whatever: it is, by convention, the app's own.
	var plain []int
	for _, p := range w.ContainerPorts {
		if !probed[p.Number] && platform[p.Number] == "" {
			plain = append(plain, p.Number)
		}
	}
	for i, p := range w.ContainerPorts {
		if i > 0 && probed[p.Number] && platform[p.Number] == "" && len(plain) > 0 {
			platform[p.Number] = "only the kubelet's probes use it"
		}
	}
	for _, p := range w.ContainerPorts {
		if why := platform[p.Number]; why != "" {
			left = append(left, fmt.Sprintf("%s left out: %s (no Service in the input says which ports clients use); --port %d watches it too", w.portName(p), why, p.Number))
		} else {
			ports = append(ports, p.Number)
		}
	}
	if len(ports) == 0 {
		// Watching a monitor's port costs a longer wait; not watching a client's loses requests.
		for _, p := range w.ContainerPorts {
			ports = append(ports, p.Number)
		}
		return ports, []string{fmt.Sprintf("every port of container %s looks like the platform's (%s): all are watched; pass --port with the ones clients use", w.Container, w.portList())}
	}
	return ports, left
}

// nameSays: a port's name says it serves probes, metrics or administration.
func nameSays(name string) bool {
	for _, word := range strings.FieldsFunc(strings.ToLower(name), func(r rune) bool { return r == '-' || r == '_' || r == '.' }) {
		if slices.Contains(notClientPortWords, word) {
			return true
		}
	}
	return false
}

// portNumber resolves a probe's or Service's port (a number or a port name) to the app
// container's port number.
func (w *Workload) portNumber(ref string) (int, bool) {
	if n, err := strconv.Atoi(ref); err == nil {
		return n, true
	}
	for _, p := range w.ContainerPorts {
		if ref != "" && p.Name == ref {
			return p.Number, true
		}
	}
	return 0, false
}

func (w *Workload) portName(p ContainerPort) string {
	if p.Name != "" {
		return fmt.Sprintf("port %d (%s)", p.Number, p.Name)
	}
	return fmt.Sprintf("port %d", p.Number)
}

func (w *Workload) portList() string {
	var list []string
	for _, p := range w.ContainerPorts {
		list = append(list, strconv.Itoa(p.Number))
	}
	return strings.Join(list, ", ")
}

// loopbackCall finds a call to the pod's own loopback in a command: a host (localhost,
// 127.x.y.z, [::1]) with an optional port, or an address with no host (grpc_health_probe
// -addr=:8080), which is the loopback too.
var loopbackCall = regexp.MustCompile(`(?:(https?://)?(?:localhost|127\.\d{1,3}\.\d{1,3}\.\d{1,3}|\[::1\])(?::(\d+))?)|(?:(?:^|[\s=]):(\d+)\b)`)

// LoopbackProbes are the app container's exec probes that connect to one of ports on the
// pod's loopback: their connections come from 127.0.0.1 or ::1 at every period, and are no
// client's.
func (w *Workload) LoopbackProbes(ports []int) []string {
	var found []string
	for _, pr := range w.probes {
		if pr.command == "" {
			continue
		}
		for _, m := range loopbackCall.FindAllStringSubmatch(pr.command, -1) {
			port := m[2] + m[3]
			if port == "" {
				port = "80"
				if m[1] == "https://" {
					port = "443"
				}
			}
			if n, _ := strconv.Atoi(port); slices.Contains(ports, n) {
				found = append(found, fmt.Sprintf("%s exec %q", pr.kind, pr.command))
				break
			}
		}
	}
	return found
}

// OtherContainerPorts are the ports of the pod's other app containers (CONTAINER:PORT): where
// one of them proxies to the app over the loopback, its port is the one clients use.
func (w *Workload) OtherContainerPorts() []string { return append([]string(nil), w.otherPorts...) }

// Loopback sources as prestop's --ignore-source takes them: exec probes that call the app on
// the pod's loopback connect from there.
const (
	IgnoreLoopback4 = "127.0.0.0/8"
	IgnoreLoopback6 = "::1/128"
)

// MeshlessWatch is what a meshless plan watches in a workload read with -f: the ports clients
// use (--port), whether loopback sources are left out, and a line for the operator for each
// choice that is not plain from the manifest.
type MeshlessWatch struct {
	Ports          []int
	IgnoreLoopback bool
	Notes          []string
}

// MeshlessWatch derives the watched ports from the manifest (ClientPorts) unless the flag
// gave them (given). A re-plan derives them again and keeps a --port of the preStop's that the
// container still has (one the user added back); one it no longer has is dropped, since
// nothing would listen there and the hook would fall back to its fixed wait.
func (w *Workload) MeshlessWatch(given []int) MeshlessWatch {
	var mw MeshlessWatch
	if given != nil {
		mw.Ports = given
	} else {
		mw.Ports, mw.Notes = w.ClientPorts()
		for _, v := range w.PrestopFlagValues("port") {
			for _, s := range strings.Split(v, ",") {
				n, err := strconv.Atoi(strings.TrimSpace(s))
				switch {
				case err != nil || slices.Contains(mw.Ports, n):
				case len(w.ContainerPorts) == 0 || slices.ContainsFunc(w.ContainerPorts, func(p ContainerPort) bool { return p.Number == n }):
					// The container declares no ports (they are informational), or still has this one.
					mw.Ports = append(mw.Ports, n)
					mw.Notes = slices.DeleteFunc(mw.Notes, func(note string) bool { return strings.Contains(note, fmt.Sprintf("--port %d watches", n)) })
				default:
					mw.Notes = append(mw.Notes, fmt.Sprintf("--port=%d dropped from the preStop: container %s no longer has that port (it has %s)", n, w.Container, w.portList()))
				}
			}
		}
	}
	if probes := w.LoopbackProbes(mw.Ports); len(probes) > 0 {
		mw.IgnoreLoopback = true
		note := fmt.Sprintf("--ignore-source=%s --ignore-source=%s: %s call the app on the pod's loopback, and are no client", IgnoreLoopback4, IgnoreLoopback6, strings.Join(probes, ", "))
		if others := w.OtherContainerPorts(); len(others) > 0 {
			note += fmt.Sprintf("; where another container of the pod (%s) proxies to the app over the loopback, its connections are left out too: "+
				"its port is the one clients use, so plan that container (--container)", strings.Join(others, ", "))
		}
		mw.Notes = append(mw.Notes, note)
	}
	return mw
}
