package plan

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/meshdrain/meshdrain/pkg/operator/yamlnode"
	yaml "go.yaml.in/yaml/v3"
)

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
	meshChanges, err := p.mesh().derive(e, binary)
	if err != nil {
		return nil, err
	}
	e.Changes = append(e.Changes, meshChanges...)
	return e, nil
}

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
	if w.HasProxy && yamlnode.Scalar(yamlnode.Lookup(w.proxy, "image")) == ProxyImageAuto && !e.plan.mesh().fillsAutoImage() {
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
