// Package simcli is meshdrain-sim's command layer: the test world an operator runs on one
// machine (simulate: a rollout of the reference workload under each preStop strategy;
// emulate: an Envoy or Linkerd sidecar look-alike). It is kept out of the meshdrain binary
// that goes into pods; simulate runs that binary as the preStop, as a kubelet would.
package simcli

import (
	"io"
	"slices"

	"github.com/spf13/cobra"

	"github.com/meshdrain/meshdrain/pkg/cli"
	"github.com/meshdrain/meshdrain/pkg/mesh"
	"github.com/meshdrain/meshdrain/pkg/operator/output"
	"github.com/meshdrain/meshdrain/pkg/sim/envoysim"
	"github.com/meshdrain/meshdrain/pkg/sim/linkerdsim"
	"github.com/meshdrain/meshdrain/pkg/sim/podsim"
	"github.com/meshdrain/meshdrain/pkg/sim/requestloop"
)

// Exit codes are meshdrain's (cli).
const (
	ExitOK       = cli.ExitOK
	ExitFailure  = cli.ExitFailure
	ExitUsage    = cli.ExitUsage
	ExitSignaled = cli.ExitSignaled
)

// ExitError is meshdrain's (cli.ExitError).
type ExitError = cli.ExitError

// streams are the process's standard streams, injected so commands are testable.
type streams struct {
	in       io.Reader
	out, err io.Writer
}

func usageError(format string, args ...any) error { return cli.UsageError(format, args...) }

// Main runs meshdrain-sim with args and returns the process exit code.
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	return cli.Execute(NewRootCommand(streams{in: stdin, out: stdout, err: stderr}), args, stderr)
}

// NewRootCommand builds the meshdrain-sim command tree.
func NewRootCommand(s streams) *cobra.Command {
	root := cli.NewRoot(s.in, s.out, s.err, &cobra.Command{
		Use:   "meshdrain-sim",
		Short: "meshdrain's test world: a simulated pod termination and sidecar emulators, on this machine",
		Long: `meshdrain-sim replays a Kubernetes rollout on loopback (simulate) and emulates an Istio or
Linkerd sidecar's admin API and inbound proxy (emulate), so that the difference between a
guessed preStop sleep and meshdrain can be seen, and meshdrain tested, without a cluster. The
preStop it runs is the real meshdrain binary (--meshdrain-bin, default: beside this one).`,
		Example: `  # The user's rollout under each preStop strategy, side by side:
  meshdrain-sim simulate

  # An Istio sidecar to point meshdrain status at:
  meshdrain-sim emulate --inbound 8080=127.0.0.1:8080`,
	})
	root.AddCommand(newSimulateCommand(s), newEmulateCommand(s), newLoopCommand(s))
	cli.RegisterEnumCompletions(root, enumFlags())
	return root
}

// enumFlags are meshdrain-sim's enum flags (cli.RegisterEnumCompletions).
func enumFlags() map[string]map[string][]string {
	return map[string]map[string][]string{
		"simulate": {
			"output":       output.Formats,
			"traffic":      trafficNames(),
			"strategy":     {"none", "sleep:5s", "sleep:15s", "meshdrain"},
			"client-conns": {string(podsim.ConnsPool), string(podsim.ConnsPerRequest), string(podsim.ConnsPersistentSession), string(podsim.ConnsNoSidecar)},
			"sidecar":      {"istio-default", "recommended", "recommended-native", "regime-a", "linkerd-default", noSidecar, string(podsim.SidecarClassic), string(podsim.SidecarExitOnZero), string(podsim.SidecarNative)},
			"mesh":         append(mesh.Names(mesh.Istio, mesh.Linkerd), string(podsim.MeshNone)),
			"app-shutdown": {string(podsim.AppGraceful), string(podsim.AppImmediate)},
		},
		"emulate": {
			"mesh":           mesh.Names(mesh.Istio, mesh.Linkerd),
			"injection":      {string(linkerdsim.InjectionNative), string(linkerdsim.InjectionClassic)},
			"profile":        {string(envoysim.ProfileIstio), string(envoysim.ProfileIstioLegacy), string(envoysim.ProfileIstio116), string(envoysim.ProfileEnvoy)},
			"inclusion":      {string(envoysim.InclusionAll), string(envoysim.InclusionIstioDefault)},
			"agent":          {string(envoysim.AgentClassic), string(envoysim.AgentNative), string(envoysim.AgentExitOnZero), string(envoysim.AgentNone)},
			"drain-strategy": {envoysim.DrainImmediate, envoysim.DrainGradual},
			"log-format":     {"json", "console"},
		},
		"loop": {
			"mode":   {string(requestloop.KeepAlive), string(requestloop.NewConnection)},
			"output": {output.Text, output.JSON},
		},
	}
}

func trafficNames() []string {
	var names []string
	for _, t := range append(podsim.Traffics(), podsim.MeshlessTraffics()...) {
		if !slices.Contains(names, t.Name) {
			names = append(names, t.Name)
		}
	}
	return names
}
