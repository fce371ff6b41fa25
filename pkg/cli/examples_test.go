package cli

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meshdrain/meshdrain/pkg/cli/clitest"
	"github.com/spf13/cobra"
)

// TestHelpExamples runs every example of meshdrain's --help that can run on this machine, as
// written, and wants exit 0; every other one is named below with the reason (their flags are
// still checked). A new example runs here, or is named.
func TestHelpExamples(t *testing.T) {
	const (
		hook        = "the hook itself: it drains the pod's sidecar through its admin API (127.0.0.1:15000) and logs to the app container's stdout (/proc/1/fd/1)"
		liveSidecar = "reads a live sidecar's admin API (127.0.0.1:15000, the pod's)"
		// hold listens on the pod's @meshdrain-hold: run on a shared machine it would hear
		// every other test's prestop, and it waits for them and for pilot-agent.
		holdHook     = "the proxy container's hook: waits for the pod's prestops on @meshdrain-hold and calls pilot-agent (127.0.0.1:15020)"
		podSpecYAML  = "a line of the pod spec around the command, not a command"
		inPodSidecar = "runs in the pod, against its sidecar's admin API"
	)
	// The examples run in a directory of their own: the fixtures --lag-from's example reads are
	// found from here first.
	lagFixtures, err := filepath.Abs(filepath.Join("..", "operator", "lag", "testdata"))
	if err != nil {
		t.Fatal(err)
	}
	clitest.Runner{
		Program: "meshdrain",
		NewRoot: func() *cobra.Command {
			return NewRootCommand(streams{in: strings.NewReader(""), out: io.Discard, err: io.Discard})
		},
		Main: Main,
		NotOffline: map[string]string{
			// meshdrain
			"meshdrain prestop --grace-period=52s --app-drain=5s --log-file=/proc/1/fd/1": hook,
			// prestop
			`command: ["/meshdrain/meshdrain", "prestop", "--grace-period=52s", "--app-drain=5s", "--log-file=/proc/1/fd/1"]`:                                               hook,
			"meshdrain prestop --dry-run --log-format console --port 8080":                                                                                                  liveSidecar + " until its clients stop",
			"/meshdrain/meshdrain prestop --mesh=linkerd --admin=http://127.0.0.1:4191 --grace-period=52s --app-drain=5s --log-file=/proc/1/fd/1":                           "the hook in a Linkerd pod: reads its proxy on 127.0.0.1:4191 and logs to the app container's stdout",
			"meshdrain prestop --admin http://127.0.0.1:19000 --cluster local_app --http-prefix public_listener --signal TERM --pidfile /var/run/app.pid":                   "drains a live Envoy (127.0.0.1:19000) and signals the app whose pid is in the pod's /var/run/app.pid",
			"meshdrain prestop --exec /app/bin/stop -- --graceful":                                                                                                          "drains a live sidecar, then runs the app image's /app/bin/stop",
			"/meshdrain/meshdrain prestop --mesh=none --port=8080 --ignore-source=$(HOST_IP) --eds-lag-bound=10s --grace-period=52s --app-drain=5s --log-file=/proc/1/fd/1": "the hook in a pod without a sidecar: reads the pod's own kernel on :8080 and logs to the app container's stdout",
			// hold
			"meshdrain hold --grace-period=52s --app-drain=5s --log-file=/proc/1/fd/1":                                     holdHook,
			`command: ["/meshdrain/meshdrain", "hold", "--grace-period=52s", "--app-drain=5s", "--log-file=/proc/1/fd/1"]`: holdHook,
			"meshdrain hold --grace-period 20s --app-drain 2s --port 8080 --drain-url= --log-format console":               holdHook + "; by hand, it waits for a prestop started beside it and an app on :8080",
			"- name: istio-proxy": podSpecYAML,
			"image: auto":         podSpecYAML,
			"- { name: meshdrain, mountPath: /meshdrain, readOnly: true }": podSpecYAML,
			// plan
			"kubectl patch deployment web --type strategic --patch-file patch.yaml":   "kubectl, against a cluster",
			"kubectl logs -l app=web --prefix --timestamps --since=168h > drains.log": "kubectl, against a cluster (the example after it reads pkg/operator/lag's fixture of that shape)",
			// status
			"kubectl exec deploy/web -c web -- /meshdrain/meshdrain status":                                                            inPodSidecar,
			"kubectl exec web-7d9f -c web -- /meshdrain/meshdrain status --port 8080 --watch --interval 500ms":                         inPodSidecar + ", until Ctrl-C",
			"kubectl exec deploy/web -c web -- /meshdrain/meshdrain status --port 8080":                                                inPodSidecar,
			"kubectl port-forward deploy/web 15000:15000 &":                                                                            "kubectl, against a cluster",
			"meshdrain status --admin http://127.0.0.1:15000":                                                                          "reads the pod's sidecar through the port-forward above",
			"meshdrain status --admin http://127.0.0.1:19000 --cluster local_app --http-prefix public_listener -o json":                "reads a live Envoy's admin API (127.0.0.1:19000)",
			"kubectl exec web-7d9f -c web -- /meshdrain/meshdrain status --mesh none --port 8080 --ignore-source '$(HOST_IP)' --watch": "runs in a pod without a sidecar, reading its kernel, until Ctrl-C",
			// check
			"kubectl exec deploy/web -c web -- /meshdrain/meshdrain check --mesh none --port 8080":                      "runs in a pod without a sidecar, against its own kernel and app port",
			"kubectl exec deploy/web -c web -- /meshdrain/meshdrain check --port 8080":                                  inPodSidecar,
			"meshdrain check --grace-period 52s --app-drain 5s --termination-drain-duration 52s":                        liveSidecar,
			"meshdrain check --port 8080 --drain-at end --grace-period 52s --app-drain 5s":                              liveSidecar,
			"meshdrain check --mesh linkerd --port 8080 --grace-period 52s --app-drain 5s --proxy-wait-before-exit 51s": "reads a live Linkerd proxy's admin API (127.0.0.1:4191)",
			"meshdrain check --min-signal completions -o json":                                                          liveSidecar,
			"kubectl get pod web-7d9c5b6f4-x2kq8 -o yaml | meshdrain check --pod-spec -":                                "kubectl, against a cluster (TestCheckPodSpec runs check --pod-spec on injected pods)",
		},
		Prepare: func(t *testing.T, _ clitest.Example, dir string, args []string) []string {
			// What the examples name: the reader's Deployment, and the emptyDir the init
			// container mounts at /meshdrain.
			if err := os.WriteFile(filepath.Join(dir, "deploy.yaml"), []byte(readersDeployment), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.MkdirAll(filepath.Join(dir, "meshdrain"), 0o755); err != nil {
				t.Fatal(err)
			}
			// What --lag-from reads: the fixtures of real output of those shapes.
			for name, fixture := range map[string]string{"drains.log": "kubectl-logs-prefix-timestamps.log", "kube-proxy.metrics": "kube-proxy-1.29.metrics"} {
				data, err := os.ReadFile(filepath.Join(lagFixtures, fixture))
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			return args
		},
	}.Run(t)
}

// readersDeployment is the deploy.yaml of plan's examples: a Deployment as a reader has it
// before meshdrain, with a preStop sleep for plan to replace.
const readersDeployment = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      terminationGracePeriodSeconds: 30
      containers:
      - name: web
        image: web:1
        ports:
        - containerPort: 8080
        lifecycle:
          preStop:
            exec:
              command: ["sleep", "15"]
`
