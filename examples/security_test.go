package examples

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/meshdrain/meshdrain/pkg/operator/plan"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// checkRestricted checks the rules of Pod Security "restricted" (kubernetes.io/docs/concepts/
// security/pod-security-standards) that a manifest decides, for every container, init
// containers included: a namespace that enforces it rejects a pod that breaks any of them.
// Istio's own containers are injected later; with "restricted" Istio needs its CNI plugin,
// since istio-init wants NET_ADMIN and NET_RAW.
func checkRestricted(t reporter, what string, spec corev1.PodSpec) {
	t.Helper()
	pod := spec.SecurityContext
	if pod == nil {
		pod = &corev1.PodSecurityContext{}
	}
	if spec.HostNetwork || spec.HostPID || spec.HostIPC {
		t.Errorf("%s: host namespaces are not allowed", what)
	}
	for _, v := range spec.Volumes {
		if v.HostPath != nil {
			t.Errorf("%s: hostPath volume %s is not allowed", what, v.Name)
		}
	}
	if pod.RunAsUser != nil && *pod.RunAsUser == 0 {
		t.Errorf("%s: pod runAsUser 0", what)
	}
	all := append(append([]corev1.Container{}, spec.InitContainers...), spec.Containers...)
	for _, c := range all {
		sc := c.SecurityContext
		if sc == nil {
			sc = &corev1.SecurityContext{}
		}
		if sc.Privileged != nil && *sc.Privileged {
			t.Errorf("%s: container %s is privileged", what, c.Name)
		}
		// The istio-proxy override (image auto) is merged into the proxy Istio injects: what it
		// leaves unset is the injected container's (allowPrivilegeEscalation: false, drop ALL,
		// non-root), so only what it sets is checked.
		override := c.Name == plan.ProxyContainerName && c.Image == plan.ProxyImageAuto
		if sc.AllowPrivilegeEscalation == nil && !override || sc.AllowPrivilegeEscalation != nil && *sc.AllowPrivilegeEscalation {
			t.Errorf("%s: container %s must set allowPrivilegeEscalation: false", what, c.Name)
		}
		if sc.Capabilities == nil && !override || sc.Capabilities != nil && !hasCapability(sc.Capabilities.Drop, "ALL") {
			t.Errorf("%s: container %s must drop ALL capabilities", what, c.Name)
		}
		if sc.Capabilities != nil {
			for _, add := range sc.Capabilities.Add {
				if add != "NET_BIND_SERVICE" {
					t.Errorf("%s: container %s adds capability %s", what, c.Name, add)
				}
			}
		}
		nonRoot := (sc.RunAsNonRoot != nil && *sc.RunAsNonRoot) || (sc.RunAsNonRoot == nil && pod.RunAsNonRoot != nil && *pod.RunAsNonRoot)
		if !nonRoot {
			t.Errorf("%s: container %s must run as non-root (runAsNonRoot: true, on the container or the pod)", what, c.Name)
		}
		if sc.RunAsUser != nil && *sc.RunAsUser == 0 {
			t.Errorf("%s: container %s runAsUser 0", what, c.Name)
		}
		seccomp := sc.SeccompProfile
		if seccomp == nil {
			seccomp = pod.SeccompProfile
		}
		if seccomp == nil || (seccomp.Type != corev1.SeccompProfileTypeRuntimeDefault && seccomp.Type != corev1.SeccompProfileTypeLocalhost) {
			t.Errorf("%s: container %s needs seccompProfile RuntimeDefault (or Localhost), on the container or the pod", what, c.Name)
		}
		for _, p := range c.Ports {
			if p.HostPort != 0 {
				t.Errorf("%s: container %s uses hostPort %d", what, c.Name, p.HostPort)
			}
		}
	}
}

func hasCapability(list []corev1.Capability, c corev1.Capability) bool {
	for _, v := range list {
		if v == c {
			return true
		}
	}
	return false
}

// TestRestrictedCatchesViolations proves checkRestricted is not vacuous.
func TestRestrictedCatchesViolations(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("istio-native", "deployment.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	load := func() corev1.PodSpec { return decodeDeployments(t, "istio-native", data)[0].Spec.Template.Spec }
	r := &recorder{}
	checkRestricted(r, "istio-native", load())
	if len(r.problems) != 0 {
		t.Fatalf("the example itself breaks restricted: %v", r.problems)
	}
	for _, c := range []struct {
		name    string
		breakIt func(*corev1.PodSpec)
		want    string
	}{
		{"no seccomp", func(s *corev1.PodSpec) {
			s.SecurityContext.SeccompProfile = nil
			for i := range s.InitContainers {
				s.InitContainers[i].SecurityContext.SeccompProfile = nil
			}
		}, "seccompProfile RuntimeDefault"},
		{"escalation", func(s *corev1.PodSpec) { s.Containers[0].SecurityContext.AllowPrivilegeEscalation = nil }, "allowPrivilegeEscalation"},
		{"capabilities", func(s *corev1.PodSpec) { s.InitContainers[0].SecurityContext.Capabilities = nil }, "drop ALL"},
		{"root", func(s *corev1.PodSpec) {
			s.SecurityContext.RunAsNonRoot = nil
			s.Containers[0].SecurityContext.RunAsNonRoot = nil
		}, "non-root"},
	} {
		t.Run(c.name, func(t *testing.T) {
			spec := load()
			c.breakIt(&spec)
			r := &recorder{}
			checkRestricted(r, "istio-native", spec)
			if !strings.Contains(strings.Join(r.problems, "\n"), c.want) {
				t.Errorf("problems %q do not mention %q", r.problems, c.want)
			}
		})
	}
}

// checkImage: the init container runs the release the Makefile builds, never :latest.
func checkImage(t reporter, spec corev1.PodSpec) {
	t.Helper()
	for _, c := range spec.InitContainers {
		if c.Name == plan.InitContainerName && c.Image != plan.DefaultImage {
			t.Errorf("init container %s runs %s, want %s (the release the Makefile tags)", c.Name, c.Image, plan.DefaultImage)
		}
	}
}

// TestReleaseTagAgrees: the Makefile's RELEASE, plan's default image and the image `make
// image` builds are one version.
func TestReleaseTagAgrees(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^RELEASE\s*:?=\s*(\S+)\s*$`).FindStringSubmatch(string(data))
	if m == nil {
		t.Fatal("Makefile sets no RELEASE")
	}
	if m[1] != plan.Release {
		t.Errorf("Makefile RELEASE %s, plan.Release %s", m[1], plan.Release)
	}
	if !strings.Contains(string(data), "IMAGE ?= ghcr.io/meshdrain/meshdrain:$(RELEASE)") {
		t.Error("Makefile's IMAGE is not the release's tag")
	}
	for _, file := range []string{filepath.Join("kustomize", "meshdrain", "prestop.yaml")} {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(data), "image: "+plan.DefaultImage) {
			t.Errorf("%s does not use %s", file, plan.DefaultImage)
		}
	}
}

// TestConsulServiceDefaults: Consul's Envoy has public_listener HTTP stats only when the
// service's protocol is http, set by a ServiceDefaults; the example must carry it.
func TestConsulServiceDefaults(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("consul-envoy", "deployment.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var deployment string
	found := false
	for _, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(data), -1) {
		var sd struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
			Metadata   struct {
				Name string `json:"name"`
			} `json:"metadata"`
			Spec struct {
				Protocol string `json:"protocol"`
			} `json:"spec"`
		}
		if err := yaml.UnmarshalStrict([]byte(doc), &sd); err != nil || sd.Kind != "ServiceDefaults" {
			if ds := decodeDeployments(t, "consul", []byte(doc)); len(ds) == 1 {
				deployment = ds[0].Name
			}
			continue
		}
		found = true
		if sd.APIVersion != "consul.hashicorp.com/v1alpha1" || sd.Spec.Protocol != "http" {
			t.Errorf("ServiceDefaults %s %s protocol %q, want consul.hashicorp.com/v1alpha1 with protocol http", sd.APIVersion, sd.Metadata.Name, sd.Spec.Protocol)
		}
		defer func(name string) {
			if name != deployment {
				t.Errorf("ServiceDefaults %s does not name the service %s", name, deployment)
			}
		}(sd.Metadata.Name)
	}
	if !found {
		t.Error("the Consul example has no ServiceDefaults with protocol http: without it Envoy has no public_listener HTTP stats")
	}
}
