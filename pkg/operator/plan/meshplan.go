package plan

import (
	"time"

	"github.com/meshdrain/meshdrain/pkg/mesh"
)

// meshPlan is what differs between the meshes plan writes for. Each mesh answers for its
// own (istio.go, linkerd.go, meshless.go), and the rest of plan asks Plan.mesh instead of
// testing which mesh it is: a new mesh is one more implementation and one more case in
// meshPlanOf.
type meshPlan interface {
	// sidecar says whether the pod has a proxy beside the app (false: the kernel is the
	// signal).
	sidecar() bool
	// refuses says why a plan flag has no meaning for the mesh; "" when it has.
	refuses(flag string, m mesh.Mesh) string
	// normalize fills the mesh's own defaults into in and says what it cannot plan.
	normalize(in *Input) []error
	// fromWorkload takes what the workload says of the mesh into in, where the flags did not
	// say it (given), keeping its own bounds unless lowerGrace; choices are for the operator.
	fromWorkload(in *Input, w *Workload, given func(string) bool, lowerGrace bool) (choices []string, err error)
	// recommend adds the mesh's settings, arithmetic and notes to p, whose mesh-independent
	// numbers are set.
	recommend(p *Plan)
	// timeline is the termination timeline, from t0 to the kill.
	timeline(p Plan) []Step
	// name names the proxy in the timeline's title.
	name(p Plan) string
	// prestopArgs are the preStop flags only this mesh writes, before the common ones.
	prestopArgs(p Plan) []string
	// ownsFlag says whether a preStop flag plan knows, beyond the planned numbers, is the
	// plan's (a re-plan writes its value) or the user's.
	ownsFlag(p Plan, it prestopToken) bool
	// annotations are the pod-template annotations the plan sets.
	annotations(p Plan) []Annotation
	// writeSettings prints the mesh's lines of the text's recommended settings.
	writeSettings(ew *errWriter, p Plan)
	// keptGraceNote finishes the note on a grace period cur longer than what suffices:
	// what plan keeps with it ("" for the mesh-independent words).
	keptGraceNote(p Plan, cur time.Duration) string
	// derive adds the mesh's part of the edit (the istio-proxy override, a meshless pod's
	// env and probe) and says what it changes.
	derive(e *Edit, binary string) ([]string, error)
	// fillsAutoImage says whether the mesh's injector fills an istio-proxy image: auto.
	fillsAutoImage() bool
	// writeJSON adds the mesh's fields to the JSON plan; binary is meshdrain's path in the pod.
	writeJSON(p Plan, binary string, e *Edit, out *jsonPlan)
	// rolloutCheck is the command that verifies a pod rolled out with the edit e.
	rolloutCheck(p Plan, e *Edit) []string
}

// meshPlanOf is the plan of mesh m; nil for a mesh plan does not know (normalize says so).
func meshPlanOf(m mesh.Mesh) meshPlan {
	switch m {
	case mesh.Istio:
		return istioPlan{}
	case mesh.Linkerd:
		return linkerdPlan{}
	case mesh.None:
		return meshlessPlan{}
	case Ambient:
		return meshlessPlan{ambient: true}
	}
	return nil
}

// mesh is p's mesh plan.
func (p Plan) mesh() meshPlan { return meshPlanOf(p.Input.Mesh) }

// MeshFlags are plan's flags that only some meshes take.
var MeshFlags = []string{"sidecar", "drain-duration", "defer-sidecar-drain", "app-metrics", "app-requests", "port"}

// RefusedFlag says why plan's --flag has no meaning for mesh m ("" when it has), in a
// sentence for the operator.
func RefusedFlag(m mesh.Mesh, flag string) string {
	if mp := meshPlanOf(m); mp != nil {
		return mp.refuses(flag, m)
	}
	return ""
}

// sidecarRefuses are the flags a mesh with a sidecar refuses: the kernel's.
func sidecarRefuses(flag string) string {
	switch flag {
	case "app-metrics", "app-requests":
		return "--app-metrics and --app-requests go with --mesh none or ambient: a sidecar's stats already count every request"
	case "port":
		return "--port goes with --mesh none or ambient (the app's own ports); a sidecar's inbound ports are prestop's own --port, kept from the workload's preStop"
	}
	return ""
}

// writeAnnotations prints the plan's pod annotations, or that there are none, and why.
func writeAnnotations(ew *errWriter, p Plan, none string) {
	anns := p.Annotations()
	if len(anns) == 0 {
		ew.printf("  pod annotations:               %s\n", none)
		return
	}
	ew.printf("  pod annotations:\n")
	for _, a := range anns {
		ew.printf("    %s: '%s'\n", a.Key, a.Value)
	}
}
