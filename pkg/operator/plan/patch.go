package plan

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/meshdrain/meshdrain/pkg/operator/yamlnode"
	yaml "go.yaml.in/yaml/v3"
)

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
	if err := e.writePatchHeader(w); err != nil {
		return err
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
		containers.Content = append(containers.Content, e.proxyPatch())
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

// writePatchHeader prints the patch's comments: the plan's numbers, how to apply it, what it
// keeps and replaces.
func (e *Edit) writePatchHeader(w io.Writer) error {
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
	if l := p.Input.LagFrom; l != nil {
		ew.printf("# eds-lag from --lag-from %s at --risk %s: %s.\n", strings.Join(SourceNames(l.Sources), " "), l.RiskFlag(), l.Fit.Summary)
	}
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
	return ew.err
}

// proxyPatch is the istio-proxy container of the patch: only what plan sets, so that a patch
// onto an istio-proxy of the workload's keeps its other fields, its image included.
func (e *Edit) proxyPatch() *yaml.Node {
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
	return proxy
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
