// Package examples holds the deployable manifests of meshdrain and the test that keeps them
// honest: each manifest decodes strictly into the Kubernetes API types (a misspelt field
// fails instead of being silently dropped by the API server), its preStop runs the binary the
// init container installs, and its grace-period arithmetic holds. The Kubernetes types are
// imported only here, in a test, so the meshdrain binary stays small.
package examples

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/meshdrain/meshdrain/pkg/cli"
	"github.com/meshdrain/meshdrain/pkg/mesh"
	"github.com/meshdrain/meshdrain/pkg/operator/plan"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// userScenario is the input the examples were planned with (see their comments): the one
// computation the README tells, and the one the demo's "recommended" sidecar comes from
// (podsim.UserScenario: P99 450ms, 50 clients whose lag has p50 1.5s and p99 12s, 5s drain).
func userScenario(sc plan.Sidecar) plan.Input {
	return plan.Input{P99: 450 * time.Millisecond, EDSLag: 12 * time.Second, EDSLagMedian: 1500 * time.Millisecond, Clients: 50,
		AppDrain: 5 * time.Second, Sidecar: sc, DeferSidecarDrain: true}
}

func manifestFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("*", "deployment*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 6 {
		t.Fatalf("found %d manifests, want the Istio classic and native, generic Envoy, Linkerd native and classic, and meshless examples", len(files))
	}
	return files
}

// decodeDeployments splits a YAML stream into documents and decodes each, strictly, as an
// apps/v1 Deployment; other kinds (a Consul ServiceDefaults) are left to their own checks.
func decodeDeployments(t *testing.T, name string, data []byte) []appsv1.Deployment {
	t.Helper()
	var out []appsv1.Deployment
	for i, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(data), -1) {
		if strings.TrimSpace(stripComments(doc)) == "" {
			continue
		}
		var meta struct {
			Kind string `json:"kind"`
		}
		if err := yaml.Unmarshal([]byte(doc), &meta); err == nil && meta.Kind != "Deployment" && meta.Kind != "" {
			continue
		}
		var d appsv1.Deployment
		if err := yaml.UnmarshalStrict([]byte(doc), &d); err != nil {
			t.Fatalf("%s document %d: %v", name, i, err)
		}
		if d.APIVersion != "apps/v1" || d.Kind != "Deployment" {
			t.Fatalf("%s document %d: %s %s, want an apps/v1 Deployment", name, i, d.APIVersion, d.Kind)
		}
		out = append(out, d)
	}
	return out
}

func stripComments(doc string) string {
	var b strings.Builder
	for _, line := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "#") {
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}

func TestStrictDecodingRejectsUnknownFields(t *testing.T) {
	// The guard itself: a misspelt field must fail, or the other tests prove nothing.
	bad := []byte("apiVersion: apps/v1\nkind: Deployment\nspec:\n  template:\n    spec:\n      terminationGracePeriod: 15\n")
	var d appsv1.Deployment
	if err := yaml.UnmarshalStrict(bad, &d); err == nil {
		t.Fatal("a misspelt field decoded without error")
	}
}

// reporter is the part of *testing.T the checks use, so a test can also run them on a broken
// manifest and collect what they report.
type reporter interface {
	Helper()
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
	Fatal(args ...any)
}

// recorder collects problems instead of failing a test; Fatal* stop the check by panicking
// with errStopCheck, which problems recovers.
type recorder struct{ problems []string }

var errStopCheck = errors.New("check stopped")

func (r *recorder) Helper() {}
func (r *recorder) Errorf(format string, args ...any) {
	r.problems = append(r.problems, fmt.Sprintf(format, args...))
}
func (r *recorder) Fatalf(format string, args ...any) {
	r.Errorf(format, args...)
	panic(errStopCheck)
}
func (r *recorder) Fatal(args ...any) {
	r.problems = append(r.problems, fmt.Sprint(args...))
	panic(errStopCheck)
}

// problems runs checkPodTemplate and returns what it found wrong.
func problems(example string, tpl corev1.PodTemplateSpec) (found []string) {
	r := &recorder{}
	defer func() {
		if v := recover(); v != nil && v != errStopCheck {
			panic(v)
		}
		found = r.problems
	}()
	checkPodTemplate(r, example, tpl)
	return nil
}

// prestop is what a manifest's preStop hook runs, as numbers.
type prestop struct {
	container   string
	path        string
	args        []string
	gracePeriod time.Duration
	appDrain    time.Duration
	deadline    time.Duration
	logFile     string
}

// findPrestop finds the container whose preStop runs meshdrain and reads its flags, applying
// prestop's defaults (grace 30s, app drain 5s, deadline = grace - app drain - 1s).
func findPrestop(t reporter, spec corev1.PodSpec) (prestop, corev1.Container) {
	t.Helper()
	for _, c := range spec.Containers {
		if c.Lifecycle == nil || c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.Exec == nil {
			continue
		}
		cmd := c.Lifecycle.PreStop.Exec.Command
		if len(cmd) < 2 || filepath.Base(cmd[0]) != "meshdrain" || cmd[1] != "prestop" {
			continue
		}
		p := prestop{container: c.Name, path: cmd[0], args: cmd[1:], gracePeriod: 30 * time.Second, appDrain: 5 * time.Second}
		for _, arg := range cmd[2:] {
			name, value, ok := strings.Cut(strings.TrimPrefix(arg, "--"), "=")
			if !ok {
				t.Fatalf("%s: preStop argument %q: write flags as --name=value so this test can read them", c.Name, arg)
			}
			switch name {
			case "grace-period", "app-drain", "deadline":
				d, err := time.ParseDuration(value)
				if err != nil {
					t.Fatalf("%s: %s: %v", c.Name, arg, err)
				}
				switch name {
				case "grace-period":
					p.gracePeriod = d
				case "app-drain":
					p.appDrain = d
				default:
					p.deadline = d
				}
			case "log-file":
				p.logFile = value
			}
		}
		if p.deadline == 0 {
			p.deadline = p.gracePeriod - p.appDrain - time.Second
		}
		return p, c
	}
	t.Fatal("no container has a preStop that runs meshdrain prestop")
	return prestop{}, corev1.Container{}
}

func mountOf(c corev1.Container, volume string) (string, bool) {
	for _, m := range c.VolumeMounts {
		if m.Name == volume {
			return m.MountPath, true
		}
	}
	return "", false
}

func TestManifests(t *testing.T) {
	for _, file := range manifestFiles(t) {
		t.Run(strings.TrimSuffix(file, ".yaml"), func(t *testing.T) {
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			ds := decodeDeployments(t, file, data)
			if len(ds) == 0 {
				t.Fatal("no Deployment")
			}
			for _, d := range ds {
				checkPodTemplate(t, filepath.Dir(file), d.Spec.Template)
				checkRestricted(t, file, d.Spec.Template.Spec)
				checkImage(t, d.Spec.Template.Spec)
			}
		})
	}
}

// checkPodTemplate checks the invariants every meshdrain pod must hold.
func checkPodTemplate(t reporter, example string, tpl corev1.PodTemplateSpec) {
	spec := tpl.Spec
	ps, app := findPrestop(t, spec)

	// The preStop runs the file the init container installed, through the same emptyDir.
	volume, installed := installedBinary(t, spec)
	appMount, ok := mountOf(app, volume)
	if !ok {
		t.Fatalf("app container %s does not mount the %s volume the binary is installed in", app.Name, volume)
	}
	if want := filepath.Join(appMount, installed); ps.path != want {
		t.Errorf("preStop runs %s, but the init container installs %s", ps.path, want)
	}
	if ps.logFile != plan.LogFile {
		t.Errorf("preStop logs to %q, want %s (a hook's own output is discarded)", ps.logFile, plan.LogFile)
	}

	// The grace period covers meshdrain's deadline and the app's drain.
	if spec.TerminationGracePeriodSeconds == nil {
		t.Fatal("terminationGracePeriodSeconds is not set (the default 30s is not what prestop was told)")
	}
	grace := time.Duration(*spec.TerminationGracePeriodSeconds) * time.Second
	if ps.gracePeriod != grace {
		t.Errorf("prestop --grace-period %s != terminationGracePeriodSeconds %s", ps.gracePeriod, grace)
	}
	if grace <= ps.deadline+ps.appDrain {
		t.Errorf("grace %s <= meshdrain deadline %s + app drain %s", grace, ps.deadline, ps.appDrain)
	}
	if ps.deadline <= 0 {
		t.Errorf("meshdrain deadline %s", ps.deadline)
	}
	for _, e := range app.Env {
		if e.Name == "SPRING_LIFECYCLE_TIMEOUT_PER_SHUTDOWN_PHASE" {
			d, err := time.ParseDuration(e.Value)
			if err != nil || d > ps.appDrain {
				t.Errorf("app's shutdown timeout %s exceeds --app-drain %s", e.Value, ps.appDrain)
			}
		}
	}

	// The flags are ones prestop accepts: cobra parses every flag before it honours --help.
	var out, errOut bytes.Buffer
	if code := cli.Main(append(ps.args, "--help"), strings.NewReader(""), &out, &errOut); code != 0 {
		t.Errorf("meshdrain %s: exit %d: %s", strings.Join(ps.args, " "), code, errOut.String())
	}

	// The sidecar outlives the app.
	ann := tpl.Annotations
	appExit := ps.deadline + ps.appDrain
	switch {
	case strings.HasPrefix(example, "istio"):
		prefixes := strings.Split(ann[plan.StatsInclusionAnnotation], ",")
		for _, want := range strings.Split(plan.StatsInclusionPrefixes, ",") {
			if !contains(prefixes, want) {
				t.Errorf("%s lacks %q: Istio would emit no inbound stats", plan.StatsInclusionAnnotation, want)
			}
		}
		checkProxyOverride(t, tpl.Spec, ps, volume, installed)
		native := ann[plan.NativeSidecarAnnotation] == "true"
		var cfg struct {
			TerminationDrainDuration string            `json:"terminationDrainDuration"`
			ProxyMetadata            map[string]string `json:"proxyMetadata"`
		}
		if raw, ok := ann[plan.ProxyConfigAnnotation]; ok {
			// JSON or YAML: Istio accepts both in the annotation.
			if err := yaml.Unmarshal([]byte(raw), &cfg); err != nil {
				t.Fatalf("%s: %v", plan.ProxyConfigAnnotation, err)
			}
		}
		switch {
		case native:
			want := mustRecommend(t, userScenario(plan.Native))
			if grace != want.GracePeriod {
				t.Errorf("grace %s, but meshdrain plan recommends %s", grace, want.GracePeriod)
			}
		case cfg.ProxyMetadata["EXIT_ON_ZERO_ACTIVE_CONNECTIONS"] == "true":
			if d := mustDuration(t, cfg.ProxyMetadata["MINIMUM_DRAIN_DURATION"]); d < ps.deadline {
				t.Errorf("MINIMUM_DRAIN_DURATION %s < meshdrain deadline %s", d, ps.deadline)
			}
		default:
			tdd := mustDuration(t, cfg.TerminationDrainDuration)
			// Regime (b): hold keeps the proxy; terminationDrainDuration is how long pilot-agent
			// waits after its own drain when hold's drain call failed, once the app has let go.
			if tdd < ps.appDrain+plan.KillMargin {
				t.Errorf("terminationDrainDuration %s: the fallback kills Envoy before the app's drain %s + %s", tdd, ps.appDrain, plan.KillMargin)
			}
			want := mustRecommend(t, userScenario(plan.Classic))
			if grace != want.GracePeriod || tdd != want.TerminationDrainDuration {
				t.Errorf("grace %s, terminationDrainDuration %s; meshdrain plan recommends %s, %s", grace, tdd, want.GracePeriod, want.TerminationDrainDuration)
			}
		}
	case strings.HasPrefix(example, "consul"):
		secs, err := strconv.Atoi(ann["consul.hashicorp.com/sidecar-proxy-lifecycle-shutdown-grace-period-seconds"])
		if err != nil {
			t.Fatalf("shutdown grace period annotation: %v", err)
		}
		if time.Duration(secs)*time.Second <= appExit {
			t.Errorf("consul-dataplane stops Envoy at %ds, before the app exits (by %s)", secs, appExit)
		}
		for _, flag := range []string{"--cluster=", "--http-prefix=", "--admin="} {
			if !hasPrefixArg(ps.args, flag) {
				t.Errorf("generic Envoy needs %s: Istio's stat names do not apply", flag)
			}
		}
	case strings.HasPrefix(example, "linkerd"):
		checkLinkerd(t, tpl, ps, grace, appExit)
	case strings.HasPrefix(example, "meshless"):
		checkMeshless(t, tpl, ps, app, grace)
	default:
		t.Fatalf("example %s: unknown kind of sidecar, add its checks", example)
	}
}

// proxyOverride is the pod spec's istio-proxy container, the override Istio's injector merges
// into the proxy it injects.
func proxyOverride(spec corev1.PodSpec) (corev1.Container, bool) {
	for _, c := range spec.Containers {
		if c.Name == plan.ProxyContainerName {
			return c, true
		}
	}
	return corev1.Container{}, false
}

// checkProxyOverride: regime (b), plan's default for Istio. The pod overrides istio-proxy in
// containers (where a classic injection reads it and a native one moves it from), with the
// injector's image, the meshdrain volume read-only, and a preStop that is one exec of meshdrain
// hold from that volume with prestop's --grace-period and --app-drain, flags hold accepts; and
// prestop drains at its decision.
func checkProxyOverride(t reporter, spec corev1.PodSpec, ps prestop, volume, installed string) {
	t.Helper()
	for _, c := range spec.InitContainers {
		if c.Name == plan.ProxyContainerName {
			t.Errorf("istio-proxy in initContainers: a classic injection ignores it (and leaves a second istio-proxy with image auto); put it in containers")
		}
	}
	proxy, ok := proxyOverride(spec)
	if !ok {
		t.Fatalf("no istio-proxy override: Istio drains at the deletion (regime a), and Connection: close on every response erases the per-client evidence")
	}
	if !contains(ps.args, "--drain-at=end") {
		t.Errorf("prestop %q lacks --drain-at=end: in regime (b) nothing drains before its decision", ps.args)
	}
	if proxy.Image != plan.ProxyImageAuto {
		t.Errorf("istio-proxy image %q, want %q: the injector keeps its own image only for auto", proxy.Image, plan.ProxyImageAuto)
	}
	h := proxy.Lifecycle
	if h == nil || h.PreStop == nil || h.PreStop.Exec == nil {
		t.Fatalf("istio-proxy has no preStop exec: %+v", h)
	}
	if h.PreStop.HTTPGet != nil || h.PreStop.TCPSocket != nil || h.PreStop.Sleep != nil {
		t.Errorf("istio-proxy's preStop has another handler besides exec: %+v", h.PreStop)
	}
	cmd := h.PreStop.Exec.Command
	if len(cmd) < 2 || filepath.Base(cmd[0]) != "meshdrain" || cmd[1] != "hold" {
		t.Fatalf("istio-proxy's preStop %q is not meshdrain hold", cmd)
	}
	mount, ok := mountOf(proxy, volume)
	if !ok {
		t.Fatalf("istio-proxy does not mount the %s volume the binary is installed in", volume)
	}
	if want := filepath.Join(mount, installed); cmd[0] != want {
		t.Errorf("hold runs %s, but the init container installs %s", cmd[0], want)
	}
	for _, m := range proxy.VolumeMounts {
		if m.Name == volume && !m.ReadOnly {
			t.Errorf("istio-proxy mounts %s writable: it only executes the binary", volume)
		}
	}
	for _, flag := range []string{"--grace-period", "--app-drain"} {
		if got, want := argValue(cmd, flag), argValue(ps.args, flag); got != want {
			t.Errorf("hold %s=%q, prestop's %q: hold must end by the same hook deadline", flag, got, want)
		}
	}
	// The flags are ones hold accepts (its log file moved to a writable place).
	args := append([]string{}, cmd[1:]...)
	for i, a := range args {
		if strings.HasPrefix(a, "--log-file=") {
			args[i] = "--log-file=" + filepath.Join(os.TempDir(), "meshdrain-examples-hold.log")
		}
	}
	var out, errOut bytes.Buffer
	if code := cli.Main(append(args, "--validate"), strings.NewReader(""), &out, &errOut); code != 0 {
		t.Errorf("meshdrain %s --validate: exit %d: %s", strings.Join(args, " "), code, errOut.String())
	}
}

// linkerdScenario is userScenario for a Linkerd proxy.
func linkerdScenario(sc plan.Sidecar) plan.Input {
	in := userScenario(sc)
	in.Mesh = mesh.Linkerd
	return in
}

// checkLinkerd: the preStop reads the Linkerd proxy, the pod asks for no Istio setting, and
// the proxy serves until the app has exited: by the kubelet's ordering (native sidecar) or
// by its preStop sleep (classic proxy), which a native sidecar must not have.
func checkLinkerd(t reporter, tpl corev1.PodTemplateSpec, ps prestop, grace, appExit time.Duration) {
	t.Helper()
	ann := tpl.Annotations
	for key := range ann {
		if strings.Contains(key, "istio.io") {
			t.Errorf("annotation %s: an Istio setting on a Linkerd pod", key)
		}
	}
	if ann[plan.LinkerdInjectAnnotation] != "enabled" {
		t.Errorf("%s is not \"enabled\": the example gets no proxy unless its namespace asks for one", plan.LinkerdInjectAnnotation)
	}
	if got := argValue(ps.args, "--mesh"); got != string(mesh.Linkerd) {
		t.Errorf("prestop --mesh %q: prestop reads a Linkerd proxy only with --mesh=linkerd (its defaults are Envoy's)", got)
	}
	if got := argValue(ps.args, "--admin"); got != plan.LinkerdAdminURL {
		t.Errorf("prestop --admin %q, want the proxy's admin port %s", got, plan.LinkerdAdminURL)
	}
	raw, hasWait := ann[plan.LinkerdWaitBeforeExitAnnotation]
	if ann[plan.LinkerdNativeSidecarAnnotation] != "false" {
		if hasWait {
			t.Errorf("%s with a native sidecar: Linkerd's injector refuses the combination (linkerd2#12164)", plan.LinkerdWaitBeforeExitAnnotation)
		}
		if want := mustRecommend(t, linkerdScenario(plan.Native)); grace != want.GracePeriod {
			t.Errorf("grace %s, but meshdrain plan --mesh linkerd recommends %s", grace, want.GracePeriod)
		}
		return
	}
	if !hasWait {
		t.Fatalf("a classic proxy without %s gets SIGTERM at t0 and stops accepting while clients still send", plan.LinkerdWaitBeforeExitAnnotation)
	}
	secs, err := strconv.Atoi(raw)
	if err != nil {
		t.Fatalf("%s %q: %v", plan.LinkerdWaitBeforeExitAnnotation, raw, err)
	}
	wait := time.Duration(secs) * time.Second
	if wait < appExit {
		t.Errorf("proxy-wait-before-exit-seconds %s: the proxy stops accepting before the app exits (by %s)", wait, appExit)
	}
	if grace < wait+plan.KillMargin {
		t.Errorf("grace %s leaves the proxy no time to shut down after its SIGTERM at %s", grace, wait)
	}
	if want := mustRecommend(t, linkerdScenario(plan.Classic)); grace != want.GracePeriod || wait != want.WaitBeforeExit {
		t.Errorf("grace %s, proxy-wait-before-exit %s; meshdrain plan --mesh linkerd --sidecar classic recommends %s, %s", grace, wait, want.GracePeriod, want.WaitBeforeExit)
	}
}

// TestLinkerdChecksCatchBrokenManifests proves the Linkerd checks are not vacuous.
func TestLinkerdChecksCatchBrokenManifests(t *testing.T) {
	load := func(file string) corev1.PodTemplateSpec {
		data, err := os.ReadFile(filepath.Join("linkerd", file))
		if err != nil {
			t.Fatal(err)
		}
		return decodeDeployments(t, file, data)[0].Spec.Template
	}
	for _, file := range []string{"deployment.yaml", "deployment-classic.yaml"} {
		if found := problems("linkerd", load(file)); len(found) != 0 {
			t.Fatalf("%s itself has problems: %v", file, found)
		}
	}
	setArg := func(tpl *corev1.PodTemplateSpec, name, value string) {
		cmd := tpl.Spec.Containers[0].Lifecycle.PreStop.Exec.Command
		for i, a := range cmd {
			if strings.HasPrefix(a, name+"=") {
				if value == "" {
					tpl.Spec.Containers[0].Lifecycle.PreStop.Exec.Command = append(cmd[:i:i], cmd[i+1:]...)
				} else {
					cmd[i] = name + "=" + value
				}
				return
			}
		}
		t.Fatalf("no %s in %v", name, cmd)
	}
	for _, c := range []struct {
		name, file string
		breakIt    func(*corev1.PodTemplateSpec)
		want       string
	}{
		{"no --mesh", "deployment.yaml", func(tpl *corev1.PodTemplateSpec) { setArg(tpl, "--mesh", "") }, "only with --mesh=linkerd"},
		{"Envoy's admin port", "deployment.yaml", func(tpl *corev1.PodTemplateSpec) { setArg(tpl, "--admin", "http://127.0.0.1:15000") }, "want the proxy's admin port"},
		{"sleep with a native sidecar", "deployment.yaml", func(tpl *corev1.PodTemplateSpec) {
			tpl.Annotations[plan.LinkerdWaitBeforeExitAnnotation] = "51"
		}, "injector refuses the combination"},
		{"Istio annotation", "deployment.yaml", func(tpl *corev1.PodTemplateSpec) {
			tpl.Annotations[plan.StatsInclusionAnnotation] = plan.StatsInclusionPrefixes
		}, "an Istio setting on a Linkerd pod"},
		{"no injection", "deployment.yaml", func(tpl *corev1.PodTemplateSpec) { delete(tpl.Annotations, plan.LinkerdInjectAnnotation) }, "gets no proxy"},
		{"sleep shorter than the app", "deployment-classic.yaml", func(tpl *corev1.PodTemplateSpec) {
			tpl.Annotations[plan.LinkerdWaitBeforeExitAnnotation] = "46"
		}, "stops accepting before the app exits"},
		{"no sleep", "deployment-classic.yaml", func(tpl *corev1.PodTemplateSpec) {
			delete(tpl.Annotations, plan.LinkerdWaitBeforeExitAnnotation)
		}, "gets SIGTERM at t0"},
		{"grace without room for the proxy", "deployment-classic.yaml", func(tpl *corev1.PodTemplateSpec) {
			g := int64(51)
			tpl.Spec.TerminationGracePeriodSeconds = &g
			setArg(tpl, "--grace-period", "51s")
		}, "leaves the proxy no time"},
	} {
		t.Run(c.name, func(t *testing.T) {
			tpl := load(c.file)
			c.breakIt(&tpl)
			found := problems("linkerd", tpl)
			if !strings.Contains(strings.Join(found, "\n"), c.want) {
				t.Errorf("problems %q do not mention %q", found, c.want)
			}
		})
	}
}

// argValue is the value of --name=value in args, "" when absent.
func argValue(args []string, name string) string {
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v
		}
	}
	return ""
}

// TestChecksCatchBrokenManifests proves the checks above are not vacuous: each way of
// breaking the classic example is reported.
func TestChecksCatchBrokenManifests(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("istio-classic", "deployment.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	load := func() corev1.PodTemplateSpec { return decodeDeployments(t, "istio-classic", data)[0].Spec.Template }
	if found := problems("istio-classic", load()); len(found) != 0 {
		t.Fatalf("the example itself has problems: %v", found)
	}
	for _, c := range []struct {
		name    string
		breakIt func(*corev1.PodTemplateSpec)
		want    string
	}{
		{"preStop path", func(tpl *corev1.PodTemplateSpec) {
			tpl.Spec.Containers[0].Lifecycle.PreStop.Exec.Command[0] = "/opt/meshdrain"
		}, "but the init container installs /meshdrain/meshdrain"},
		{"install elsewhere", func(tpl *corev1.PodTemplateSpec) {
			tpl.Spec.InitContainers[0].Args = []string{"install", "/tmp"}
		}, "which is in no emptyDir"},
		{"grace period too short", func(tpl *corev1.PodTemplateSpec) {
			g := int64(13)
			tpl.Spec.TerminationGracePeriodSeconds = &g
		}, "!= terminationGracePeriodSeconds"},
		{"deadline too long", func(tpl *corev1.PodTemplateSpec) {
			cmd := &tpl.Spec.Containers[0].Lifecycle.PreStop.Exec.Command
			*cmd = append(*cmd, "--deadline=47s")
		}, "<= meshdrain deadline 47s + app drain 5s"},
		{"Istio default terminationDrainDuration", func(tpl *corev1.PodTemplateSpec) {
			tpl.Annotations[plan.ProxyConfigAnnotation] = `{"terminationDrainDuration": "5s"}`
		}, "the fallback kills Envoy before the app's drain"},
		{"no istio-proxy override", func(tpl *corev1.PodTemplateSpec) {
			tpl.Spec.Containers = tpl.Spec.Containers[:1]
		}, "no istio-proxy override"},
		{"override in initContainers", func(tpl *corev1.PodTemplateSpec) {
			tpl.Spec.InitContainers = append(tpl.Spec.InitContainers, tpl.Spec.Containers[1])
		}, "a classic injection ignores it"},
		{"hold with another grace period", func(tpl *corev1.PodTemplateSpec) {
			tpl.Spec.Containers[1].Lifecycle.PreStop.Exec.Command[2] = "--grace-period=60s"
		}, "hold must end by the same hook deadline"},
		{"hold not on the volume", func(tpl *corev1.PodTemplateSpec) {
			tpl.Spec.Containers[1].VolumeMounts = nil
		}, "istio-proxy does not mount"},
		{"hold flag hold refuses", func(tpl *corev1.PodTemplateSpec) {
			cmd := &tpl.Spec.Containers[1].Lifecycle.PreStop.Exec.Command
			*cmd = append(*cmd, "--channel=nowhere")
		}, "--validate: exit 2"},
		{"a second handler on istio-proxy", func(tpl *corev1.PodTemplateSpec) {
			tpl.Spec.Containers[1].Lifecycle.PreStop.HTTPGet = &corev1.HTTPGetAction{Path: "/quitquitquit"}
		}, "another handler besides exec"},
		{"prestop drains at the start", func(tpl *corev1.PodTemplateSpec) {
			cmd := tpl.Spec.Containers[0].Lifecycle.PreStop.Exec.Command
			tpl.Spec.Containers[0].Lifecycle.PreStop.Exec.Command = append(cmd[:2:2], cmd[3:]...)
		}, "lacks --drain-at=end"},
		{"no stats annotation", func(tpl *corev1.PodTemplateSpec) {
			delete(tpl.Annotations, plan.StatsInclusionAnnotation)
		}, "Istio would emit no inbound stats"},
		{"hook output lost", func(tpl *corev1.PodTemplateSpec) {
			cmd := tpl.Spec.Containers[0].Lifecycle.PreStop.Exec.Command
			tpl.Spec.Containers[0].Lifecycle.PreStop.Exec.Command = cmd[:len(cmd)-1]
		}, "a hook's own output is discarded"},
		{"unknown prestop flag", func(tpl *corev1.PodTemplateSpec) {
			cmd := &tpl.Spec.Containers[0].Lifecycle.PreStop.Exec.Command
			*cmd = append(*cmd, "--quiet-window=1s")
		}, "unknown flag"},
		{"app drains longer than told", func(tpl *corev1.PodTemplateSpec) {
			tpl.Spec.Containers[0].Env[1].Value = "30s"
		}, "exceeds --app-drain"},
	} {
		t.Run(c.name, func(t *testing.T) {
			tpl := load()
			c.breakIt(&tpl)
			found := problems("istio-classic", tpl)
			if !strings.Contains(strings.Join(found, "\n"), c.want) {
				t.Errorf("problems %q do not mention %q", found, c.want)
			}
		})
	}
}

// installedBinary finds the init container that runs `meshdrain install DEST` and returns the
// volume it installs into and the file's path relative to that volume.
func installedBinary(t reporter, spec corev1.PodSpec) (volume, rel string) {
	t.Helper()
	for _, c := range spec.InitContainers {
		argv := append(append([]string{}, c.Command...), c.Args...)
		if len(c.Command) == 0 {
			argv = append([]string{imageEntrypoint(t)}, c.Args...)
		}
		if len(argv) != 3 || filepath.Base(argv[0]) != "meshdrain" || argv[1] != "install" {
			continue
		}
		if c.RestartPolicy != nil {
			t.Errorf("init container %s has a restartPolicy: it must run to completion, not as a sidecar", c.Name)
		}
		dest := argv[2]
		for _, m := range c.VolumeMounts {
			if !isEmptyDir(spec, m.Name) {
				continue
			}
			switch {
			case dest == m.MountPath || dest == m.MountPath+"/":
				return m.Name, "meshdrain" // a directory: install writes DEST/meshdrain
			case strings.HasPrefix(dest, m.MountPath+"/"):
				return m.Name, strings.TrimPrefix(dest, m.MountPath+"/")
			}
		}
		t.Fatalf("init container %s installs to %s, which is in no emptyDir it mounts", c.Name, dest)
	}
	t.Fatal("no init container runs meshdrain install")
	return "", ""
}

func isEmptyDir(spec corev1.PodSpec, name string) bool {
	for _, v := range spec.Volumes {
		if v.Name == name {
			return v.EmptyDir != nil
		}
	}
	return false
}

// imageEntrypoint reads the Dockerfile's ENTRYPOINT: the init containers set only args.
func imageEntrypoint(t reporter) string {
	t.Helper()
	df := readDockerfile(t)
	m := regexp.MustCompile(`(?m)^ENTRYPOINT\s+\["([^"]+)"\]\s*$`).FindStringSubmatch(df)
	if m == nil {
		t.Fatal(`Dockerfile has no ENTRYPOINT ["/path/to/meshdrain"]`)
	}
	return m[1]
}

func readDockerfile(t reporter) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// TestDockerfile checks what cannot be seen without a container runtime: a static build, a
// check that it is static, a minimal final stage, a non-root user, meshdrain as entrypoint.
func TestDockerfile(t *testing.T) {
	df := readDockerfile(t)
	stages := regexp.MustCompile(`(?m)^FROM\s+(\S+)`).FindAllStringSubmatch(df, -1)
	if len(stages) < 2 {
		t.Fatalf("want a multi-stage build, found %d FROM lines", len(stages))
	}
	if final := stages[len(stages)-1][1]; final != "scratch" && !strings.HasPrefix(final, "gcr.io/distroless/static") {
		t.Errorf("final stage is %s, want scratch or distroless/static", final)
	}
	for _, want := range []string{"CGO_ENABLED=0", "scripts/check-binary.sh"} {
		if !strings.Contains(df, want) {
			t.Errorf("Dockerfile lacks %s", want)
		}
	}
	users := regexp.MustCompile(`(?m)^USER\s+(\S+)`).FindAllStringSubmatch(df, -1)
	if len(users) == 0 {
		t.Fatal("Dockerfile sets no USER")
	}
	if u := users[len(users)-1][1]; u == "root" || u == "0" || strings.HasPrefix(u, "0:") {
		t.Errorf("final USER %s is root", u)
	}
	if ep := imageEntrypoint(t); filepath.Base(ep) != "meshdrain" {
		t.Errorf("ENTRYPOINT %s is not meshdrain", ep)
	}
}

// TestPlanPatchDecodes checks that `meshdrain plan -o yaml`, written by hand, is a valid
// Deployment patch that holds the same invariants as the examples.
func TestPlanPatchDecodes(t *testing.T) {
	for _, sc := range plan.Sidecars {
		t.Run(string(sc), func(t *testing.T) {
			p := mustRecommend(t, userScenario(sc))
			var buf bytes.Buffer
			opts := plan.PatchOptions{Container: "app", Image: "ghcr.io/meshdrain/meshdrain:latest", Dir: "/meshdrain"}
			if err := plan.WriteYAML(&buf, p, opts); err != nil {
				t.Fatal(err)
			}
			doc := "apiVersion: apps/v1\nkind: Deployment\n" + buf.String()
			ds := decodeDeployments(t, "plan -o yaml", []byte(doc))
			checkPodTemplate(t, "istio-"+string(sc), ds[0].Spec.Template)
		})
	}
	for _, sc := range []plan.Sidecar{plan.Native, plan.Classic} {
		t.Run("linkerd-"+string(sc), func(t *testing.T) {
			p := mustRecommend(t, linkerdScenario(sc))
			var buf bytes.Buffer
			opts := plan.PatchOptions{Container: "app", Image: "ghcr.io/meshdrain/meshdrain:latest", Dir: "/meshdrain"}
			if err := plan.WriteYAML(&buf, p, opts); err != nil {
				t.Fatal(err)
			}
			// The patch sets what plan sets; the injection itself is asked for elsewhere.
			doc := "apiVersion: apps/v1\nkind: Deployment\n" + buf.String()
			tpl := decodeDeployments(t, "plan --mesh linkerd -o yaml", []byte(doc))[0].Spec.Template
			if tpl.Annotations == nil {
				tpl.Annotations = map[string]string{}
			}
			tpl.Annotations[plan.LinkerdInjectAnnotation] = "enabled"
			checkPodTemplate(t, "linkerd", tpl)
		})
	}
}

func mustRecommend(t reporter, in plan.Input) plan.Plan {
	t.Helper()
	p, err := plan.Recommend(in)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func mustDuration(t reporter, s string) time.Duration {
	t.Helper()
	d, err := time.ParseDuration(s)
	if err != nil {
		t.Fatalf("duration %q: %v", s, err)
	}
	return d
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func hasPrefixArg(args []string, prefix string) bool {
	for _, a := range args {
		if strings.HasPrefix(a, prefix) {
			return true
		}
	}
	return false
}
