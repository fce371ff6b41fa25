package plan

import (
	"bytes"
	"fmt"
	"slices"
	"strings"

	"github.com/meshdrain/meshdrain/pkg/operator/yamlnode"
	yaml "go.yaml.in/yaml/v3"
)

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
		if w != nil && w.ProxyHolds() {
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
	return e.mergeOverride(preStop, binary, id)
}

// mergeOverride merges hold's preStop and the meshdrain mount into the workload's own
// istio-proxy override, every other field of it kept, and says what it sets.
func (e *Edit) mergeOverride(preStop *yaml.Node, binary, id string) ([]string, error) {
	w, dir := e.workload, e.opts.Dir
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
	preStop, line, err := e.mergeOverridePreStop(preStop, binary, id)
	if err != nil {
		return nil, err
	}
	if line != "" {
		set = append(set, line)
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

// mergeOverridePreStop is the preStop the workload's own override gets: hold's, or its own
// hold preStop as it is when the plan changes none of its flags; line says what changes.
// A preStop of another kind is replaced only with --replace-prestop.
func (e *Edit) mergeOverridePreStop(preStop *yaml.Node, binary, id string) (_ *yaml.Node, line string, _ error) {
	w := e.workload
	old := yamlnode.Path(w.proxy, "lifecycle", "preStop")
	switch {
	case w.ProxyPreStop == "":
		return preStop, fmt.Sprintf("preStop runs %s %s", binary, strings.Join(e.hold.args, " ")), nil
	case w.ProxyHolds():
		oldBinary := yamlnode.Strings(yamlnode.Path(w.proxy, "lifecycle", "preStop", "exec", "command"))[0]
		changes := e.hold.changes
		if oldBinary != binary {
			changes = append([]string{fmt.Sprintf("runs %s (was %s)", binary, oldBinary)}, changes...)
		}
		if len(changes) == 0 {
			return yamlnode.Copy(old), "", nil
		}
		line := "preStop " + strings.Join(changes, ", ")
		if len(e.hold.kept) > 0 {
			line += "; keeps the preStop's own flags as they are: " + strings.Join(e.hold.kept, " ")
		}
		return preStop, line, nil
	case !e.opts.ReplacePreStop:
		return nil, "", fmt.Errorf("container %s%s already has a preStop hook (%s), and meshdrain hold takes its place (regime b, "+
			"docs/decision-rule.md): pass --replace-prestop to replace it, or --defer-sidecar-drain=false to leave %s as it is",
			ProxyContainerName, id, w.ProxyPreStop, ProxyContainerName)
	}
	e.ProxyReplaced = w.ProxyPreStop
	for i := 0; i+1 < len(old.Content); i += 2 {
		if h := old.Content[i].Value; h != "exec" {
			e.proxyRemoveHandlers = append(e.proxyRemoveHandlers, h)
		}
	}
	return preStop, fmt.Sprintf("preStop runs %s %s", binary, strings.Join(e.hold.args, " ")), nil
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
		if !slices.Contains(have, p) {
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
