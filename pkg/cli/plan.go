package cli

import (
	"fmt"
	"strings"

	"github.com/meshdrain/meshdrain/pkg/plan"
	"github.com/spf13/cobra"
)

// planOptions are `meshdrain plan`'s inputs: the workload facts of plan.Input, plus the
// output format and the names the YAML patch needs.
type planOptions struct {
	in      plan.Input
	sidecar string
	output  string
	patch   plan.PatchOptions
}

// defaultImage is the meshdrain image the YAML patch's init container uses unless told
// otherwise: the one built from this repository's Dockerfile.
const defaultImage = "ghcr.io/meshdrain/meshdrain:latest"

func defaultPlanOptions() planOptions {
	return planOptions{
		in: plan.Input{
			Quiet:         plan.DefaultQuiet,
			Poll:          plan.DefaultPoll,
			DrainDuration: plan.DefaultDrainDuration,
		},
		sidecar: string(plan.Classic),
		output:  "text",
		patch:   plan.PatchOptions{Container: "app", Image: defaultImage, Dir: "/meshdrain"},
	}
}

// newPlanCommand builds `meshdrain plan`: the answer to "what should each timeout be, and
// who waits for whom?", with the numbers that `meshdrain simulate` then replays.
func newPlanCommand(s streams) *cobra.Command {
	opts := defaultPlanOptions()
	cmd := &cobra.Command{
		Use:   "plan --p99 D --eds-lag D [flags]",
		Short: "Derive terminationGracePeriodSeconds, meshdrain's flags and the sidecar settings, with the timeline",
		Long: `plan prints the termination timeline of a pod from its deletion (t0) to its last in-flight
request: who waits for whom and each bound. It recommends terminationGracePeriodSeconds, the
meshdrain prestop flags, and the sidecar setting that keeps Envoy alive until the app has
finished: terminationDrainDuration for a classic Istio sidecar, EXIT_ON_ZERO_ACTIVE_CONNECTIONS
with MINIMUM_DRAIN_DURATION, or nothing for native sidecars. Every number comes with its
arithmetic.

--eds-lag is the worst time you expect until the last client stops sending to a deleted pod
(most clients learn within 1-3s; a busy istiod makes a few much later). It only sizes the
deadline: meshdrain returns as soon as the clients actually stop.

-o yaml prints a strategic-merge patch for the Deployment instead.`,
		Example: `  # the user's case: Tomcat, P99 450ms, classic Istio 1.19 sidecar, grace period 30s today
  meshdrain plan --p99 450ms --eds-lag 8s --app-drain 2s --sidecar classic --grace-period 30s

  # native sidecars (Kubernetes >= 1.29, Istio >= 1.21)
  meshdrain plan --p99 450ms --eds-lag 8s --sidecar native

  # a patch to apply to the Deployment
  meshdrain plan --p99 450ms --eds-lag 8s -o yaml --container web > meshdrain-patch.yaml
  kubectl patch deployment web --type strategic --patch-file meshdrain-patch.yaml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			for _, name := range []string{"p99", "eds-lag"} {
				if !cmd.Flags().Changed(name) {
					return usageError("plan needs --%s", name)
				}
			}
			opts.in.Sidecar = plan.Sidecar(opts.sidecar)
			if opts.output != "text" && opts.output != "yaml" {
				return usageError("-o %q: want text or yaml", opts.output)
			}
			return runPlan(s, opts)
		},
	}
	f := cmd.Flags()
	f.DurationVar(&opts.in.P99, "p99", 0, "the app's 99th-percentile request latency (required)")
	f.DurationVar(&opts.in.EDSLag, "eds-lag", 0, "worst expected time from pod deletion until the last client stops sending to it (required)")
	f.DurationVar(&opts.in.Quiet, "quiet", opts.in.Quiet, "meshdrain's quiet window: no new inbound request for this long = clients stopped")
	f.DurationVar(&opts.in.Poll, "poll", opts.in.Poll, "meshdrain's stats polling interval")
	f.DurationVar(&opts.in.AppDrain, "app-drain", 0, "time the app needs after SIGTERM to finish in-flight work (default 4 × p99, rounded up to a second, at least 1s)")
	f.StringVar(&opts.sidecar, "sidecar", opts.sidecar, "how the sidecar runs: "+sidecarNames())
	f.DurationVar(&opts.in.CurrentGracePeriod, "grace-period", 0, "the pod's terminationGracePeriodSeconds today, to compare with the plan")
	f.DurationVar(&opts.in.DrainDuration, "drain-duration", opts.in.DrainDuration, "Istio proxyConfig drainDuration in force (how long Envoy keeps accepting once drained)")
	f.StringVarP(&opts.output, "output", "o", opts.output, "output format: text or yaml (a strategic-merge patch for the Deployment)")
	f.StringVar(&opts.patch.Container, "container", opts.patch.Container, "with -o yaml: the app container's name")
	f.StringVar(&opts.patch.Image, "image", opts.patch.Image, "with -o yaml: the meshdrain image for the install init container")
	f.StringVar(&opts.patch.Dir, "dir", opts.patch.Dir, "with -o yaml: where the shared emptyDir is mounted")

	_ = cmd.RegisterFlagCompletionFunc("sidecar", cobra.FixedCompletions(sidecarCompletions(), cobra.ShellCompDirectiveNoFileComp))
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{"text", "yaml"}, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

// runPlan derives the plan and prints it in the requested format.
func runPlan(s streams, opts planOptions) error {
	p, err := plan.Recommend(opts.in)
	if err != nil {
		return usageError("plan: %w", err)
	}
	if opts.output == "yaml" {
		err = plan.WriteYAML(s.out, p, opts.patch)
	} else {
		err = plan.WriteText(s.out, p)
	}
	if err != nil {
		return &ExitError{Code: ExitFailure, Err: fmt.Errorf("plan: %w", err)}
	}
	return nil
}

func sidecarNames() string {
	return strings.Join(sidecarCompletions(), "|")
}

func sidecarCompletions() []string {
	var names []string
	for _, sc := range plan.Sidecars {
		names = append(names, string(sc))
	}
	return names
}
