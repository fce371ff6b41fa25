package plan

import (
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/meshdrain/meshdrain/pkg/hook/drain"
	"github.com/meshdrain/meshdrain/pkg/operator/yamlnode"
	yaml "go.yaml.in/yaml/v3"
)

// DefaultGracePeriod is Kubernetes' terminationGracePeriodSeconds when a pod does not set it.
const DefaultGracePeriod = drain.DefaultGracePeriod

// sidecarContainers are container names that are a mesh's proxy, never the app: a manifest
// that lists one (custom injection) still has a single app container.
var sidecarContainers = []string{"istio-proxy", "linkerd-proxy", "consul-dataplane", "envoy-sidecar"}

// Workload is the pod template of one Deployment, StatefulSet or DaemonSet, and the app
// container chosen in it.
type Workload struct {
	Kind, Name, Namespace string
	// GracePeriod is terminationGracePeriodSeconds; GracePeriodSet is false when the
	// manifest leaves it to Kubernetes' default (30s).
	GracePeriod    time.Duration
	GracePeriodSet bool
	// Containers are the names of the pod's containers; Container is the app's.
	Containers []string
	Container  string
	// Ports are the app container's TCP containerPorts (the inbound ports Istio names).
	Ports []int
	// Annotations are the pod template's.
	Annotations map[string]string
	// PreStop describes the app container's preStop hook today ("" when it has none).
	PreStop string
	// PreStopIsMeshdrain is true when that hook already runs meshdrain prestop.
	PreStopIsMeshdrain bool
	// PrestopArgs are that hook's arguments after "prestop" (nil when it is not meshdrain's):
	// a re-plan keeps the flags plan does not own and reads its inputs from the others.
	PrestopArgs []string
	// PreStopOnlySleeps is true when that hook does nothing but sleep, for PreStopSleep:
	// meshdrain's wait does what it did, so plan replaces it without --replace-prestop.
	PreStopOnlySleeps bool
	PreStopSleep      time.Duration
	// HasProxy is true when the pod spec lists its own istio-proxy container in spec.containers:
	// an override that Istio's injector merges into the proxy it injects. ProxyPreStop describes
	// that container's preStop ("" when none), and ProxyHoldArgs are its arguments after "hold"
	// when it runs meshdrain hold (nil otherwise).
	HasProxy      bool
	ProxyPreStop  string
	ProxyHoldArgs []string
	// ProxyInInitContainers is true when the pod spec lists an istio-proxy in initContainers.
	ProxyInInitContainers bool
	// Labels are the pod template's (istio.io/dataplane-mode: ambient names Istio ambient).
	Labels map[string]string
	// HostNetwork is the pod spec's hostNetwork: the pod then sees the node's sockets.
	HostNetwork bool
	// HasReadinessProbe is true when the app container has a readinessProbe of its own.
	HasReadinessProbe bool
	// ContainerWhy says how the app container was chosen when the manifest did not make it
	// plain (one container of several with ports); "" otherwise.
	ContainerWhy string
	// ContainerPorts are the app container's TCP ports, with their names.
	ContainerPorts []ContainerPort
	// Services are the Services of the input that send to this workload's pods.
	Services []Service

	// probes are the app container's probes; otherPorts the other app containers' ports,
	// as CONTAINER:PORT.
	probes     []probe
	otherPorts []string

	obj, template, podSpec, container, proxy *yaml.Node
}

// Workload finds the workload to plan for (selector: its NAME or KIND/NAME, needed only when
// the stream holds several) and its app container (by name, or the only one).
func (m *Manifests) Workload(selector, container string) (*Workload, error) {
	var found []*yaml.Node
	var names, others []string
	for _, obj := range m.objects() {
		kind, name := yamlnode.Scalar(yamlnode.Lookup(obj, "kind")), yamlnode.Scalar(yamlnode.Path(obj, "metadata", "name"))
		if !isWorkloadKind(kind) {
			others = append(others, kind+"/"+name)
			continue
		}
		names = append(names, kind+"/"+name)
		if selector == "" || strings.EqualFold(selector, name) || strings.EqualFold(selector, kind+"/"+name) {
			found = append(found, obj)
		}
	}
	switch {
	case len(names) == 0:
		return nil, fmt.Errorf("no %s in the manifests (found %s)", strings.Join(WorkloadKinds, ", "), orNone(others))
	case len(found) == 0:
		return nil, fmt.Errorf("no workload %q in the manifests; there are: %s", selector, strings.Join(names, ", "))
	case len(found) > 1:
		return nil, fmt.Errorf("the manifests hold %d workloads (%s): choose one with --workload NAME", len(found), strings.Join(names, ", "))
	}
	w, err := readWorkload(found[0], container)
	if err != nil {
		return nil, err
	}
	w.Services = servicesFor(m.objects(), w)
	return w, nil
}

func readWorkload(obj *yaml.Node, container string) (*Workload, error) {
	w := &Workload{
		Kind:        yamlnode.Scalar(yamlnode.Lookup(obj, "kind")),
		Name:        yamlnode.Scalar(yamlnode.Path(obj, "metadata", "name")),
		Namespace:   yamlnode.Scalar(yamlnode.Path(obj, "metadata", "namespace")),
		GracePeriod: DefaultGracePeriod,
		obj:         obj,
	}
	id := w.Kind + "/" + w.Name
	w.template = yamlnode.Path(obj, "spec", "template")
	w.podSpec = yamlnode.Lookup(w.template, "spec")
	if w.template == nil || w.podSpec == nil || w.podSpec.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("%s has no spec.template.spec", id)
	}
	if g := yamlnode.Lookup(w.podSpec, "terminationGracePeriodSeconds"); g != nil && g.ShortTag() != "!!null" {
		secs, err := strconv.ParseInt(g.Value, 10, 64)
		if err != nil || secs < 0 {
			return nil, fmt.Errorf("%s: terminationGracePeriodSeconds %q is not a number of seconds", id, g.Value)
		}
		w.GracePeriod, w.GracePeriodSet = time.Duration(secs)*time.Second, true
	}
	w.Annotations = stringMap(yamlnode.Path(w.template, "metadata", "annotations"))
	w.Labels = stringMap(yamlnode.Path(w.template, "metadata", "labels"))
	w.HostNetwork = yamlnode.Scalar(yamlnode.Lookup(w.podSpec, "hostNetwork")) == "true"
	containers := yamlnode.Resolve(yamlnode.Lookup(w.podSpec, "containers"))
	if containers == nil || containers.Kind != yaml.SequenceNode || len(containers.Content) == 0 {
		return nil, fmt.Errorf("%s has no containers", id)
	}
	if err := w.chooseContainer(containers, container); err != nil {
		return nil, err
	}
	_, w.container = yamlnode.ItemByKey(containers, "name", w.Container)
	w.ContainerPorts = containerPorts(w.container)
	for _, p := range w.ContainerPorts {
		w.Ports = append(w.Ports, p.Number)
	}
	w.probes = readProbes(w.container)
	for _, c := range containers.Content {
		if name := yamlnode.Scalar(yamlnode.Lookup(c, "name")); name != w.Container && !slices.Contains(sidecarContainers, name) {
			for _, p := range containerPorts(c) {
				w.otherPorts = append(w.otherPorts, fmt.Sprintf("%s:%d", name, p.Number))
			}
		}
	}
	w.readPreStops(containers)
	return w, nil
}

// chooseContainer finds the app container: the one named (--container), the only one that
// is not a mesh's proxy, or the only one with ports.
func (w *Workload) chooseContainer(containers *yaml.Node, container string) error {
	id := w.Kind + "/" + w.Name
	var apps []string
	for _, c := range containers.Content {
		name := yamlnode.Scalar(yamlnode.Lookup(c, "name"))
		w.Containers = append(w.Containers, name)
		if !slices.Contains(sidecarContainers, name) {
			apps = append(apps, name)
		}
	}
	// A container without ports (a log shipper, an agent) serves no client: where only one
	// of the others has ports, that one is the app.
	var serving []string
	for _, name := range apps {
		if _, c := yamlnode.ItemByKey(containers, "name", name); len(containerPorts(c)) > 0 {
			serving = append(serving, name)
		}
	}
	switch {
	case container != "":
		if !slices.Contains(w.Containers, container) {
			return fmt.Errorf("%s has no container %q; its containers are: %s", id, container, strings.Join(w.Containers, ", "))
		}
		w.Container = container
	case len(apps) == 1:
		w.Container = apps[0]
	case len(serving) == 1:
		w.Container = serving[0]
		w.ContainerWhy = fmt.Sprintf("the app container is %s, the only one with ports (of %s); --container names another", w.Container, strings.Join(apps, ", "))
	default:
		return fmt.Errorf("%s has %d containers (%s): name the app's with --container", id, len(w.Containers), strings.Join(w.Containers, ", "))
	}
	return nil
}

// readPreStops reads the app container's probe and preStop, and the istio-proxy override's.
func (w *Workload) readPreStops(containers *yaml.Node) {
	w.HasReadinessProbe = yamlnode.Lookup(w.container, "readinessProbe") != nil
	w.PreStop, w.PreStopIsMeshdrain = describePreStop(yamlnode.Path(w.container, "lifecycle", "preStop"), "prestop")
	if w.PreStopIsMeshdrain {
		w.PrestopArgs = yamlnode.Strings(yamlnode.Path(w.container, "lifecycle", "preStop", "exec", "command"))[2:]
	}
	w.PreStopSleep, w.PreStopOnlySleeps = preStopSleep(yamlnode.Path(w.container, "lifecycle", "preStop"))
	if _, proxy := yamlnode.ItemByKey(containers, "name", ProxyContainerName); proxy != nil {
		w.HasProxy, w.proxy = true, proxy
		var isHold bool
		w.ProxyPreStop, isHold = describePreStop(yamlnode.Path(proxy, "lifecycle", "preStop"), "hold")
		if isHold {
			w.ProxyHoldArgs = append([]string{}, yamlnode.Strings(yamlnode.Path(proxy, "lifecycle", "preStop", "exec", "command"))[2:]...)
		}
	}
	if _, c := yamlnode.ItemByKey(yamlnode.Lookup(w.podSpec, "initContainers"), "name", ProxyContainerName); c != nil {
		w.ProxyInInitContainers = true
	}
}

// stringMap reads a mapping of strings (labels, annotations); empty when m is none.
func stringMap(m *yaml.Node) map[string]string {
	out := map[string]string{}
	if m != nil && m.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(m.Content); i += 2 {
			out[m.Content[i].Value] = yamlnode.Scalar(m.Content[i+1])
		}
	}
	return out
}

// ProxyHolds is true when the workload's istio-proxy runs meshdrain hold as its preStop.
func (w *Workload) ProxyHolds() bool { return w.ProxyHoldArgs != nil }

// Sidecar is the sidecar kind the pod's annotations ask for, and why; "" when they say nothing.
func (w *Workload) Sidecar() (Sidecar, string) {
	switch strings.ToLower(w.Annotations[NativeSidecarAnnotation]) {
	case "true":
		return Native, NativeSidecarAnnotation + `: "true"`
	case "false":
		return Classic, NativeSidecarAnnotation + `: "false"`
	}
	if cfg, err := w.proxyConfig(); err == nil && strings.EqualFold(yamlnode.Scalar(yamlnode.Path(cfg, "proxyMetadata", "EXIT_ON_ZERO_ACTIVE_CONNECTIONS")), "true") {
		return ExitOnZero, ProxyConfigAnnotation + " proxyMetadata.EXIT_ON_ZERO_ACTIVE_CONNECTIONS"
	}
	return "", ""
}

// LinkerdSidecar is the Linkerd injection the pod's annotations ask for, and why; "" when
// they say nothing (then Linkerd's default applies: native since 2.20). A wait-before-exit
// sleep without a native-sidecar annotation means a classic proxy: only a classic one runs it.
func (w *Workload) LinkerdSidecar() (Sidecar, string) {
	for _, key := range linkerdNativeKeys {
		switch strings.ToLower(w.Annotations[key]) {
		case "true":
			return Native, key + `: "true"`
		case "false":
			return Classic, key + `: "false"`
		}
	}
	if _, ok := w.Annotations[LinkerdWaitBeforeExitAnnotation]; ok {
		return Classic, LinkerdWaitBeforeExitAnnotation
	}
	return "", ""
}

// WaitBeforeExit is the pod's proxy-wait-before-exit-seconds, 0 when unset.
func (w *Workload) WaitBeforeExit() (time.Duration, error) {
	v, ok := w.Annotations[LinkerdWaitBeforeExitAnnotation]
	if !ok {
		return 0, nil
	}
	secs, err := strconv.ParseUint(strings.TrimSpace(v), 10, 32)
	if err != nil {
		// The injector logs and ignores a value that is not a number; plan says so at once.
		return 0, fmt.Errorf("%s/%s: annotation %s %q is not a whole number of seconds", w.Kind, w.Name, LinkerdWaitBeforeExitAnnotation, v)
	}
	return time.Duration(secs) * time.Second, nil
}

// DrainDuration is the drainDuration of the pod's proxy.istio.io/config, 0 when unset.
func (w *Workload) DrainDuration() (time.Duration, error) {
	return w.proxyConfigDuration("drainDuration")
}

// TerminationDrainDuration is the terminationDrainDuration of the pod's proxy.istio.io/config,
// 0 when unset.
func (w *Workload) TerminationDrainDuration() (time.Duration, error) {
	return w.proxyConfigDuration("terminationDrainDuration")
}

// MinimumDrainDuration is proxyMetadata.MINIMUM_DRAIN_DURATION of the pod's
// proxy.istio.io/config, 0 when unset.
func (w *Workload) MinimumDrainDuration() (time.Duration, error) {
	return w.proxyConfigDuration("proxyMetadata", "MINIMUM_DRAIN_DURATION")
}

// proxyConfigDuration reads a duration of the pod's proxy.istio.io/config, 0 when unset.
func (w *Workload) proxyConfigDuration(keys ...string) (time.Duration, error) {
	cfg, err := w.proxyConfig()
	if err != nil || cfg == nil {
		return 0, err
	}
	v := yamlnode.Scalar(yamlnode.Path(cfg, keys...))
	if v == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("%s %s %q: %w", ProxyConfigAnnotation, strings.Join(keys, "."), v, err)
	}
	return d, nil
}

// proxyConfig parses the proxy.istio.io/config annotation (JSON or YAML); nil when absent.
func (w *Workload) proxyConfig() (*yaml.Node, error) {
	raw, ok := w.Annotations[ProxyConfigAnnotation]
	if !ok || strings.TrimSpace(raw) == "" {
		return nil, nil
	}
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(raw), &doc); err != nil {
		return nil, fmt.Errorf("%s/%s: annotation %s is neither JSON nor YAML: %w", w.Kind, w.Name, ProxyConfigAnnotation, err)
	}
	if len(doc.Content) == 0 || yamlnode.Resolve(doc.Content[0]).Kind != yaml.MappingNode {
		return nil, fmt.Errorf("%s/%s: annotation %s is not a mapping", w.Kind, w.Name, ProxyConfigAnnotation)
	}
	return yamlnode.Resolve(doc.Content[0]), nil
}

// describePreStop says what a preStop handler does, for the operator who replaces it, and
// whether it is one exec of `meshdrain VERB`.
func describePreStop(h *yaml.Node, verb string) (what string, isMeshdrain bool) {
	if h == nil || h.Kind != yaml.MappingNode || len(h.Content) == 0 {
		return "", false
	}
	var parts []string
	for i := 0; i+1 < len(h.Content); i += 2 {
		kind, v := h.Content[i].Value, yamlnode.Resolve(h.Content[i+1])
		switch kind {
		case "exec":
			cmd := yamlnode.Strings(yamlnode.Lookup(v, "command"))
			if len(cmd) >= 2 && filepath.Base(cmd[0]) == "meshdrain" && cmd[1] == verb {
				isMeshdrain = true
			}
			parts = append(parts, fmt.Sprintf("exec %q", cmd))
		case "httpGet":
			parts = append(parts, fmt.Sprintf("httpGet %s:%s%s", yamlnode.Scalar(yamlnode.Lookup(v, "host")), yamlnode.Scalar(yamlnode.Lookup(v, "port")), yamlnode.Scalar(yamlnode.Lookup(v, "path"))))
		case "tcpSocket":
			parts = append(parts, fmt.Sprintf("tcpSocket :%s", yamlnode.Scalar(yamlnode.Lookup(v, "port"))))
		case "sleep":
			parts = append(parts, fmt.Sprintf("sleep %ss", yamlnode.Scalar(yamlnode.Lookup(v, "seconds"))))
		default:
			parts = append(parts, kind)
		}
	}
	return strings.Join(parts, " + "), isMeshdrain && len(parts) == 1
}
