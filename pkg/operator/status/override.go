package status

import (
	"fmt"
	"io"
	"path"
	"strings"

	"github.com/meshdrain/meshdrain/pkg/operator/output"
	"github.com/meshdrain/meshdrain/pkg/operator/plan"
	"go.yaml.in/yaml/v3"
)

// OverrideItem is the name of the item that says whether Istio's injector merged plan's
// istio-proxy override into the proxy it injected.
const OverrideItem = "istio-proxy-override"

// livePod is the part of a pod, as `kubectl get pod -o yaml` (or -o json) prints it, that
// shows the merge. Small local types, not k8s.io/api: the pod binary links this package and
// must stay under its size budget (scripts/check-binary.sh).
type livePod struct {
	Kind     string `yaml:"kind"`
	Metadata struct {
		Name      string `yaml:"name"`
		Namespace string `yaml:"namespace"`
	} `yaml:"metadata"`
	Spec struct {
		InitContainers []liveContainer `yaml:"initContainers"`
		Containers     []liveContainer `yaml:"containers"`
	} `yaml:"spec"`
}

type liveContainer struct {
	Name          string `yaml:"name"`
	Image         string `yaml:"image"`
	RestartPolicy string `yaml:"restartPolicy"`
	Env           []struct {
		Name  string `yaml:"name"`
		Value string `yaml:"value"`
	} `yaml:"env"`
	VolumeMounts []struct {
		Name string `yaml:"name"`
	} `yaml:"volumeMounts"`
	Lifecycle struct {
		PreStop struct {
			Exec struct {
				Command []string `yaml:"command"`
			} `yaml:"exec"`
		} `yaml:"preStop"`
	} `yaml:"lifecycle"`
}

// runsMeshdrain reports whether c's preStop is `meshdrain sub ...`.
func (c liveContainer) runsMeshdrain(sub string) bool {
	cmd := c.Lifecycle.PreStop.Exec.Command
	return len(cmd) >= 2 && path.Base(cmd[0]) == "meshdrain" && cmd[1] == sub
}

// drainsAtEnd reports whether c's meshdrain prestop runs --drain-at=end (regime b), as a flag
// or as its MESHDRAIN_DRAIN_AT variable, which prestop reads when the flag is not given.
func (c liveContainer) drainsAtEnd() bool {
	args := c.Lifecycle.PreStop.Exec.Command[2:]
	drainAt := ""
	for i, a := range args {
		switch {
		case strings.HasPrefix(a, "--drain-at="):
			drainAt = strings.TrimPrefix(a, "--drain-at=")
		case a == "--drain-at" && i+1 < len(args):
			drainAt = args[i+1]
		}
	}
	if drainAt != "" {
		return drainAt == "end"
	}
	for _, e := range c.Env {
		if e.Name == "MESHDRAIN_DRAIN_AT" {
			return e.Value == "end"
		}
	}
	return false
}

// mountsMeshdrain reports whether c mounts the volume meshdrain is installed in.
func (c liveContainer) mountsMeshdrain() bool {
	for _, m := range c.VolumeMounts {
		if m.Name == plan.VolumeName {
			return true
		}
	}
	return false
}

// CheckProxyOverride judges a live pod's spec, as the API server holds it after injection:
// from inside the app container nothing shows whether the injector merged the override, since
// containers do not see each other's specs. Where the app's preStop is meshdrain prestop
// --drain-at=end (regime b), the injected istio-proxy must run meshdrain hold as its preStop
// and mount the meshdrain volume; without them Istio drains at the deletion, unseen by
// prestop's rule. An istio-proxy still named image auto fails in any regime: no injector
// filled it, and the image cannot be pulled. The error is for input that is not a pod.
func CheckProxyOverride(data []byte) (Item, error) {
	var pod livePod
	if err := yaml.Unmarshal(data, &pod); err != nil {
		return Item{}, fmt.Errorf("the pod spec: %w", err)
	}
	if pod.Kind != "Pod" {
		return Item{}, fmt.Errorf("the pod spec is a %q, want a Pod as `kubectl get pod POD -o yaml` prints it", pod.Kind)
	}
	ns := pod.Metadata.Namespace
	if ns == "" {
		ns = "NS"
	}
	proxies, unpullable := pod.injectedProxies(ns)
	if unpullable != nil {
		return *unpullable, nil
	}
	item := Item{Name: OverrideItem, Status: Fail}
	app := pod.prestopContainer()
	if app == nil || !app.drainsAtEnd() {
		item.Status = Pass
		item.Message = "no override needed: no container's preStop runs meshdrain prestop --drain-at=end (regime a, or no mesh)"
		return item, nil
	}
	if len(proxies) == 0 {
		item.Message = fmt.Sprintf("%s's preStop runs meshdrain prestop --drain-at=end, but the pod has no istio-proxy: nothing drains at meshdrain's call", app.Name)
		item.Fix = fmt.Sprintf("is injection on for the namespace? kubectl get namespace %s --show-labels; "+
			"without a mesh, re-plan with meshdrain plan --mesh none", ns)
		return item, nil
	}
	if unmerged := unmergedOverride(proxies, app.Name); unmerged != nil {
		return *unmerged, nil
	}
	mode := "a classic sidecar"
	if proxies[0].RestartPolicy == "Always" {
		mode = "a native sidecar"
	}
	item.Status = Pass
	item.Message = fmt.Sprintf("the injector merged the override: istio-proxy (%s, image %s) runs meshdrain hold as its preStop and mounts the %s volume",
		mode, proxies[0].Image, plan.VolumeName)
	return item, nil
}

// injectedProxies are the pod's istio-proxy containers, native ones (restartable init
// containers) first; a failed item when one still names image auto, which no injector filled.
func (pod livePod) injectedProxies(ns string) ([]liveContainer, *Item) {
	failed := func(message, fix string) *Item {
		return &Item{Name: OverrideItem, Status: Fail, Message: message, Fix: fix}
	}
	var proxies []liveContainer
	for _, c := range pod.Spec.InitContainers {
		if c.Name != plan.ProxyContainerName {
			continue
		}
		if c.Image == plan.ProxyImageAuto {
			return nil, failed("istio-proxy in initContainers has image auto: no injector merged it, and the pod cannot start",
				"put the override in spec.containers, where both classic and native injection read it (meshdrain plan -f writes it there)")
		}
		if c.RestartPolicy == "Always" {
			proxies = append(proxies, c)
		}
	}
	for _, c := range pod.Spec.Containers {
		if c.Name != plan.ProxyContainerName {
			continue
		}
		if c.Image == plan.ProxyImageAuto {
			return nil, failed("istio-proxy has image auto: no injector filled it, so the image cannot be pulled and the pod cannot start",
				fmt.Sprintf("is injection on for the namespace? kubectl get namespace %s --show-labels (istio-injection=enabled or istio.io/rev); "+
					"without a mesh, re-plan with meshdrain plan --mesh none", ns))
		}
		proxies = append(proxies, c)
	}
	return proxies, nil
}

// prestopContainer is the container whose preStop runs meshdrain prestop, nil if none does.
func (pod livePod) prestopContainer() *liveContainer {
	for i, c := range pod.Spec.Containers {
		if c.runsMeshdrain("prestop") {
			return &pod.Spec.Containers[i]
		}
	}
	return nil
}

// unmergedOverride is the failed item of the first istio-proxy that lacks the override's
// hold preStop or mount, nil when every one has both.
func unmergedOverride(proxies []liveContainer, app string) *Item {
	for _, p := range proxies {
		var missing []string
		if !p.runsMeshdrain("hold") {
			missing = append(missing, "the meshdrain hold preStop")
		}
		if !p.mountsMeshdrain() {
			missing = append(missing, "a mount of the "+plan.VolumeName+" volume")
		}
		if len(missing) > 0 {
			return &Item{Name: OverrideItem, Status: Fail,
				Message: fmt.Sprintf("the injected istio-proxy lacks %s while %s's preStop runs meshdrain prestop --drain-at=end: "+
					"the injector did not merge the override, so Istio drains at the deletion", strings.Join(missing, " and "), app),
				Fix: "Istio older than 1.9 does not merge it, and none merges an override outside spec.containers: " +
					"write it in spec.containers (meshdrain plan -f), or run prestop with --drain-at=start (regime a)"}
		}
	}
	return nil
}

// WritePodSpecCheck writes check --pod-spec's items as text, JSON or YAML.
func WritePodSpecCheck(w io.Writer, items []Item, format string) error {
	res := CheckResult{OK: true, Checks: items}
	for _, it := range items {
		if it.Status == Fail {
			res.OK = false
		}
	}
	if format != OutputText {
		return output.Write(w, format, struct {
			OK     bool   `json:"ok"`
			Checks []Item `json:"checks"`
		}{res.OK, items})
	}
	return WriteCheckText(w, res)
}
