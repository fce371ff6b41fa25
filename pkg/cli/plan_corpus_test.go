package cli

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/meshdrain/meshdrain/pkg/mesh"
	"github.com/meshdrain/meshdrain/pkg/operator/plan"
	yamlv3 "go.yaml.in/yaml/v3"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"
)

// corpusDir holds issue 37's corpus: public manifests copied verbatim (public/, each named
// with its source and licence in README.md) and hand-written cases (cases/), one shape each
// that a user without a mesh brought to plan.
const corpusDir = "../operator/plan/testdata/corpus"

// corpusBase is the plan every corpus run asks for: the report's numbers, the manifest out.
var corpusBase = []string{"plan", "--p99", "450ms", "--eds-lag", "5s", "-o", "yaml"}

// corpusRun is one plan run on a corpus file: its exit code and what it printed.
type corpusRun struct {
	args           []string
	code           int
	stdout, stderr string
}

func (r corpusRun) String() string {
	return fmt.Sprintf("meshdrain %s: exit %d\nstderr:\n%s", strings.Join(r.args, " "), r.code, r.stderr)
}

// planCorpus runs plan in-process on the corpus file (a path under corpusDir) with the extra
// flags, on the operator's machine (no HOST_IP in the environment).
func planCorpus(t *testing.T, file string, extra ...string) corpusRun {
	t.Helper()
	args := append(append(append([]string{}, corpusBase...), "-f", filepath.Join(corpusDir, file)), extra...)
	code, out, errOut := runMain(t, args...)
	return corpusRun{args: args, code: code, stdout: out, stderr: errOut}
}

// corpusFiles are the corpus's manifests, as paths under corpusDir.
func corpusFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	for _, dir := range []string{"public", "cases"} {
		entries, err := os.ReadDir(filepath.Join(corpusDir, dir))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if ext := filepath.Ext(e.Name()); ext == ".yaml" || ext == ".yml" || ext == ".json" {
				files = append(files, filepath.Join(dir, e.Name()))
			}
		}
	}
	if len(files) < 15 {
		t.Fatalf("the corpus holds %d manifests: it lost some", len(files))
	}
	return files
}

// TestPlanCorpus runs plan on every manifest of the corpus. The invariants hold whatever plan
// decides, for every workload of every file and every --mesh; the spec expectations are issue
// 37's decisions (mesh, ports, probes, the app's time, JSON and List), case by case.
func TestPlanCorpus(t *testing.T) {
	t.Setenv(plan.HostIPEnv, "")
	t.Run("invariants", func(t *testing.T) {
		for _, file := range corpusFiles(t) {
			data, err := os.ReadFile(filepath.Join(corpusDir, file))
			if err != nil {
				t.Fatal(err)
			}
			// The corpus itself decodes strictly: otherwise a failure of plan's output would
			// prove nothing about plan.
			if _, err := decodeStrict(data); err != nil {
				t.Fatalf("%s as read: %v", file, err)
			}
			workloads := corpusWorkloads(t, data)
			for _, w := range workloads {
				var pick []string
				if len(workloads) > 1 {
					pick = []string{"--workload", w}
				}
				for _, m := range []string{"", "istio", "linkerd", "none", "ambient"} {
					for _, replace := range []bool{false, true} {
						extra := append([]string{}, pick...)
						if m != "" {
							extra = append(extra, "--mesh", m)
						}
						if replace {
							extra = append(extra, "--replace-prestop")
						}
						name := fmt.Sprintf("%s/%s/mesh=%s/replace=%t", file, w, m, replace)
						t.Run(name, func(t *testing.T) {
							checkCorpusInvariants(t, planCorpus(t, file, extra...))
						})
					}
				}
			}
		}
	})
	t.Run("invariants/spec-runs", func(t *testing.T) {
		// The runs of the spec cases, with their own flags (--port, --app-drain, ...).
		for _, c := range corpusCases {
			t.Run(c.name, func(t *testing.T) {
				checkCorpusInvariants(t, planCorpus(t, c.file, c.args...))
			})
		}
	})
	t.Run("spec", func(t *testing.T) {
		for _, c := range corpusCases {
			t.Run(c.name, func(t *testing.T) {
				c.want.check(t, planCorpus(t, c.file, c.args...))
			})
		}
	})
}

// checkCorpusInvariants: plan either refuses (exit 2, nothing on stdout) or writes manifests
// that decode strictly into the Kubernetes API types, end with a newline, start every pod
// (every container has an image; image: auto only for a pod Istio's injector injects under
// a preStop of Istio's), and carry one meshdrain preStop that prestop accepts.
func checkCorpusInvariants(t *testing.T, r corpusRun) {
	t.Helper()
	var fails []string
	fail := func(format string, a ...any) { fails = append(fails, fmt.Sprintf(format, a...)) }
	defer func() {
		if len(fails) > 0 {
			t.Errorf("%v\n%s", r, strings.Join(fails, "\n"))
		}
	}()
	switch r.code {
	case ExitUsage:
		if r.stdout != "" {
			fail("exit 2 with %d bytes on stdout: a pipe into kubectl would apply them", len(r.stdout))
		}
		if strings.TrimSpace(r.stderr) == "" {
			fail("exit 2 without a word on stderr")
		}
		return
	case ExitOK:
	default:
		fail("want exit 0 or 2")
		return
	}
	if !strings.HasSuffix(r.stdout, "\n") {
		fail("the output does not end with a newline")
	}
	pods, err := decodeStrict([]byte(r.stdout))
	if err != nil {
		fail("the output does not decode strictly: %v\n%s", err, r.stdout)
		return
	}
	planned := 0
	for _, p := range pods {
		prestop := meshdrainArgs(p.tpl.Spec.Containers, "prestop")
		for _, c := range append(append([]corev1.Container{}, p.tpl.Spec.InitContainers...), p.tpl.Spec.Containers...) {
			if c.Image == "" {
				fail("%s: container %s has no image", p.id, c.Name)
			}
			if c.Image == "auto" && (prestop == nil || prestopMesh(prestop) != mesh.Istio || !istioInjects(p.tpl)) {
				fail("%s: container %s has image: auto, which only Istio's injector fills, and it does not run for this pod (preStop %q, labels %v, annotations %v, hostNetwork %t): the pod never starts",
					p.id, c.Name, prestop, p.tpl.Labels, p.tpl.Annotations, p.tpl.Spec.HostNetwork)
			}
		}
		if prestop == nil {
			continue
		}
		planned++
		if problems := prestopOffline(prestop); len(problems) > 0 {
			fail("%s: prestop would refuse the preStop plan wrote, %q: %v", p.id, prestop, errors.Join(problems...))
		}
		if hold := meshdrainArgs(p.tpl.Spec.Containers, "hold"); hold != nil {
			if problems := holdOffline(hold); len(problems) > 0 {
				fail("%s: hold would refuse the istio-proxy preStop plan wrote, %q: %v", p.id, hold, errors.Join(problems...))
			}
		}
	}
	if planned != 1 {
		fail("the output has %d pods with a meshdrain preStop, want the one plan was asked for", planned)
	}
}

// corpusPod is a pod template found in the output, named by its object.
type corpusPod struct {
	id  string
	tpl corev1.PodTemplateSpec
}

// decodeStrict decodes a YAML (or JSON) stream document by document, strictly (an unknown
// or duplicated field fails), each into the API type of its apiVersion and kind, and returns
// the pod templates it holds. A kind the corpus does not use fails: add its type here.
func decodeStrict(data []byte) ([]corpusPod, error) {
	var pods []corpusPod
	dec := yamlv3.NewDecoder(bytes.NewReader(data))
	for i := 1; ; i++ {
		var doc yamlv3.Node
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return pods, nil
		}
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		if len(doc.Content) == 0 || doc.Content[0].ShortTag() == "!!null" {
			continue
		}
		raw, err := yamlv3.Marshal(&doc)
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		found, err := decodeObject(raw)
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		pods = append(pods, found...)
	}
}

// decodeObject decodes one object strictly into its API type; a List's items each in turn.
func decodeObject(raw []byte) ([]corpusPod, error) {
	var meta struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name string `json:"name"`
		} `json:"metadata"`
	}
	if err := yaml.Unmarshal(raw, &meta); err != nil {
		return nil, err
	}
	id := meta.Kind + "/" + meta.Metadata.Name
	var obj any
	var template func() *corev1.PodTemplateSpec
	switch meta.APIVersion + " " + meta.Kind {
	case "apps/v1 Deployment":
		d := &appsv1.Deployment{}
		obj, template = d, func() *corev1.PodTemplateSpec { return &d.Spec.Template }
	case "apps/v1 StatefulSet":
		s := &appsv1.StatefulSet{}
		obj, template = s, func() *corev1.PodTemplateSpec { return &s.Spec.Template }
	case "apps/v1 DaemonSet":
		d := &appsv1.DaemonSet{}
		obj, template = d, func() *corev1.PodTemplateSpec { return &d.Spec.Template }
	case "batch/v1 Job":
		j := &batchv1.Job{}
		obj, template = j, func() *corev1.PodTemplateSpec { return &j.Spec.Template }
	case "v1 List":
		var list corev1.List
		if err := yaml.UnmarshalStrict(raw, &list); err != nil {
			return nil, fmt.Errorf("%s: %w", id, err)
		}
		var pods []corpusPod
		for i, item := range list.Items {
			found, err := decodeObject(item.Raw)
			if err != nil {
				return nil, fmt.Errorf("List item %d: %w", i, err)
			}
			pods = append(pods, found...)
		}
		return pods, nil
	case "v1 Service":
		obj = &corev1.Service{}
	case "v1 ServiceAccount":
		obj = &corev1.ServiceAccount{}
	case "v1 Namespace":
		obj = &corev1.Namespace{}
	case "v1 ConfigMap":
		obj = &corev1.ConfigMap{}
	case "rbac.authorization.k8s.io/v1 ClusterRole":
		obj = &rbacv1.ClusterRole{}
	case "rbac.authorization.k8s.io/v1 ClusterRoleBinding":
		obj = &rbacv1.ClusterRoleBinding{}
	case "rbac.authorization.k8s.io/v1 Role":
		obj = &rbacv1.Role{}
	case "rbac.authorization.k8s.io/v1 RoleBinding":
		obj = &rbacv1.RoleBinding{}
	case "admissionregistration.k8s.io/v1 ValidatingWebhookConfiguration":
		obj = &admissionv1.ValidatingWebhookConfiguration{}
	default:
		return nil, fmt.Errorf("%s: no API type for apiVersion %q kind %q here (add it)", id, meta.APIVersion, meta.Kind)
	}
	if err := yaml.UnmarshalStrict(raw, obj); err != nil {
		return nil, fmt.Errorf("%s: %w", id, err)
	}
	if template == nil {
		return nil, nil
	}
	return []corpusPod{{id: id, tpl: *template()}}, nil
}

// corpusWorkloads are the KIND/NAME of the workloads plan can change in the file, a List's
// items included.
func corpusWorkloads(t *testing.T, data []byte) []string {
	t.Helper()
	type object struct {
		Kind     string `yaml:"kind"`
		Metadata struct {
			Name string `yaml:"name"`
		} `yaml:"metadata"`
		Items []yamlv3.Node `yaml:"items"`
	}
	var names []string
	var visit func(o object)
	visit = func(o object) {
		if slices.Contains(plan.WorkloadKinds, o.Kind) {
			names = append(names, o.Kind+"/"+o.Metadata.Name)
		}
		for _, item := range o.Items {
			var inner object
			if err := item.Decode(&inner); err != nil {
				t.Fatal(err)
			}
			visit(inner)
		}
	}
	dec := yamlv3.NewDecoder(bytes.NewReader(data))
	for {
		var o object
		err := dec.Decode(&o)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		visit(o)
	}
	if len(names) == 0 {
		t.Fatal("no workload in the file")
	}
	return names
}

// meshdrainArgs are the arguments after the verb of the first container's preStop that runs
// meshdrain VERB; nil when none does.
func meshdrainArgs(containers []corev1.Container, verb string) []string {
	for _, c := range containers {
		if c.Lifecycle == nil || c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.Exec == nil {
			continue
		}
		cmd := c.Lifecycle.PreStop.Exec.Command
		if len(cmd) >= 2 && filepath.Base(cmd[0]) == "meshdrain" && cmd[1] == verb {
			return append([]string{}, cmd[2:]...)
		}
	}
	return nil
}

// prestopMesh is the mesh a prestop command line is for: its --mesh (Istio when it has
// none); ambient is --mesh=none that leaves out ambient's probe source.
func prestopMesh(args []string) mesh.Mesh {
	m := mesh.Istio
	if v := flagValues(args, "mesh"); len(v) > 0 {
		m = mesh.Mesh(v[len(v)-1])
	}
	if m == mesh.None && slices.Contains(flagValues(args, "ignore-source"), plan.AmbientProbeSource) {
		return plan.Ambient
	}
	return m
}

// flagValues are the values of --name in args, in order (--name=V or --name V).
func flagValues(args []string, name string) []string {
	var values []string
	for i, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			values = append(values, v)
		} else if a == "--"+name && i+1 < len(args) {
			values = append(values, args[i+1])
		}
	}
	return values
}

// prestopPorts are the ports a prestop command line watches (--port, repeated or with
// commas), sorted.
func prestopPorts(args []string) ([]int, error) {
	var ports []int
	for _, v := range flagValues(args, "port") {
		for _, s := range strings.Split(v, ",") {
			p, err := strconv.Atoi(strings.TrimSpace(s))
			if err != nil {
				return nil, fmt.Errorf("--port %q: %w", v, err)
			}
			ports = append(ports, p)
		}
	}
	slices.Sort(ports)
	return ports, nil
}

// istioInjects: Istio's injector injects this pod where it runs for the namespace; it skips
// one that says sidecar.istio.io/inject: "false" (as label or annotation) and a hostNetwork one.
func istioInjects(tpl corev1.PodTemplateSpec) bool {
	const inject = "sidecar.istio.io/inject"
	return !tpl.Spec.HostNetwork && !strings.EqualFold(tpl.Labels[inject], "false") && !strings.EqualFold(tpl.Annotations[inject], "false")
}

// corpusWant is what issue 37's spec says plan does with one corpus file.
type corpusWant struct {
	// usage: exit 2, nothing on stdout, stderr says each of these.
	usage []string
	// noSignal: exit 2, and ONE message listing the --mesh values and how to see the
	// namespace's (kubectl get namespace NS, with the manifest's namespace when it has one).
	noSignal  bool
	namespace string
	// Otherwise exit 0 and a preStop for this mesh.
	mesh mesh.Mesh
	// ports: exactly these --port values (none and ambient).
	ports []int
	// args the preStop has, and ones it must not have.
	args, noArgs []string
	// stderr says each of these.
	stderr []string
	// grace: the planned pod's terminationGracePeriodSeconds (0: not checked).
	grace int64
	// blockYAML: the output is YAML in block style, whatever the input's style.
	blockYAML bool
}

func (w corpusWant) check(t *testing.T, r corpusRun) {
	t.Helper()
	var fails []string
	fail := func(format string, a ...any) { fails = append(fails, fmt.Sprintf(format, a...)) }
	defer func() {
		if len(fails) > 0 {
			t.Errorf("%v\n%s", r, strings.Join(fails, "\n"))
		}
	}()
	if w.noSignal {
		w.usage = append(w.usage, "--mesh istio|linkerd|none|ambient", "kubectl get namespace")
		if w.namespace != "" {
			w.usage = append(w.usage, "kubectl get namespace "+w.namespace)
		}
	}
	if w.usage != nil {
		if r.code != ExitUsage || r.stdout != "" {
			fail("want exit 2 and nothing on stdout (%d bytes there)", len(r.stdout))
			return
		}
		for _, s := range w.usage {
			if !strings.Contains(r.stderr, s) {
				fail("stderr does not say %q", s)
			}
		}
		if n := strings.Count(r.stderr, "istio|linkerd|none|ambient"); w.noSignal && n != 1 {
			fail("stderr lists the --mesh values %d times, want one message", n)
		}
		return
	}
	if r.code != ExitOK {
		fail("want exit 0")
		return
	}
	pods, err := decodeStrict([]byte(r.stdout))
	if err != nil {
		fail("%v", err)
		return
	}
	var planned *corpusPod
	var prestop []string
	for i := range pods {
		if args := meshdrainArgs(pods[i].tpl.Spec.Containers, "prestop"); args != nil {
			planned, prestop = &pods[i], args
		}
	}
	if planned == nil {
		fail("no meshdrain preStop in the output:\n%s", r.stdout)
		return
	}
	if got := prestopMesh(prestop); got != w.mesh {
		fail("the preStop is for mesh %s, want %s: %q", got, w.mesh, prestop)
	}
	if w.ports != nil {
		got, err := prestopPorts(prestop)
		if err != nil || !slices.Equal(got, w.ports) {
			fail("the preStop watches ports %v (%v), want %v: %q", got, err, w.ports, prestop)
		}
	}
	for _, a := range w.args {
		if !slices.Contains(prestop, a) {
			fail("the preStop lacks %s: %q", a, prestop)
		}
	}
	for _, a := range w.noArgs {
		if slices.Contains(prestop, a) {
			fail("the preStop has %s: %q", a, prestop)
		}
	}
	for _, s := range w.stderr {
		if !strings.Contains(r.stderr, s) {
			fail("stderr does not say %q", s)
		}
	}
	if g := planned.tpl.Spec.TerminationGracePeriodSeconds; w.grace != 0 && (g == nil || *g != w.grace) {
		got := "unset"
		if g != nil {
			got = strconv.FormatInt(*g, 10)
		}
		fail("%s: terminationGracePeriodSeconds %s, want %d", planned.id, got, w.grace)
	}
	if w.blockYAML {
		if err := blockStyle(r.stdout); err != nil {
			fail("the output is not block-style YAML: %v\n%s", err, r.stdout)
		}
	}
}

// blockStyle: every mapping and sequence of the stream is in block style (an empty one may
// be {} or []), as kubectl and a reviewer expect YAML.
func blockStyle(out string) error {
	dec := yamlv3.NewDecoder(strings.NewReader(out))
	for {
		var doc yamlv3.Node
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		var walk func(n *yamlv3.Node) error
		walk = func(n *yamlv3.Node) error {
			if (n.Kind == yamlv3.MappingNode || n.Kind == yamlv3.SequenceNode) && n.Style&yamlv3.FlowStyle != 0 && len(n.Content) > 0 {
				return fmt.Errorf("line %d: a flow-style collection", n.Line)
			}
			for _, c := range n.Content {
				if err := walk(c); err != nil {
					return err
				}
			}
			return nil
		}
		if err := walk(&doc); err != nil {
			return err
		}
	}
}

// corpusCases are issue 37's expectations (its design decisions A, B, C and E; the
// two-container case is the item 5), one run each.
var corpusCases = []struct {
	name, file string
	args       []string
	want       corpusWant
}{
	// A. The mesh is decided from the workload; no signal and no flag: nothing written.
	{"A/no-signal/spring-boot", "cases/spring-boot-management-port.yaml", nil, corpusWant{noSignal: true, namespace: "shop"}},
	{"A/no-signal/exec-probes", "cases/exec-probes-localhost.yaml", nil, corpusWant{noSignal: true}},
	{"A/no-signal/json", "cases/deployment.json", nil, corpusWant{noSignal: true}},
	{"A/no-signal/bookinfo", "public/istio-bookinfo.yaml", []string{"--workload", "productpage-v1"}, corpusWant{noSignal: true}},
	{"A/no-signal/emojivoto", "public/linkerd-emojivoto.yml", []string{"--workload", "web"}, corpusWant{noSignal: true, namespace: "emojivoto"}},
	{"A/no-signal/guestbook", "public/kubernetes-guestbook-all-in-one.yaml", []string{"--workload", "frontend"}, corpusWant{noSignal: true}},
	{"A/no-signal/ingress-nginx-http-svc", "public/ingress-nginx-http-svc.yaml", nil, corpusWant{noSignal: true}},
	{"A/istio/annotations", "cases/istio-annotated.yaml", nil, corpusWant{mesh: mesh.Istio}},
	{"A/istio/rev-label", "cases/istio-rev-label.yaml", nil, corpusWant{mesh: mesh.Istio}},
	{"A/linkerd/annotation", "cases/linkerd-annotated.yaml", nil, corpusWant{mesh: mesh.Linkerd}},
	{"A/ambient/label", "cases/ambient-labelled.yaml", nil, corpusWant{mesh: plan.Ambient, ports: []int{8080}}},
	{"A/inject-false-label/no-flag", "cases/inject-false-label.yaml", nil, corpusWant{mesh: mesh.None, ports: []int{8080}}},
	{"A/inject-false-annotation/no-flag", "cases/inject-false-annotation.yaml", nil, corpusWant{mesh: mesh.None, ports: []int{8080}}},
	{"A/inject-false-label/mesh-istio", "cases/inject-false-label.yaml", []string{"--mesh", "istio"}, corpusWant{usage: []string{"--mesh none"}}},
	{"A/inject-false-annotation/mesh-istio", "cases/inject-false-annotation.yaml", []string{"--mesh", "istio"}, corpusWant{usage: []string{"--mesh none"}}},
	{"A/hostnetwork/no-flag", "cases/hostnetwork-proxy-daemonset.yaml", nil, corpusWant{usage: []string{"hostNetwork"}}},
	{"A/hostnetwork/mesh-istio", "cases/hostnetwork-proxy-daemonset.yaml", []string{"--mesh", "istio"}, corpusWant{usage: []string{"hostNetwork", "--mesh none"}}},
	{"A/hostnetwork/mesh-linkerd", "cases/hostnetwork-proxy-daemonset.yaml", []string{"--mesh", "linkerd"}, corpusWant{usage: []string{"hostNetwork", "--mesh none"}}},
	{"A/hostnetwork/mesh-none", "cases/hostnetwork-proxy-daemonset.yaml", []string{"--mesh", "none"}, corpusWant{usage: []string{"hostNetwork"}}},
	{"A/bookinfo/mesh-istio", "public/istio-bookinfo.yaml", []string{"--workload", "productpage-v1", "--mesh", "istio"}, corpusWant{mesh: mesh.Istio}},
	{"A/emojivoto/mesh-linkerd", "public/linkerd-emojivoto.yml", []string{"--workload", "web", "--mesh", "linkerd"}, corpusWant{mesh: mesh.Linkerd}},

	// B. Under none and ambient: the ports a Service in the input targets, else every TCP port
	// but those that serve only probes or metrics, each left out said with --port N.
	{"B/spring-boot/service-by-name", "cases/spring-boot-management-port.yaml", []string{"--mesh", "none"},
		corpusWant{mesh: mesh.None, ports: []int{8080}, stderr: []string{"--port 8081"}}},
	{"B/spring-boot/no-service", "cases/spring-boot-management-port-no-service.yaml", []string{"--mesh", "none"},
		corpusWant{mesh: mesh.None, ports: []int{8080}, stderr: []string{"--port 8081"}}},
	{"B/spring-boot/port-given", "cases/spring-boot-management-port.yaml", []string{"--mesh", "none", "--port", "8081"},
		corpusWant{mesh: mesh.None, ports: []int{8081}}},
	{"B/ambient/metrics-port", "cases/ambient-labelled.yaml", []string{"--mesh", "ambient"},
		corpusWant{mesh: plan.Ambient, ports: []int{8080}, stderr: []string{"--port 9090"}}},
	{"B/bookinfo/productpage", "public/istio-bookinfo.yaml", []string{"--workload", "productpage-v1", "--mesh", "none"},
		corpusWant{mesh: mesh.None, ports: []int{9080}}},
	{"B/emojivoto/web", "public/linkerd-emojivoto.yml", []string{"--workload", "web", "--mesh", "none"},
		corpusWant{mesh: mesh.None, ports: []int{8080}}},
	{"B/guestbook/frontend", "public/kubernetes-guestbook-all-in-one.yaml", []string{"--workload", "frontend", "--mesh", "none"},
		corpusWant{mesh: mesh.None, ports: []int{80}}},
	{"B/guestbook/redis-master", "public/kubernetes-guestbook-all-in-one.yaml", []string{"--workload", "redis-master", "--mesh", "none"},
		corpusWant{mesh: mesh.None, ports: []int{6379}}},
	{"B/ingress-nginx/http-svc", "public/ingress-nginx-http-svc.yaml", []string{"--mesh", "none"},
		corpusWant{mesh: mesh.None, ports: []int{8080}}},
	{"B/helm-ingress-nginx/controller", "public/helm-ingress-nginx-baremetal-deploy.yaml", []string{"--mesh", "none", "--replace-prestop"},
		corpusWant{mesh: mesh.None, ports: []int{80, 443, 8443}, grace: 300}},

	// C. Exec probes on loopback are not clients.
	{"C/exec-probes-localhost", "cases/exec-probes-localhost.yaml", []string{"--mesh", "none"},
		corpusWant{mesh: mesh.None, ports: []int{8080}, args: []string{"--ignore-source=127.0.0.0/8", "--ignore-source=::1/128"}, stderr: []string{"127.0.0.0/8"}}},
	{"C/http-probes-only", "cases/spring-boot-management-port.yaml", []string{"--mesh", "none"},
		corpusWant{mesh: mesh.None, noArgs: []string{"--ignore-source=127.0.0.0/8", "--ignore-source=::1/128"}}},

	// E. The app keeps its time: sleep 15 in 45 s leaves it 30 s, and the fail-safe is 15 s.
	{"E/replaced-sleep", "cases/replaced-sleep-raised-grace.yaml", []string{"--mesh", "none"},
		// The sleep's 15s within the hook's deadline, 45s − 30s − 1s.
		corpusWant{mesh: mesh.None, ports: []int{8080}, args: []string{"--app-drain=30s", "--fallback-wait=14s"}, grace: 45}},
	{"E/replaced-sleep-app-drain-given", "cases/replaced-sleep-raised-grace.yaml", []string{"--mesh", "none", "--app-drain", "20s"},
		corpusWant{mesh: mesh.None, args: []string{"--app-drain=20s", "--fallback-wait=15s"}, grace: 45}},

	// Issue 37, item 5: JSON in, YAML out; a List read; the app beside a log shipper found.
	{"5/json", "cases/deployment.json", []string{"--mesh", "none"},
		corpusWant{mesh: mesh.None, ports: []int{8080}, blockYAML: true}},
	{"5/list", "cases/list-service-deployment.yaml", []string{"--mesh", "none"},
		corpusWant{mesh: mesh.None, ports: []int{8080}, stderr: []string{"--port 9090"}}},
	{"5/log-shipper", "cases/app-with-log-shipper.yaml", []string{"--mesh", "none"},
		corpusWant{mesh: mesh.None, ports: []int{8080}}},
}

// TestPlanCorpusGuards: the corpus checks themselves fail where they must, or a pass of
// TestPlanCorpus would prove nothing: a misspelt field, an unknown kind, a flow-style
// collection, and an image: auto where no injector runs.
func TestPlanCorpusGuards(t *testing.T) {
	misspelt := "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec:\n  template:\n    spec:\n      terminationGracePeriod: 15\n"
	if _, err := decodeStrict([]byte(misspelt)); err == nil {
		t.Error("a misspelt field decoded")
	}
	if _, err := decodeStrict([]byte("apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w}\n")); err == nil {
		t.Error("a kind without an API type here decoded")
	}
	if err := blockStyle("a:\n  b: {c: 1}\n"); err == nil {
		t.Error("a flow mapping passed as block style")
	}
	if err := blockStyle("a:\n  b: {}\n  c:\n    - 1\n"); err != nil {
		t.Errorf("block style with an empty mapping: %v", err)
	}
	skipped := corev1.PodTemplateSpec{}
	skipped.Labels = map[string]string{"sidecar.istio.io/inject": "false"}
	if istioInjects(skipped) {
		t.Error(`inject: "false" as a label: the injector would inject`)
	}
	skipped = corev1.PodTemplateSpec{}
	skipped.Spec.HostNetwork = true
	if istioInjects(skipped) {
		t.Error("hostNetwork: the injector would inject")
	}
	for args, want := range map[string]mesh.Mesh{
		"--drain-at=end --grace-period=12s":                      mesh.Istio,
		"--mesh=linkerd":                                         mesh.Linkerd,
		"--mesh=none --port=8080":                                mesh.None,
		"--mesh=none --ignore-source=" + plan.AmbientProbeSource: plan.Ambient,
	} {
		if got := prestopMesh(strings.Fields(args)); got != want {
			t.Errorf("prestopMesh(%s) = %s, want %s", args, got, want)
		}
	}
	if got, err := prestopPorts([]string{"--port=9090", "--port", "80,443"}); err != nil || !slices.Equal(got, []int{80, 443, 9090}) {
		t.Errorf("prestopPorts: %v %v", got, err)
	}
}
