package cli

import (
	"context"
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	sigsyaml "sigs.k8s.io/yaml"
)

// tunedDeployment is a workload plan wrote once and its team then tuned by hand: flags added
// to the preStop, the grace period raised with a comment saying why, terminationDrainDuration
// raised with it.
const tunedDeployment = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: checkout
  namespace: shop
spec:
  selector:
    matchLabels: {app: checkout}
  template:
    metadata:
      labels: {app: checkout}
      annotations:
        sidecar.istio.io/statsInclusionPrefixes: "cluster.inbound|,http.inbound_,listener.0.0.0.0_15006"
        proxy.istio.io/config: '{"holdApplicationUntilProxyStarts": true, "drainDuration": "59s", "terminationDrainDuration": "60s"}'
    spec:
      terminationGracePeriodSeconds: 60  # bumped after the Black Friday 503s
      volumes:
        - name: meshdrain
          emptyDir: {sizeLimit: 32Mi}
      containers:
        - name: checkout
          image: registry.example.com/checkout:7.1
          ports:
            - containerPort: 8080
          volumeMounts:
            - {name: meshdrain, mountPath: /meshdrain, readOnly: true}
          lifecycle:
            preStop:
              exec:
                command:
                  - /meshdrain/meshdrain
                  - prestop
                  - --grace-period=60s
                  - --app-drain=5s
                  - --quiet=1s
                  - --eds-lag-bound=8s
                  - --log-file=/proc/1/fd/1
                  - --drain-at=end        # our sidecar's own drain is turned off
                  - --port
                  - "8080"
                  - --client-evidence
                  - "off"
                  - --strict-active
`

// handAdded are the flags the team added, as the command holds them, after --drain-at=end,
// which a regime (b) plan writes itself.
var handAdded = []string{"--port", "8080", "--client-evidence", "off", "--strict-active"}

// TestReplanKeepsWhatTheUserSet is issue 27's re-plan: the hand-added preStop flags, the raised
// grace period and its comment survive a GitOps re-plan, what would suffice is named, every
// change is listed on stderr, prestop accepts what is written, and a second re-plan changes
// nothing.
func TestReplanKeepsWhatTheUserSet(t *testing.T) {
	args := []string{"plan", "--p99", "450ms", "--eds-lag", "12s", "-f", "-", "-o", "yaml"}
	code, out, errOut := runMainStdin(t, tunedDeployment, args...)
	if code != ExitOK {
		t.Fatalf("exit %d, stderr %s", code, errOut)
	}
	d := decodeDeployment(t, out)
	spec := d.Spec.Template.Spec
	command := spec.Containers[0].Lifecycle.PreStop.Exec.Command
	if i := indexOf(command, handAdded); i < 0 || i < indexOf(command, []string{"--log-file=/proc/1/fd/1"}) {
		t.Errorf("preStop %q: the hand-added flags %q are not kept in their order after plan's own", command, handAdded)
	}
	if i := slices.Index(command, "--drain-at=end"); i < 0 || slices.Index(command[i+1:], "--drain-at=end") >= 0 || command[i+1] != "--port" {
		t.Errorf("preStop %q: want the team's --drain-at=end once, where the team wrote it (plan writes the same in regime (b))", command)
	}
	if *spec.TerminationGracePeriodSeconds != 60 || !slices.Contains(command, "--grace-period=60s") || !slices.Contains(command, "--eds-lag-bound=12s") {
		t.Errorf("grace %d, preStop %q: want the grace period kept at 60 (and the preStop's with it), --eds-lag-bound=12s", *spec.TerminationGracePeriodSeconds, command)
	}
	for _, want := range []string{"terminationGracePeriodSeconds: 60  # bumped after the Black Friday 503s", "- --drain-at=end        # our sidecar's own drain is turned off\n",
		`"terminationDrainDuration": "60s"`, "                  - hold\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	// What would suffice is named, with the flag that sets it.
	if !strings.Contains(errOut, "terminationGracePeriodSeconds 60s kept") || !strings.Contains(errOut, "23s that suffices") || !strings.Contains(errOut, "--lower-grace-period sets 23s") {
		t.Errorf("stderr does not name the grace period that suffices:\n%s", errOut)
	}
	// Every change is on stderr: the one flag plan changes, the init container and the
	// istio-proxy override it adds; the comment it moved, and the longer values it kept.
	for _, want := range []string{"Deployment/checkout: container checkout: preStop --eds-lag-bound 8s → 12s; keeps the preStop's own flags as they are: --log-file=/proc/1/fd/1 " + strings.Join(handAdded, " "),
		"Deployment/checkout: init container meshdrain-install", "Deployment/checkout: container istio-proxy (image: auto;",
		"terminationDrainDuration 60s kept", "6s that suffices"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errOut)
		}
	}
	if changes := stderrChanges(errOut); len(changes) != 3 {
		t.Errorf("stderr lists %d changes, want the 3 above:\n%s", len(changes), errOut)
	}
	// What plan writes, prestop accepts.
	if problems := prestopProblemsOf(t, command); len(problems) > 0 {
		t.Errorf("prestop refuses the written preStop %q: %v", command, problems)
	}
	// Idempotent: a second re-plan changes nothing, and says so.
	code, again, errOut := runMainStdin(t, out, args...)
	if code != ExitOK || again != out || !strings.Contains(errOut, "Deployment/checkout: no change") {
		t.Errorf("second re-plan: exit %d, stderr %s; output changed: %v", code, errOut, again != out)
	}

	// Asked to, plan lowers the grace period, the preStop's with it, terminationDrainDuration
	// to what the fallback needs, keeps the comment on the changed line, and says each.
	code, out, errOut = runMainStdin(t, tunedDeployment, append(args, "--lower-grace-period")...)
	if code != ExitOK {
		t.Fatalf("--lower-grace-period: exit %d, stderr %s", code, errOut)
	}
	for _, want := range []string{"terminationGracePeriodSeconds: 23  # bumped after the Black Friday 503s", `"terminationDrainDuration": "6s"`, "- --grace-period=23s"} {
		if !strings.Contains(out, want) {
			t.Errorf("--lower-grace-period: output lacks %q:\n%s", want, out)
		}
	}
	for _, want := range []string{"terminationGracePeriodSeconds: 60s → 23", "terminationDrainDuration 60s → 6s (keeps holdApplicationUntilProxyStarts, drainDuration)",
		"--grace-period 60s → 23s", `kept the comment "# bumped after the Black Friday 503s"`} {
		if !strings.Contains(errOut, want) {
			t.Errorf("--lower-grace-period: stderr lacks %q:\n%s", want, errOut)
		}
	}
}

// TestReplanListsChangesInEveryFormat: whatever -o says, stderr lists the same changes, the
// ones -o json gives in workload.changes, and what plan kept.
func TestReplanListsChangesInEveryFormat(t *testing.T) {
	base := []string{"plan", "--p99", "450ms", "--eds-lag", "12s", "--poll", "100ms", "-f", "-"}
	code, out, errOut := runMainStdin(t, tunedDeployment, append(base, "-o", "json")...)
	if code != ExitOK {
		t.Fatalf("exit %d, stderr %s", code, errOut)
	}
	var doc struct {
		Workload struct {
			Changes []string `json:"changes"`
		} `json:"workload"`
		Kept []struct{ Setting, Value, Suffices string } `json:"kept"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Workload.Changes) < 3 || len(doc.Kept) != 2 || doc.Kept[0].Setting != "terminationGracePeriodSeconds" || doc.Kept[0].Suffices != "23s" ||
		doc.Kept[1].Setting != "terminationDrainDuration" || doc.Kept[1].Suffices != "6s" {
		t.Fatalf("-o json: changes %q, kept %+v", doc.Workload.Changes, doc.Kept)
	}
	for _, format := range [][]string{{"-o", "text"}, {"-o", "json"}, {"-o", "yaml"}, {"-o", "yaml", "--patch"}} {
		code, _, errOut := runMainStdin(t, tunedDeployment, append(base, format...)...)
		if code != ExitOK {
			t.Fatalf("%v: exit %d, stderr %s", format, code, errOut)
		}
		for _, c := range doc.Workload.Changes {
			if !strings.Contains(errOut, "meshdrain: plan: Deployment/checkout: "+c+"\n") {
				t.Errorf("%v: stderr lacks the change %q:\n%s", format, c, errOut)
			}
		}
		if !strings.Contains(errOut, "terminationGracePeriodSeconds 60s kept") {
			t.Errorf("%v: stderr does not say the grace period is kept:\n%s", format, errOut)
		}
	}
}

// TestReplanRefusesAKeptFlagPrestopRefuses: a flag plan keeps goes through prestop's own
// checks; one prestop would refuse is named, and nothing is written.
func TestReplanRefusesAKeptFlagPrestopRefuses(t *testing.T) {
	for _, c := range []struct {
		flag, want string
		args       []string
	}{
		// In regime (a) --drain-at is the preStop's own (in regime (b) plan writes it).
		{"--drain-at=sometimes", `--drain-at "sometimes": want start or end`, []string{"--defer-sidecar-drain=false"}},
		{"--settled-quiet=10ms", "--settled-quiet 10ms is shorter than two polls", nil},
		{"--no-such-flag", "unknown flag: --no-such-flag", nil},
		{"--signal=KILL", "--signal needs exactly one of --pid or --pidfile", nil},
		{"--validate", "--validate in a preStop makes the hook print or check and return at once", nil},
	} {
		manifest := strings.Replace(tunedDeployment, "                  - --strict-active\n", "                  - --strict-active\n                  - "+c.flag+"\n", 1)
		code, out, errOut := runMainStdin(t, manifest, append([]string{"plan", "--p99", "450ms", "--eds-lag", "12s", "-f", "-", "-o", "yaml"}, c.args...)...)
		if code != ExitUsage || out != "" || !strings.Contains(errOut, c.want) || !strings.Contains(errOut, c.flag) {
			t.Errorf("kept %s: exit %d, stdout %d bytes, stderr %q: want 2, nothing written, %q", c.flag, code, len(out), errOut, c.want)
		}
	}
	// The pod's process and program are not this machine's: a signal to a pid is not checked
	// against this machine's processes, and kept.
	manifest := strings.Replace(tunedDeployment, "                  - --strict-active\n", "                  - --strict-active\n                  - --signal=TERM\n                  - --pid=1\n", 1)
	code, out, errOut := runMainStdin(t, manifest, "plan", "--p99", "450ms", "--eds-lag", "12s", "-f", "-", "-o", "yaml")
	if code != ExitOK || !strings.Contains(out, "- --signal=TERM\n") {
		t.Errorf("--signal=TERM --pid=1: exit %d, stderr %s", code, errOut)
	}
}

// TestReplanReadsItsInputsFromThePrestop: what the preStop says of the app and its clients is
// the re-plan's input unless a flag says otherwise, which is then a change, listed.
func TestReplanReadsItsInputsFromThePrestop(t *testing.T) {
	manifest := strings.Replace(tunedDeployment, "- --quiet=1s", "- --quiet=3s\n                  - --poll=100ms\n                  - --min-wait=2s", 1)
	manifest = strings.Replace(manifest, "--app-drain=5s", "--app-drain=8s", 1)
	args := []string{"plan", "--p99", "450ms", "--eds-lag", "8s", "-f", "-", "-o", "yaml"}
	code, out, errOut := runMainStdin(t, manifest, args...)
	if code != ExitOK || strings.Contains(errOut, "container checkout: preStop") {
		t.Errorf("inputs from the preStop: exit %d, stderr %s: want no change to the preStop", code, errOut)
	}
	manifest = out // with the init container plan adds
	code, _, errOut = runMainStdin(t, manifest, append(args, "--quiet", "2s", "--app-drain", "5s")...)
	if code != ExitOK || !strings.Contains(errOut, "--app-drain 8s → 5s, --quiet 3s → 2s") {
		t.Errorf("flags over the preStop: exit %d, stderr %s", code, errOut)
	}
	// A plan refused for an input read from the preStop says where it came from.
	code, _, errOut = runMainStdin(t, strings.Replace(manifest, "--quiet=3s", "--quiet=150ms", 1), append(args, "--poll", "50ms")...)
	if code != ExitOK {
		t.Errorf("--quiet=150ms in the preStop with --poll 50ms: exit %d, stderr %s", code, errOut)
	}
	code, _, errOut = runMainStdin(t, strings.Replace(manifest, "--quiet=3s", "--quiet=150ms", 1), args...)
	if code != ExitUsage || !strings.Contains(errOut, "--quiet 150ms is shorter than two polls (2 x --poll 100ms)") ||
		!strings.Contains(errOut, "read from Deployment/checkout's preStop: --app-drain=8s --quiet=150ms --poll=100ms --min-wait=2s") {
		t.Errorf("--quiet=150ms in the preStop: exit %d, stderr %s", code, errOut)
	}
	code, _, errOut = runMainStdin(t, strings.Replace(manifest, "--app-drain=8s", "--app-drain=0s", 1), args...)
	if code != ExitUsage || !strings.Contains(errOut, "Deployment/checkout: its preStop's --app-drain 0s") {
		t.Errorf("--app-drain=0s in the preStop: exit %d, stderr %s", code, errOut)
	}
}

// TestReplanKeepsTheInstallContainer: the init container a workload already has keeps its
// image and its other fields unless --image says otherwise.
func TestReplanKeepsTheInstallContainer(t *testing.T) {
	args := []string{"plan", "--p99", "450ms", "--eds-lag", "12s", "-f", "-", "-o", "yaml"}
	_, first, _ := runMainStdin(t, tunedDeployment, args...)
	mirrored := strings.Replace(strings.Replace(first, "image: ghcr.io/meshdrain/meshdrain:v0.1.0", "image: mirror.example.com/meshdrain:v0.1.0", 1), "cpu: 10m", "cpu: 50m", 1)
	code, out, errOut := runMainStdin(t, mirrored, args...)
	if code != ExitOK || out != mirrored {
		t.Errorf("a mirrored image and more CPU: exit %d, stderr %s, output changed: %v", code, errOut, out != mirrored)
	}
	code, out, errOut = runMainStdin(t, mirrored, append(args, "--image", "ghcr.io/meshdrain/meshdrain:v0.1.0")...)
	if code != ExitOK || !strings.Contains(out, "image: ghcr.io/meshdrain/meshdrain:v0.1.0") || !strings.Contains(out, "cpu: 50m") ||
		!strings.Contains(errOut, "init container meshdrain-install: image mirror.example.com/meshdrain:v0.1.0 → ghcr.io/meshdrain/meshdrain:v0.1.0 (its other fields are kept)") {
		t.Errorf("--image: exit %d, stderr %s\n%s", code, errOut, out)
	}
}

// TestReplanOfANativeLinkerdPlanStaysLinkerd: plan's preStop for a native Linkerd sidecar,
// which needs no annotation, names the mesh; a re-plan reads it there.
func TestReplanOfANativeLinkerdPlanStaysLinkerd(t *testing.T) {
	args := []string{"plan", "--p99", "450ms", "--eds-lag", "8s", "--app-drain", "2s", "-f", "-", "--replace-prestop", "-o", "yaml"}
	plain := strings.Replace(linkerdDeployment, "        linkerd.io/inject: enabled\n", "", 1)
	code, first, errOut := runMainStdin(t, plain, append(args, "--mesh", "linkerd", "--lower-grace-period")...)
	if code != ExitOK {
		t.Fatalf("exit %d, stderr %s", code, errOut)
	}
	code, again, errOut := runMainStdin(t, first, args...)
	if code != ExitOK || again != first || !strings.Contains(errOut, "no change") {
		t.Errorf("re-plan without --mesh: exit %d, stderr %s, output changed: %v\n%s", code, errOut, again != first, again)
	}
}

// TestReplanKeepsALongerLinkerdWait: a classic Linkerd proxy's wait before exit, raised by
// hand, is kept like the grace period, and named.
func TestReplanKeepsALongerLinkerdWait(t *testing.T) {
	classic := strings.Replace(linkerdDeployment, "linkerd.io/inject: enabled", "linkerd.io/inject: enabled\n        config.linkerd.io/proxy-enable-native-sidecar: \"false\"\n        config.alpha.linkerd.io/proxy-wait-before-exit-seconds: \"40\"", 1)
	code, out, errOut := runMainStdin(t, classic, "plan", "--p99", "450ms", "--eds-lag", "8s", "--app-drain", "2s", "-f", "-", "--replace-prestop", "-o", "yaml")
	if code != ExitOK || !strings.Contains(out, `proxy-wait-before-exit-seconds: "40"`) || !strings.Contains(errOut, "proxy-wait-before-exit-seconds 40s kept") {
		t.Errorf("exit %d, stderr %s\n%s", code, errOut, out)
	}
}

func decodeDeployment(t *testing.T, text string) appsv1.Deployment {
	t.Helper()
	var d appsv1.Deployment
	if err := sigsyaml.UnmarshalStrict([]byte(text), &d); err != nil {
		t.Fatalf("%v\n%s", err, text)
	}
	if len(d.Spec.Template.Spec.Containers) == 0 || d.Spec.Template.Spec.Containers[0].Lifecycle == nil {
		t.Fatalf("no preStop:\n%s", text)
	}
	return d
}

// indexOf is where sub starts in list, -1 when it is not there.
func indexOf(list, sub []string) int {
	for i := 0; i+len(sub) <= len(list); i++ {
		if slices.Equal(list[i:i+len(sub)], sub) {
			return i
		}
	}
	return -1
}

// stderrChanges are the lines of plan's stderr that list a change to the workload (not what
// it kept or a note on a comment).
func stderrChanges(errOut string) []string {
	var changes []string
	for _, line := range strings.Split(strings.TrimSpace(errOut), "\n") {
		if strings.Contains(line, " kept: ") || strings.Contains(line, "the comment") || strings.Contains(line, "no change") || strings.Contains(line, ", from its ") {
			continue
		}
		changes = append(changes, line)
	}
	return changes
}

// prestopProblemsOf checks a written preStop command (binary first) as prestop --validate
// does, its log file moved to a writable place.
func prestopProblemsOf(t *testing.T, command []string) []error {
	t.Helper()
	args := slices.Clone(command[2:])
	for i, a := range args {
		if strings.HasPrefix(a, "--log-file=") {
			args[i] = "--log-file=" + filepath.Join(t.TempDir(), "prestop.log")
		}
	}
	_, problems := CheckPrestopConfig(context.Background(), args, nil)
	return problems
}
