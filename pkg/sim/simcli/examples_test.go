package simcli

import (
	"io"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/meshdrain/meshdrain/pkg/cli/clitest"
)

// buildMeshdrain builds the meshdrain binary that simulate runs as the preStop, into dir.
func buildMeshdrain(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "meshdrain")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/meshdrain/meshdrain/cmd/meshdrain").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// shortSimulation is what the simulate examples run with, where they do not say otherwise:
// every row the example asks for, in a short deletion (a grace period of 10 s or what plan
// needs, 5 clients that stop within 1 s) at a twentieth of pod time, so that each example
// takes a second or two. The example's own flags are kept: what it asks for is what runs.
var shortSimulation = [][2]string{
	{"--warmup", "1s"}, {"--qps", "20"}, {"--clients", "5"}, {"--eds-lag", "1s"}, {"--grace-period", "10s"}, {"--time-scale", "0.05"},
}

// TestHelpExamples runs every example of meshdrain-sim's --help that can run on this machine,
// and wants exit 0; every other one is named below with the reason (their flags are still
// checked). A new example runs here, or is named.
func TestHelpExamples(t *testing.T) {
	const emulator = "an emulator: it serves until stopped (Ctrl-C), on fixed loopback ports"
	const cluster = "a request loop against a Service of a cluster, during its rollout: no such address here"
	var meshdrain string // simulate's preStop: built here, before the examples change directory
	if !testing.Short() {
		meshdrain = buildMeshdrain(t, t.TempDir())
	}
	clitest.Runner{
		Program: "meshdrain-sim",
		NewRoot: func() *cobra.Command {
			return NewRootCommand(streams{in: strings.NewReader(""), out: io.Discard, err: io.Discard})
		},
		Main: Main,
		NotOffline: map[string]string{
			// meshdrain-sim
			"meshdrain-sim emulate --inbound 8080=127.0.0.1:8080": emulator,
			// emulate
			"meshdrain-sim emulate --inbound '8080=127.0.0.1:15006>127.0.0.1:8080'":                                                     emulator,
			"meshdrain-sim emulate --inbound 8080=127.0.0.1:8080 --profile istio-legacy --inclusion istio-default --agent exit-on-zero": emulator,
			"meshdrain-sim emulate --inbound 8080=127.0.0.1:8080 --extra-clusters 5000":                                                 emulator,
			"meshdrain-sim emulate --mesh linkerd --inbound '8080=127.0.0.1:14143>127.0.0.1:8080' --probe-path /healthz":                emulator,
			// loop: TestLoopCommand runs it against loopback servers
			"meshdrain-sim loop https://web.example.com/healthz --duration 3m":                                  cluster,
			"meshdrain-sim loop http://web.shop.svc/healthz --mode new-connection --workers 4 --interval 100ms": cluster,
		},
		Prepare: func(t *testing.T, ex clitest.Example, _ string, args []string) []string {
			if len(args) == 0 || args[0] != "simulate" {
				return args
			}
			if testing.Short() {
				t.Skip("runs the simulator with a freshly built meshdrain, a few seconds an example")
			}
			for _, flag := range shortSimulation {
				// The CI gate's example asks for the default time scale: below it late
				// timers lose requests that a real pod would not.
				gate := flag[0] == "--time-scale" && slices.Contains(args, "--max-failures")
				if !gate && !slices.Contains(args, flag[0]) {
					args = append(args, flag[0], flag[1])
				}
			}
			return append(args, "--meshdrain-bin", meshdrain)
		},
		Check: func(t *testing.T, ex clitest.Example, code int, stdout, stderr string) {
			// A gate that fails where this machine could not keep pod time says so
			// (WARNING); its verdict then says nothing about meshdrain.
			if code == ExitFailure && slices.Contains(ex.Args, "--max-failures") && strings.Contains(stdout, "WARNING") {
				t.Logf("%q: exit 1 on a machine too busy to keep pod time:\n%s", ex.Line, stdout)
				return
			}
			if code != ExitOK {
				t.Errorf("%q: exit %d, want 0 (if it cannot run here, name it in NotOffline with the reason)\nstdout:\n%s\nstderr:\n%s", ex.Line, code, stdout, stderr)
			}
		},
	}.Run(t)
}
