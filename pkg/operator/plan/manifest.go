package plan

import (
	"bytes"
	"errors"
	"fmt"
	"github.com/meshdrain/meshdrain/pkg/operator/yamlnode"
	"io"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/meshdrain/meshdrain/pkg/hook/drain"
	"github.com/meshdrain/meshdrain/pkg/mesh"
	yaml "go.yaml.in/yaml/v3"
)

// WorkloadKinds are the kinds whose pod template plan can change.
var WorkloadKinds = []string{"Deployment", "StatefulSet", "DaemonSet"}

// DefaultGracePeriod is Kubernetes' terminationGracePeriodSeconds when a pod does not set it.
const DefaultGracePeriod = drain.DefaultGracePeriod

// sidecarContainers are container names that are a mesh's proxy, never the app: a manifest
// that lists one (custom injection) still has a single app container.
var sidecarContainers = []string{"istio-proxy", "linkerd-proxy", "consul-dataplane", "envoy-sidecar"}

// Manifests is the user's YAML stream (one or more documents): its bytes, each document's
// node tree as read, and a copy that the plan changes. What Write prints differs from the
// bytes only on the lines of the fields the plan sets.
type Manifests struct {
	data []byte
	orig []*yaml.Node // as read: the positions of what Write splices
	docs []*yaml.Node // what the plan changes
	// notes are what the last Write said about the comments it dropped.
	notes []string
	// json: the stream was JSON, which has no lines of its own to keep: Write prints it as
	// YAML, whole.
	json bool
}

// ReadManifests parses a YAML (or JSON) stream of Kubernetes objects.
func ReadManifests(r io.Reader) (*Manifests, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("read manifests: %w", err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	m := &Manifests{data: data}
	trimmed := bytes.TrimLeft(data, " \t\r\n")
	m.json = len(trimmed) > 0 && (trimmed[0] == '{' || trimmed[0] == '[')
	for {
		var doc yaml.Node
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("read manifests: document %d: %w", len(m.docs)+1, err)
		}
		if len(doc.Content) == 0 || doc.Content[0].ShortTag() == "!!null" {
			continue // an empty document, as between two `---`
		}
		if root := yamlnode.Resolve(doc.Content[0]); root.Kind != yaml.MappingNode {
			return nil, fmt.Errorf("read manifests: document %d is not a Kubernetes object (a YAML mapping)", len(m.docs)+1)
		}
		m.orig = append(m.orig, &doc)
		m.docs = append(m.docs, yamlnode.Copy(&doc))
	}
	if len(m.docs) == 0 {
		return nil, errors.New("read manifests: no document")
	}
	return m, nil
}

// Write prints the manifests as read, with the plan's changes spliced in: a document the
// plan does not change, and every line of a changed one outside the planned fields, is
// written byte for byte. A planned field that exists is rewritten on its own lines; a new
// one is added after its siblings, indented as they are. A comment on a rewritten line is
// dropped (it was about the old value) and named in Notes.
func (m *Manifests) Write(w io.Writer) error {
	m.notes = nil
	if m.json {
		return m.writeYAML(w)
	}
	var before, after []*yaml.Node
	for i, orig := range m.orig {
		before, after = append(before, orig.Content[0]), append(after, m.docs[i].Content[0])
	}
	out, notes, err := yamlnode.Splice(m.data, before, after)
	if err != nil {
		return err
	}
	m.notes = notes
	_, err = w.Write(out)
	return err
}

// writeYAML prints the manifests as YAML in block style, a document each: what -o yaml asks
// for, from a JSON input whose own layout is no YAML to splice into.
func (m *Manifests) writeYAML(w io.Writer) error {
	var buf bytes.Buffer
	for i, doc := range m.docs {
		if i > 0 {
			buf.WriteString("---\n")
		}
		n := yamlnode.Copy(doc)
		clearStyles(n)
		enc := yaml.NewEncoder(&buf)
		enc.SetIndent(2)
		if err := enc.Encode(n); err != nil {
			return fmt.Errorf("write document %d as YAML: %w", i+1, err)
		}
		if err := enc.Close(); err != nil {
			return err
		}
	}
	m.notes = append(m.notes, "the input was JSON: the changed manifests are written as YAML (-o json is not a manifest format of plan's)")
	_, err := w.Write(buf.Bytes())
	return err
}

// clearStyles clears the styles JSON gave n (flow collections, quoted strings), so that the
// encoder writes block YAML and quotes only what needs it.
func clearStyles(n *yaml.Node) {
	n.Style = 0
	for _, c := range n.Content {
		clearStyles(c)
	}
}

// Notes are what the last Write dropped: comments on the lines it rewrote, one sentence each,
// for the operator (stderr), since the output itself must hold only the manifests.
func (m *Manifests) Notes() []string { return append([]string(nil), m.notes...) }

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

// objects are the Kubernetes objects of the stream, a List's items in place of the List
// (kubectl get -o yaml prints one, and kubectl apply takes it).
func (m *Manifests) objects() []*yaml.Node {
	var objs []*yaml.Node
	for _, doc := range m.docs {
		obj := yamlnode.Resolve(doc.Content[0])
		if kind := yamlnode.Scalar(yamlnode.Lookup(obj, "kind")); strings.HasSuffix(kind, "List") && yamlnode.Lookup(obj, "items") != nil {
			for _, item := range yamlnode.Items(yamlnode.Lookup(obj, "items")) {
				if item = yamlnode.Resolve(item); item.Kind == yaml.MappingNode {
					objs = append(objs, item)
				}
			}
			continue
		}
		objs = append(objs, obj)
	}
	return objs
}

func readWorkload(obj *yaml.Node, container string) (*Workload, error) {
	w := &Workload{
		Kind:        yamlnode.Scalar(yamlnode.Lookup(obj, "kind")),
		Name:        yamlnode.Scalar(yamlnode.Path(obj, "metadata", "name")),
		Namespace:   yamlnode.Scalar(yamlnode.Path(obj, "metadata", "namespace")),
		GracePeriod: DefaultGracePeriod,
		Annotations: map[string]string{},
		Labels:      map[string]string{},
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
	if ann := yamlnode.Path(w.template, "metadata", "annotations"); ann != nil && ann.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(ann.Content); i += 2 {
			w.Annotations[ann.Content[i].Value] = yamlnode.Scalar(ann.Content[i+1])
		}
	}
	if lbl := yamlnode.Path(w.template, "metadata", "labels"); lbl != nil && lbl.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(lbl.Content); i += 2 {
			w.Labels[lbl.Content[i].Value] = yamlnode.Scalar(lbl.Content[i+1])
		}
	}
	w.HostNetwork = yamlnode.Scalar(yamlnode.Lookup(w.podSpec, "hostNetwork")) == "true"
	containers := yamlnode.Resolve(yamlnode.Lookup(w.podSpec, "containers"))
	if containers == nil || containers.Kind != yaml.SequenceNode || len(containers.Content) == 0 {
		return nil, fmt.Errorf("%s has no containers", id)
	}
	var apps []string
	for _, c := range containers.Content {
		name := yamlnode.Scalar(yamlnode.Lookup(c, "name"))
		w.Containers = append(w.Containers, name)
		if !contains(sidecarContainers, name) {
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
		if !contains(w.Containers, container) {
			return nil, fmt.Errorf("%s has no container %q; its containers are: %s", id, container, strings.Join(w.Containers, ", "))
		}
		w.Container = container
	case len(apps) == 1:
		w.Container = apps[0]
	case len(serving) == 1:
		w.Container = serving[0]
		w.ContainerWhy = fmt.Sprintf("the app container is %s, the only one with ports (of %s); --container names another", w.Container, strings.Join(apps, ", "))
	default:
		return nil, fmt.Errorf("%s has %d containers (%s): name the app's with --container", id, len(w.Containers), strings.Join(w.Containers, ", "))
	}
	_, w.container = yamlnode.ItemByKey(containers, "name", w.Container)
	w.ContainerPorts = containerPorts(w.container)
	for _, p := range w.ContainerPorts {
		w.Ports = append(w.Ports, p.Number)
	}
	w.probes = readProbes(w.container)
	for _, c := range containers.Content {
		if name := yamlnode.Scalar(yamlnode.Lookup(c, "name")); name != w.Container && !contains(sidecarContainers, name) {
			for _, p := range containerPorts(c) {
				w.otherPorts = append(w.otherPorts, fmt.Sprintf("%s:%d", name, p.Number))
			}
		}
	}
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
	return w, nil
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

// PatchOptions name the parts of the workload the plan adds.
type PatchOptions struct {
	// Container is the app container's name (strategic merge matches containers by name).
	Container string
	// Image is the meshdrain image used by the install init container. A workload that has
	// the init container keeps its own image unless ImageSet (--image was given).
	Image    string
	ImageSet bool
	// Dir is where the shared emptyDir is mounted in both containers.
	Dir string
	// ReplacePreStop allows replacing a preStop hook that is not meshdrain's.
	ReplacePreStop bool
}

// Volume and init container names the plan adds.
const (
	VolumeName        = "meshdrain"
	InitContainerName = "meshdrain-install"
	// volumeSizeLimit bounds the emptyDir: the binary is under 12 MiB.
	volumeSizeLimit = "32Mi"
)

// Edit is what the plan changes in a workload: the values to set, and a line per change for
// the operator. One Edit gives both outputs, the changed manifest and the patch, so the two
// cannot disagree.
type Edit struct {
	plan     Plan
	opts     PatchOptions
	workload *Workload // nil: a patch for a workload plan has not read

	annotations   []Annotation
	gracePeriod   int64
	volume        *yaml.Node
	initContainer *yaml.Node
	volumeMount   *yaml.Node
	preStop       *yaml.Node
	// removeHandlers are preStop handlers the workload has besides exec: a strategic-merge
	// patch must null them, or the result would hold two handlers (invalid).
	removeHandlers []string

	// Changes are the changes in words, in the order they apply.
	Changes []string
	// Replaced describes the preStop the edit replaces, "" when none.
	Replaced string
	// prestop is the preStop command a re-plan writes, with the user's flags kept.
	prestop prestopMerge
	// ReplacedOnlySlept is true when that preStop only slept (Workload.PreStopOnlySleeps):
	// replaced without --replace-prestop, and the app has nothing to take over from it.
	ReplacedOnlySlept bool

	// proxy is, in regime (b), the istio-proxy container the edit writes: plan's override, or
	// the workload's own with hold's preStop and the meshdrain mount merged in; nil in regime (a).
	proxy *yaml.Node
	// proxyMount is its mount of the meshdrain volume; proxyImage is true when the edit sets
	// the image (a new override, or one without an image).
	proxyMount *yaml.Node
	proxyImage bool
	// proxyRemoveHandlers are the istio-proxy preStop's handlers besides exec, which a
	// strategic-merge patch must null (--replace-prestop).
	proxyRemoveHandlers []string
	// hold is the hold command a re-plan writes, with the user's flags kept.
	hold prestopMerge

	// hostIPEnv is, in a meshless plan, the app container's HOST_IP variable from the
	// downward API (nil where the container has it already); readiness is the probe added
	// where the container has none (nil otherwise, and in a patch for a workload plan has not
	// read, which cannot know).
	hostIPEnv, readiness *yaml.Node
	// ProxyReplaced describes istio-proxy's preStop the edit replaces, "" when none.
	ProxyReplaced string
}

// ReplacementNote tells the operator which preStop the edit replaces and what that means
// for the app; "" when it replaces none.
func (e *Edit) ReplacementNote() string {
	switch {
	case e.Replaced == "":
		return ""
	case e.ReplacedOnlySlept:
		return fmt.Sprintf("replaces the preStop of container %s, %s, which only slept %s: meshdrain waits instead, for as long as clients still send",
			e.opts.Container, e.Replaced, fmtD(e.workload.PreStopSleep))
	}
	return fmt.Sprintf("replaces the preStop of container %s, %s (--replace-prestop): the app must now do on SIGTERM what that hook did",
		e.opts.Container, e.Replaced)
}

// ProxyReplacementNote tells the operator which istio-proxy preStop the edit replaces with
// meshdrain hold (--replace-prestop); "" when it replaces none.
func (e *Edit) ProxyReplacementNote() string {
	if e.ProxyReplaced == "" {
		return ""
	}
	return fmt.Sprintf("replaces the preStop of container %s, %s (--replace-prestop): meshdrain hold keeps the proxy until the app's hook has decided "+
		"and the app has let go of it, then drains it", ProxyContainerName, e.ProxyReplaced)
}

// NewEdit derives the changes that apply p to w (nil: no manifest was read, the patch
// then names o.Container and sets the annotations whole). With a workload, only what differs
// from it is a change: a re-plan of plan's own output changes nothing.
func NewEdit(p Plan, o PatchOptions, w *Workload) (*Edit, error) {
	if w != nil {
		o.Container = w.Container
	}
	if o.Container == "" || o.Image == "" || o.Dir == "" {
		return nil, errors.New("the patch needs a container name, an image and a directory")
	}
	dir := strings.TrimRight(o.Dir, "/")
	if !strings.HasPrefix(dir, "/") {
		return nil, fmt.Errorf("directory %q must be an absolute path", o.Dir)
	}
	o.Dir = dir
	e := &Edit{plan: p, opts: o, workload: w, gracePeriod: int64(p.GracePeriod / time.Second)}
	if err := e.deriveAnnotations(); err != nil {
		return nil, err
	}
	if w != nil {
		if err := e.checkConflicts(); err != nil {
			return nil, err
		}
		if w.GracePeriod != p.GracePeriod || !w.GracePeriodSet {
			was := fmt.Sprintf("%ds", int(w.GracePeriod/time.Second))
			if !w.GracePeriodSet {
				was = "unset (Kubernetes' default 30s)"
			}
			e.Changes = append(e.Changes, fmt.Sprintf("terminationGracePeriodSeconds: %s → %d", was, e.gracePeriod))
		}
	} else {
		e.Changes = append(e.Changes, fmt.Sprintf("terminationGracePeriodSeconds: %d", e.gracePeriod))
	}

	e.volume = yamlnode.MapOf("name", yamlnode.Str(VolumeName), "emptyDir", yamlnode.MapOf("sizeLimit", yamlnode.Str(volumeSizeLimit)))
	e.initContainer = yamlnode.MapOf(
		"name", yamlnode.Str(InitContainerName),
		"image", yamlnode.Str(o.Image),
		"args", yamlnode.Sequence(yamlnode.Str("install"), yamlnode.Str(dir)),
		"volumeMounts", yamlnode.Sequence(yamlnode.MapOf("name", yamlnode.Str(VolumeName), "mountPath", yamlnode.Str(dir))),
		"resources", yamlnode.MapOf(
			"requests", yamlnode.MapOf("cpu", yamlnode.Str("10m"), "memory", yamlnode.Str("16Mi")),
			"limits", yamlnode.MapOf("memory", yamlnode.Str("32Mi"))),
		// Pod Security "restricted" asks each of these of every container.
		"securityContext", yamlnode.MapOf(
			"runAsNonRoot", yamlnode.Bool(true),
			"runAsUser", yamlnode.Int(65532),
			"allowPrivilegeEscalation", yamlnode.Bool(false),
			"readOnlyRootFilesystem", yamlnode.Bool(true),
			"capabilities", yamlnode.MapOf("drop", yamlnode.Sequence(yamlnode.Str("ALL"))),
			"seccompProfile", yamlnode.MapOf("type", yamlnode.Str("RuntimeDefault"))),
	)
	e.volumeMount = yamlnode.MapOf("name", yamlnode.Str(VolumeName), "mountPath", yamlnode.Str(dir), "readOnly", yamlnode.Bool(true))
	binary := dir + "/meshdrain"
	e.prestop = prestopMerge{args: p.PrestopArgs()}
	if w != nil && w.PreStopIsMeshdrain {
		e.prestop = p.mergePrestop(w.PrestopArgs)
	}
	command := yamlnode.Sequence(yamlnode.Str(binary))
	for _, a := range e.prestop.args {
		command.Content = append(command.Content, yamlnode.Str(a))
	}
	e.preStop = yamlnode.MapOf("exec", yamlnode.MapOf("command", command))
	if w == nil {
		e.Changes = append(e.Changes,
			fmt.Sprintf("volume %s (emptyDir) and init container %s (%s, runs `meshdrain install %s`)", VolumeName, InitContainerName, o.Image, dir),
			fmt.Sprintf("container %s: mounts %s read-only; preStop runs %s %s", o.Container, dir, binary, strings.Join(e.prestop.args, " ")))
	} else {
		e.Changes = append(e.Changes, e.keepInstalled()...)
		e.Changes = append(e.Changes, e.prestopChanges(binary)...)
	}
	proxyChanges, err := e.deriveProxy(binary)
	if err != nil {
		return nil, err
	}
	e.Changes = append(e.Changes, proxyChanges...)
	meshlessChanges, err := e.deriveMeshless()
	if err != nil {
		return nil, err
	}
	e.Changes = append(e.Changes, meshlessChanges...)
	return e, nil
}

// deriveProxy derives, in regime (b), the istio-proxy container whose preStop runs meshdrain
// hold: plan's override (name, image: auto, the mount, the preStop) where the workload has
// none, or the workload's own override with the preStop and the mount merged in, every other
// field of it kept. A preStop of another kind there is refused without --replace-prestop, and
// replaced whole with it: a container has one preStop handler (a second type added next to
// it would be rejected by the API server, istio/istio#51865). In regime (a) a workload whose
// istio-proxy already runs hold is refused: plan would leave the drain deferred.
func (e *Edit) deriveProxy(binary string) ([]string, error) {
	p, w, dir := e.plan, e.workload, e.opts.Dir
	id := ""
	if w != nil {
		id = " of " + w.Kind + "/" + w.Name
	}
	if !p.defers() {
		if w != nil && w.ProxyHolds() && p.Input.Mesh == mesh.Istio {
			return nil, fmt.Errorf("container %s%s runs meshdrain hold as its preStop, which defers Istio's drain until prestop decides (regime b): "+
				"with --defer-sidecar-drain=false remove that preStop (or the %s container) and prestop's --drain-at=end first, or plan without it",
				ProxyContainerName, id, ProxyContainerName)
		}
		return nil, nil
	}
	if w != nil && w.Container == ProxyContainerName {
		return nil, fmt.Errorf("%s/%s: the app container cannot be %s, whose preStop is meshdrain hold in regime (b): name the app's with --container",
			w.Kind, w.Name, ProxyContainerName)
	}
	if w != nil && w.ProxyInInitContainers {
		return nil, fmt.Errorf("%s/%s lists %s in initContainers: Istio's injector takes the override from containers (and moves it into "+
			"initContainers itself for native sidecars), while a classic injection ignores one in initContainers and leaves a second %s "+
			"with image auto: move it to containers", w.Kind, w.Name, ProxyContainerName, ProxyContainerName)
	}
	e.hold = prestopMerge{args: p.HoldArgs()}
	if w != nil && w.ProxyHolds() {
		e.hold = p.mergeHold(w.ProxyHoldArgs)
	}
	command := yamlnode.Sequence(yamlnode.Str(binary))
	for _, a := range e.hold.args {
		command.Content = append(command.Content, yamlnode.Str(a))
	}
	preStop := yamlnode.MapOf("exec", yamlnode.MapOf("command", command))
	e.proxyMount = yamlnode.MapOf("name", yamlnode.Str(VolumeName), "mountPath", yamlnode.Str(dir), "readOnly", yamlnode.Bool(true))
	if w == nil || !w.HasProxy {
		e.proxy = yamlnode.MapOf("name", yamlnode.Str(ProxyContainerName), "image", yamlnode.Str(ProxyImageAuto),
			"volumeMounts", yamlnode.Sequence(e.proxyMount), "lifecycle", yamlnode.MapOf("preStop", preStop))
		e.proxyImage = true
		return []string{fmt.Sprintf("container %s (image: %s; Istio's injector merges it into the proxy it injects): mounts %s read-only; preStop runs %s %s",
			ProxyContainerName, ProxyImageAuto, dir, binary, strings.Join(e.hold.args, " "))}, nil
	}

	// The workload's own override: hold's preStop and the mount merged into it.
	proxy := yamlnode.Copy(w.proxy)
	var set []string
	if yamlnode.Scalar(yamlnode.Lookup(proxy, "image")) == "" {
		yamlnode.SetKey(proxy, "image", yamlnode.Str(ProxyImageAuto))
		e.proxyImage = true
		set = append(set, "image "+ProxyImageAuto)
	}
	if _, m := yamlnode.ItemByKey(yamlnode.Lookup(proxy, "volumeMounts"), "mountPath", dir); m != nil {
		if yamlnode.Scalar(yamlnode.Lookup(m, "name")) != VolumeName {
			return nil, fmt.Errorf("container %s%s already mounts volume %s at %s: pass --dir with another path", ProxyContainerName, id, yamlnode.Scalar(yamlnode.Lookup(m, "name")), dir)
		}
		e.proxyMount = yamlnode.Copy(m)
	} else {
		mounts, err := yamlnode.EnsureSeq(proxy, "volumeMounts")
		if err != nil {
			return nil, fmt.Errorf("container %s%s: %w", ProxyContainerName, id, err)
		}
		yamlnode.Upsert(mounts, "mountPath", e.proxyMount)
		set = append(set, fmt.Sprintf("mounts %s read-only", dir))
	}
	old := yamlnode.Path(w.proxy, "lifecycle", "preStop")
	switch {
	case w.ProxyPreStop == "":
		set = append(set, fmt.Sprintf("preStop runs %s %s", binary, strings.Join(e.hold.args, " ")))
	case w.ProxyHolds():
		oldBinary := yamlnode.Strings(yamlnode.Path(w.proxy, "lifecycle", "preStop", "exec", "command"))[0]
		changes := e.hold.changes
		if oldBinary != binary {
			changes = append([]string{fmt.Sprintf("runs %s (was %s)", binary, oldBinary)}, changes...)
		}
		if len(changes) == 0 {
			preStop = yamlnode.Copy(old)
			break
		}
		line := "preStop " + strings.Join(changes, ", ")
		if len(e.hold.kept) > 0 {
			line += "; keeps the preStop's own flags as they are: " + strings.Join(e.hold.kept, " ")
		}
		set = append(set, line)
	case !e.opts.ReplacePreStop:
		return nil, fmt.Errorf("container %s%s already has a preStop hook (%s), and meshdrain hold takes its place (regime b, "+
			"docs/decision-rule.md): pass --replace-prestop to replace it, or --defer-sidecar-drain=false to leave %s as it is",
			ProxyContainerName, id, w.ProxyPreStop, ProxyContainerName)
	default:
		e.ProxyReplaced = w.ProxyPreStop
		for i := 0; i+1 < len(old.Content); i += 2 {
			if h := old.Content[i].Value; h != "exec" {
				e.proxyRemoveHandlers = append(e.proxyRemoveHandlers, h)
			}
		}
		set = append(set, fmt.Sprintf("preStop runs %s %s", binary, strings.Join(e.hold.args, " ")))
	}
	lifecycle, err := yamlnode.EnsureMap(proxy, "lifecycle")
	if err != nil {
		return nil, fmt.Errorf("container %s%s: %w", ProxyContainerName, id, err)
	}
	yamlnode.SetKey(lifecycle, "preStop", preStop)
	e.proxy = proxy
	if len(set) == 0 {
		return nil, nil
	}
	return []string{fmt.Sprintf("container %s (the workload's own override, its other fields kept): %s", ProxyContainerName, strings.Join(set, ", "))}, nil
}

// ProxyPrestopCommand is istio-proxy's preStop command the edit writes (meshdrain hold and its
// arguments); nil in regime (a).
func (e *Edit) ProxyPrestopCommand() []string {
	if e.proxy == nil {
		return nil
	}
	return yamlnode.Strings(yamlnode.Path(e.proxy, "lifecycle", "preStop", "exec", "command"))
}

// KeptHoldArgs are the tokens of the workload's hold preStop that the edit keeps as written.
func (e *Edit) KeptHoldArgs() []string { return append([]string(nil), e.hold.kept...) }

// keepInstalled takes the volume, the init container and the mount the workload already has
// in place of plan's own, changing in them only what plan must (the image when --image is
// given, the directory), and says what it adds or changes.
func (e *Edit) keepInstalled() []string {
	w, dir := e.workload, e.opts.Dir
	var changes []string
	if _, v := yamlnode.ItemByKey(yamlnode.Lookup(w.podSpec, "volumes"), "name", VolumeName); v != nil {
		e.volume = yamlnode.Copy(v) // an emptyDir (checkConflicts): its size and medium are the user's
	} else {
		changes = append(changes, fmt.Sprintf("volume %s (emptyDir)", VolumeName))
	}
	if _, c := yamlnode.ItemByKey(yamlnode.Lookup(w.podSpec, "initContainers"), "name", InitContainerName); c != nil {
		kept := yamlnode.Copy(c)
		var set []string
		if image := yamlnode.Scalar(yamlnode.Lookup(c, "image")); image == "" || (e.opts.ImageSet && image != e.opts.Image) {
			yamlnode.SetKey(kept, "image", yamlnode.Str(e.opts.Image))
			if image == "" {
				image = "none"
			}
			set = append(set, fmt.Sprintf("image %s → %s", image, e.opts.Image))
		}
		if args := yamlnode.Strings(yamlnode.Lookup(c, "args")); strings.Join(args, " ") != "install "+dir {
			yamlnode.SetKey(kept, "args", yamlnode.Sequence(yamlnode.Str("install"), yamlnode.Str(dir)))
			set = append(set, fmt.Sprintf("args %q → [install %s]", args, dir))
		}
		if _, m := yamlnode.ItemByKey(yamlnode.Lookup(c, "volumeMounts"), "name", VolumeName); m == nil || yamlnode.Scalar(yamlnode.Lookup(m, "mountPath")) != dir {
			mounts, err := yamlnode.EnsureSeq(kept, "volumeMounts")
			if err == nil {
				yamlnode.Upsert(mounts, "name", yamlnode.MapOf("name", yamlnode.Str(VolumeName), "mountPath", yamlnode.Str(dir)))
				set = append(set, "mounts "+dir)
			}
		}
		e.initContainer = kept
		if len(set) > 0 {
			changes = append(changes, fmt.Sprintf("init container %s: %s (its other fields are kept)", InitContainerName, strings.Join(set, ", ")))
		}
	} else {
		changes = append(changes, fmt.Sprintf("init container %s (%s, runs `meshdrain install %s`)", InitContainerName, e.opts.Image, dir))
	}
	if _, m := yamlnode.ItemByKey(yamlnode.Lookup(w.container, "volumeMounts"), "mountPath", dir); m != nil {
		e.volumeMount = yamlnode.Copy(m) // its name is meshdrain's (checkConflicts)
	} else {
		changes = append(changes, fmt.Sprintf("container %s: mounts %s read-only", w.Container, dir))
	}
	return changes
}

// prestopChanges says what the edit does to the app container's preStop; a meshdrain preStop
// whose planned flags keep their values is left exactly as it is written.
func (e *Edit) prestopChanges(binary string) []string {
	w := e.workload
	if !w.PreStopIsMeshdrain {
		return []string{fmt.Sprintf("container %s: preStop runs %s %s", w.Container, binary, strings.Join(e.prestop.args, " "))}
	}
	oldBinary := yamlnode.Strings(yamlnode.Path(w.container, "lifecycle", "preStop", "exec", "command"))[0]
	changes := e.prestop.changes
	if oldBinary != binary {
		changes = append([]string{fmt.Sprintf("runs %s (was %s)", binary, oldBinary)}, changes...)
	}
	if len(changes) == 0 {
		e.preStop = yamlnode.Copy(yamlnode.Path(w.container, "lifecycle", "preStop"))
		return nil
	}
	line := fmt.Sprintf("container %s: preStop %s", w.Container, strings.Join(changes, ", "))
	if len(e.prestop.kept) > 0 {
		line += "; keeps the preStop's own flags as they are: " + strings.Join(e.prestop.kept, " ")
	}
	return []string{line}
}

// PrestopCommand is the preStop command the edit writes: the binary and its arguments.
func (e *Edit) PrestopCommand() []string {
	return yamlnode.Strings(yamlnode.Lookup(yamlnode.Lookup(e.preStop, "exec"), "command"))
}

// KeptPrestopArgs are the tokens of the workload's preStop that the edit keeps as the user
// wrote them (flags plan does not own, and what follows "--"); none on a first plan.
func (e *Edit) KeptPrestopArgs() []string { return append([]string(nil), e.prestop.kept...) }

// checkConflicts refuses what a merge would silently break, and records a replaced preStop.
func (e *Edit) checkConflicts() error {
	w := e.workload
	id := w.Kind + "/" + w.Name
	if w.HasProxy && yamlnode.Scalar(yamlnode.Lookup(w.proxy, "image")) == ProxyImageAuto && e.plan.Input.Mesh != mesh.Istio {
		// Only Istio's injector fills image: auto; anywhere else the kubelet pulls "auto".
		return fmt.Errorf("%s has a container %s with image: %s, an override only Istio's injector fills, in a pod planned for --mesh %s: "+
			"the pod would never start (the image %q cannot be pulled); remove that container, or plan with --mesh istio if Istio injects the pod",
			id, ProxyContainerName, ProxyImageAuto, e.plan.Input.Mesh, ProxyImageAuto)
	}
	if _, v := yamlnode.ItemByKey(yamlnode.Lookup(w.podSpec, "volumes"), "name", VolumeName); v != nil && yamlnode.Lookup(v, "emptyDir") == nil {
		return fmt.Errorf("%s already has a volume named %s that is not an emptyDir: rename it", id, VolumeName)
	}
	if _, m := yamlnode.ItemByKey(yamlnode.Lookup(w.container, "volumeMounts"), "mountPath", e.opts.Dir); m != nil && yamlnode.Scalar(yamlnode.Lookup(m, "name")) != VolumeName {
		return fmt.Errorf("container %s already mounts volume %s at %s: pass --dir with another path", w.Container, yamlnode.Scalar(yamlnode.Lookup(m, "name")), e.opts.Dir)
	}
	if w.PreStop == "" || w.PreStopIsMeshdrain {
		return nil
	}
	if !w.PreStopOnlySleeps && !e.opts.ReplacePreStop {
		return fmt.Errorf("container %s of %s already has a preStop hook that does more than sleep (%s), and meshdrain's preStop "+
			"takes its place: pass --replace-prestop once the app does on SIGTERM what that hook did", w.Container, id, w.PreStop)
	}
	e.Replaced, e.ReplacedOnlySlept = w.PreStop, w.PreStopOnlySleeps
	for i := 0; i+1 < len(yamlnode.Path(w.container, "lifecycle", "preStop").Content); i += 2 {
		if h := yamlnode.Path(w.container, "lifecycle", "preStop").Content[i].Value; h != "exec" {
			e.removeHandlers = append(e.removeHandlers, h)
		}
	}
	return nil
}

// deriveAnnotations computes each annotation's new value: merged into what the pod has, since
// an annotation is replaced whole by a patch and proxy.istio.io/config holds other settings.
func (e *Edit) deriveAnnotations() error {
	for _, a := range e.plan.Annotations() {
		value, change := a.Value, ""
		var old string
		var had bool
		if e.workload != nil {
			old, had = e.workload.Annotations[a.Key]
		}
		switch a.Key {
		case StatsInclusionAnnotation:
			value, change = mergePrefixes(old, a.Value)
		case ProxyConfigAnnotation:
			var err error
			value, change, err = e.mergeProxyConfig()
			if err != nil {
				return err
			}
		default:
			change = fmt.Sprintf("%q → %q", old, a.Value)
		}
		if had && old == value {
			continue
		}
		e.annotations = append(e.annotations, Annotation{a.Key, value})
		if !had {
			change = "added: " + value
		}
		e.Changes = append(e.Changes, fmt.Sprintf("annotation %s %s", a.Key, change))
	}
	return nil
}

// mergePrefixes adds the prefixes meshdrain needs to a comma-separated inclusion list.
func mergePrefixes(old, needed string) (string, string) {
	var have []string
	for _, p := range strings.Split(old, ",") {
		if p = strings.TrimSpace(p); p != "" {
			have = append(have, p)
		}
	}
	var added []string
	for _, p := range strings.Split(needed, ",") {
		if !contains(have, p) {
			have, added = append(have, p), append(added, p)
		}
	}
	return strings.Join(have, ","), "adds " + strings.Join(added, ",")
}

// proxyConfigSettings are the proxy.istio.io/config keys the plan sets, in order.
func (e *Edit) proxyConfigSettings() []struct {
	path  []string
	value string
} {
	p := e.plan
	var out []struct {
		path  []string
		value string
	}
	add := func(value string, keys ...string) {
		out = append(out, struct {
			path  []string
			value string
		}{keys, value})
	}
	if p.DrainDuration > 0 {
		add(fmtD(p.DrainDuration), "drainDuration")
	}
	switch {
	case p.TerminationDrainDuration > 0:
		add(fmtD(p.TerminationDrainDuration), "terminationDrainDuration")
	case p.ExitOnZeroActiveConnections:
		add("true", "proxyMetadata", "EXIT_ON_ZERO_ACTIVE_CONNECTIONS")
		add(fmtD(p.MinimumDrainDuration), "proxyMetadata", "MINIMUM_DRAIN_DURATION")
	}
	return out
}

// mergeProxyConfig sets the plan's keys in the pod's proxy config, keeping every other key
// and the annotation's format (JSON stays JSON, YAML stays YAML). A key that already has the
// plan's value is not a change; when none changes the annotation stays as it is written.
func (e *Edit) mergeProxyConfig() (value, change string, err error) {
	var cfg *yaml.Node
	isYAML := false
	raw := ""
	if e.workload != nil {
		cfg, err = e.workload.proxyConfig()
		if err != nil {
			return "", "", err
		}
		raw = e.workload.Annotations[ProxyConfigAnnotation]
		isYAML = cfg != nil && !strings.HasPrefix(strings.TrimSpace(raw), "{")
	}
	if cfg == nil {
		cfg = yamlnode.Mapping()
	}
	var set []string
	changedKeys := map[string]bool{}
	for _, s := range e.proxyConfigSettings() {
		old := yamlnode.Scalar(yamlnode.Path(cfg, s.path...))
		if old != "" && sameFlagValue(old, s.value) {
			continue
		}
		m := cfg
		for _, k := range s.path[:len(s.path)-1] {
			if m, err = yamlnode.EnsureMap(m, k); err != nil {
				return "", "", fmt.Errorf("%s: %w", ProxyConfigAnnotation, err)
			}
		}
		yamlnode.SetKey(m, s.path[len(s.path)-1], yamlnode.Str(s.value))
		changedKeys[s.path[0]] = true
		name := strings.Join(s.path, ".")
		if old != "" {
			set = append(set, fmt.Sprintf("%s %s → %s", name, old, s.value))
		} else {
			set = append(set, name+" "+s.value)
		}
	}
	if len(set) == 0 {
		return raw, "", nil
	}
	var kept []string
	for i := 0; i+1 < len(cfg.Content); i += 2 {
		if k := cfg.Content[i].Value; !changedKeys[k] {
			kept = append(kept, k)
		}
	}
	if isYAML {
		// In the annotation's own indentation, so that its lines the plan does not set stay.
		var buf bytes.Buffer
		enc := yaml.NewEncoder(&buf)
		indent, compact := yamlnode.EncoderIndent(cfg)
		enc.SetIndent(indent)
		if compact {
			enc.CompactSeqIndent()
		}
		if err := enc.Encode(cfg); err != nil {
			return "", "", err
		}
		if err := enc.Close(); err != nil {
			return "", "", err
		}
		value = buf.String()
	} else if value, err = yamlnode.JSON(cfg); err != nil {
		return "", "", err
	}
	change = "sets " + strings.Join(set, ", ")
	if len(kept) > 0 {
		change += " (keeps " + strings.Join(kept, ", ") + ")"
	}
	return value, change, nil
}

// Apply changes the workload's node tree; Manifests.Write then prints the manifests with
// these changes spliced in.
func (e *Edit) Apply() error {
	w := e.workload
	if w == nil {
		return errors.New("no workload to apply the plan to")
	}
	if len(e.annotations) > 0 {
		meta, err := yamlnode.EnsureMap(w.template, "metadata")
		if err != nil {
			return err
		}
		ann, err := yamlnode.EnsureMap(meta, "annotations")
		if err != nil {
			return err
		}
		for _, a := range e.annotations {
			yamlnode.SetKey(ann, a.Key, yamlnode.Str(a.Value))
		}
	}
	yamlnode.SetKey(w.podSpec, "terminationGracePeriodSeconds", yamlnode.Int(e.gracePeriod))
	for _, add := range []struct {
		list string
		key  string
		item *yaml.Node
	}{{"volumes", "name", e.volume}, {"initContainers", "name", e.initContainer}} {
		seq, err := yamlnode.EnsureSeq(w.podSpec, add.list)
		if err != nil {
			return err
		}
		yamlnode.Upsert(seq, add.key, add.item)
	}
	mounts, err := yamlnode.EnsureSeq(w.container, "volumeMounts")
	if err != nil {
		return err
	}
	yamlnode.Upsert(mounts, "mountPath", e.volumeMount)
	lifecycle, err := yamlnode.EnsureMap(w.container, "lifecycle")
	if err != nil {
		return err
	}
	yamlnode.SetKey(lifecycle, "preStop", e.preStop)
	if e.hostIPEnv != nil {
		env, err := yamlnode.EnsureSeq(w.container, "env")
		if err != nil {
			return err
		}
		yamlnode.Upsert(env, "name", e.hostIPEnv)
	}
	if e.readiness != nil {
		yamlnode.SetKey(w.container, "readinessProbe", e.readiness)
	}
	if e.proxy != nil {
		containers, err := yamlnode.EnsureSeq(w.podSpec, "containers")
		if err != nil {
			return err
		}
		yamlnode.Upsert(containers, "name", e.proxy)
	}
	return nil
}

// WritePatch prints the strategic-merge patch that makes the same changes as Apply, for
// `kubectl patch --type strategic`.
func (e *Edit) WritePatch(w io.Writer) error {
	p := e.plan
	ew := &errWriter{w: w}
	kind, name := "deployment", "NAME"
	ns := ""
	if e.workload != nil {
		kind, name = strings.ToLower(e.workload.Kind), e.workload.Name
		if e.workload.Namespace != "" {
			ns = " -n " + e.workload.Namespace
		}
	}
	lag := fmtD(p.LastClientLag)
	if p.Input.EDSLagMedian > 0 {
		lag = fmt.Sprintf("p50=%s,p99=%s, %d clients (the last by %s)", fmtD(p.Input.EDSLagMedian), fmtD(p.Input.EDSLag), p.Input.Clients, lag)
	}
	ew.printf("# meshdrain plan: sidecar %s, p99 %s, eds-lag %s, app-drain %s.\n", p.sidecarName(), fmtD(p.Input.P99), lag, fmtD(p.AppDrain))
	ew.printf("# Apply with: kubectl patch %s %s%s --type strategic --patch-file FILE\n", kind, name, ns)
	ew.printf("# grace %s = meshdrain deadline %s + app-drain %s + %s.\n", fmtD(p.GracePeriod), fmtD(p.Deadline), fmtD(p.AppDrain), fmtD(KillMargin))
	for _, k := range p.Kept {
		ew.printf("# %s %s is the workload's own, kept: %s suffices (--lower-grace-period sets it).\n", k.Setting, fmtD(k.Value), fmtD(k.Suffices))
	}
	for _, note := range []string{e.ReplacementNote(), e.ProxyReplacementNote()} {
		if note != "" {
			ew.printf("# %s.\n", strings.ToUpper(note[:1])+note[1:])
		}
	}
	if probe, ok := p.ReadinessProbe(); ok && e.workload == nil {
		ew.printf("# No readinessProbe here: plan has not read the workload, and a second handler merged into one it has would be invalid.\n")
		ew.printf("# If %s has none, give it one (tcpSocket port %d, periodSeconds %d, or better an httpGet that checks what it needs).\n",
			e.opts.Container, probe.Port, probe.PeriodSeconds)
	}
	if ew.err != nil {
		return ew.err
	}

	podSpec := yamlnode.MapOf("terminationGracePeriodSeconds", yamlnode.Int(e.gracePeriod),
		"volumes", yamlnode.Sequence(e.volume), "initContainers", yamlnode.Sequence(e.initContainer))
	preStop := yamlnode.Mapping()
	for _, h := range e.removeHandlers {
		yamlnode.SetKey(preStop, h, yamlnode.Null())
	}
	yamlnode.SetKey(preStop, "exec", yamlnode.Lookup(e.preStop, "exec"))
	app := yamlnode.MapOf(
		"name", yamlnode.Str(e.opts.Container),
		"volumeMounts", yamlnode.Sequence(e.volumeMount),
		"lifecycle", yamlnode.MapOf("preStop", preStop))
	if e.hostIPEnv != nil {
		yamlnode.SetKey(app, "env", yamlnode.Sequence(e.hostIPEnv))
	}
	if e.readiness != nil {
		yamlnode.SetKey(app, "readinessProbe", e.readiness)
	}
	containers := yamlnode.Sequence(app)
	if e.proxy != nil {
		// Only what plan sets: a patch onto an istio-proxy of the workload's keeps its other
		// fields, its image included.
		proxy := yamlnode.MapOf("name", yamlnode.Str(ProxyContainerName))
		if e.proxyImage {
			yamlnode.SetKey(proxy, "image", yamlnode.Str(ProxyImageAuto))
		}
		proxyPreStop := yamlnode.Mapping()
		for _, h := range e.proxyRemoveHandlers {
			yamlnode.SetKey(proxyPreStop, h, yamlnode.Null())
		}
		yamlnode.SetKey(proxyPreStop, "exec", yamlnode.Path(e.proxy, "lifecycle", "preStop", "exec"))
		yamlnode.SetKey(proxy, "volumeMounts", yamlnode.Sequence(e.proxyMount))
		yamlnode.SetKey(proxy, "lifecycle", yamlnode.MapOf("preStop", proxyPreStop))
		containers.Content = append(containers.Content, proxy)
	}
	podSpec.Content = append(podSpec.Content, yamlnode.Str("containers"), containers)
	template := yamlnode.Mapping()
	if len(e.annotations) > 0 {
		ann := yamlnode.Mapping()
		for _, a := range e.annotations {
			yamlnode.SetKey(ann, a.Key, yamlnode.Str(a.Value))
		}
		yamlnode.SetKey(template, "metadata", yamlnode.MapOf("annotations", ann))
	}
	yamlnode.SetKey(template, "spec", podSpec)
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	enc.CompactSeqIndent()
	if err := enc.Encode(yamlnode.MapOf("spec", yamlnode.MapOf("template", template))); err != nil {
		return err
	}
	if err := enc.Close(); err != nil {
		return err
	}
	_, err := w.Write(buf.Bytes())
	return err
}

// WriteYAML prints a strategic-merge patch that applies the plan to a workload plan has not
// read: o.Container must be the app container's real name (a wrong one adds a container).
func WriteYAML(w io.Writer, p Plan, o PatchOptions) error {
	e, err := NewEdit(p, o, nil)
	if err != nil {
		return err
	}
	return e.WritePatch(w)
}

func isWorkloadKind(kind string) bool { return contains(WorkloadKinds, kind) }

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func orNone(list []string) string {
	if len(list) == 0 {
		return "nothing"
	}
	sort.Strings(list)
	return strings.Join(list, ", ")
}
