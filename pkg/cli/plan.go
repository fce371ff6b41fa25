package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/meshdrain/meshdrain/pkg/hook/drain"
	"github.com/meshdrain/meshdrain/pkg/mesh"
	"github.com/meshdrain/meshdrain/pkg/operator/lag"
	"github.com/meshdrain/meshdrain/pkg/operator/output"
	"github.com/meshdrain/meshdrain/pkg/operator/plan"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// planOptions are `meshdrain plan`'s inputs: the workload facts of plan.Input, plus the
// output format, the workload file and the names the YAML needs.
type planOptions struct {
	in     plan.Input
	edsLag string
	// lagFrom are the --lag-from sources (paths, or - for stdin) and risk the --risk the
	// fitted distribution is used at.
	lagFrom  []string
	risk     float64
	mesh     mesh.Mesh
	sidecar  string
	output   string
	file     string
	workload string
	asPatch  bool
	patch    plan.PatchOptions
	// lowerGracePeriod lets the plan lower the grace period in force (and the sidecar's
	// bounds that follow it) to what suffices; without it they are kept where longer.
	lowerGracePeriod bool
	// fromPrestop are the inputs read from the workload's preStop (--quiet=3s, ...), to name
	// when the plan they give is refused.
	fromPrestop []string
	// choices are what plan chose from the manifest where it was not plain (the ports it
	// watches, the sources it leaves out, the app container), a line each for stderr.
	choices []string
}

// The output formats every command that prints data takes (pkg/operator/output).
const (
	outputText = output.Text
	outputJSON = output.JSON
	outputYAML = output.YAML
)

var outputFormats = output.Formats

func defaultPlanOptions() planOptions {
	return planOptions{
		in: plan.Input{
			Quiet:             plan.DefaultQuiet,
			Poll:              plan.DefaultPoll,
			DrainDuration:     plan.DefaultDrainDuration,
			DeferSidecarDrain: true,
		},
		mesh:    mesh.Istio,
		sidecar: string(plan.Classic),
		output:  outputText,
		risk:    plan.DefaultRisk,
		patch:   plan.PatchOptions{Image: plan.DefaultImage, Dir: "/meshdrain"},
	}
}

// newPlanCommand builds `meshdrain plan`: the answer to "what should each timeout be, and
// who waits for whom?", with the numbers that `meshdrain simulate` then replays, and the
// change to the user's own workload.
func newPlanCommand(s streams) *cobra.Command {
	opts := defaultPlanOptions()
	cmd := &cobra.Command{
		Use:     "plan --p99 D (--eds-lag D|p50=D,p99=D [--clients N] | --lag-from SOURCE... [--risk P]) [-f FILE] [flags]",
		Short:   "Derive terminationGracePeriodSeconds, meshdrain's flags and the sidecar settings, and apply them to a workload",
		Long:    planLong,
		Example: planExample,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			changed := func(name string) bool { return cmd.Flags().Changed(name) }
			if err := opts.complete(changed); err != nil {
				return err
			}
			return runPlan(s, opts, changed)
		},
	}
	opts.addFlags(cmd.Flags())
	_ = cmd.MarkFlagFilename("filename", "yaml", "yml", "json")
	return cmd
}

const planLong = `plan prints the termination timeline of a pod from its deletion (t0) to its last in-flight
request: who waits for whom and each bound. It recommends terminationGracePeriodSeconds, the
meshdrain prestop flags, and the sidecar setting that keeps Envoy alive until the app has
finished: nothing for native sidecars (Kubernetes >= 1.29, Istio >= 1.21; Istio >= 1.27
injects them by default on kubelets >= 1.33), terminationDrainDuration for a classic Istio
sidecar, or EXIT_ON_ZERO_ACTIVE_CONNECTIONS with MINIMUM_DRAIN_DURATION. Every number comes
with its arithmetic.

For Istio it writes drain regime (b) by default (docs/decision-rule.md): an istio-proxy
container in the pod spec (image: auto, the meshdrain volume read-only) whose preStop is
meshdrain hold, which Istio's injector merges into the proxy it injects, in both sidecar
modes; it keeps Istio from draining until prestop has decided (prestop --drain-at=end), so no
client is told to close before then and prestop sees each one let go. A classic sidecar's
terminationDrainDuration then only bounds the fallback (--app-drain + 1s).
--defer-sidecar-drain=false keeps regime (a), Istio's drain at the deletion, where a policy
forbids overriding istio-proxy: Connection: close on every response then erases the
per-client evidence in dense shapes. An istio-proxy the workload already overrides is merged
into (its other fields kept); a preStop of its own there needs --replace-prestop.

--mesh linkerd plans for a Linkerd proxy instead: it has no drain call and stops accepting
in both directions at SIGTERM, so what matters is when that SIGTERM comes. A native sidecar
(--sidecar native, Linkerd's default since 2.20) gets it after the app has exited and needs
no annotation; a classic proxy (--sidecar classic) needs
config.alpha.linkerd.io/proxy-wait-before-exit-seconds to cover meshdrain's deadline and the
app's drain, and config.linkerd.io/proxy-enable-native-sidecar: "false" so that Linkerd >=
2.20 keeps it classic (its injector refuses the sleep with a native sidecar). The preStop
then reads the proxy on its admin port 4191 (--mesh=linkerd --admin=http://127.0.0.1:4191).

--mesh none plans for a pod without a sidecar, where the kernel is the signal: the preStop
runs prestop --mesh=none on the app's own ports (--port, or with -f the app container's
containerPorts) and leaves out the kubelet's probes, which come from the node:
--ignore-source=$(HOST_IP), with HOST_IP from the downward API (status.hostIP) in the app
container's env. A readiness probe (tcpSocket on the first port) is added where the app has
none. The timeline says what the app must do at SIGTERM, which only comes once the clients
have stopped: Connection: close on kept-alive connections, close idle ones, GOAWAY for
HTTP/2 and gRPC, finish in flight within --app-drain. --mesh ambient is the same for Istio
ambient pods (no sidecar; ztunnel routes per connection and drains nothing), with the
probes' source 169.254.7.127 left out too. --eds-lag is then how late the slowest node's
kube-proxy, ingress controller or ztunnel learns of the removal (docs/meshless.md). Where the
app serves Prometheus metrics on the pod's loopback, --app-metrics URL and --app-requests
COUNTER{LABEL!~"..."} have the preStop read its request counter beside the kernel.

--eds-lag is how late clients stop sending to a deleted pod. Either the last client's lag
(what meshdrain's own last_arrival_ms showed over past drains, with room to spare), or one
client's distribution p50=D,p99=D (istiod's pilot_proxy_convergence_time quantiles) with
--clients N, the number of client proxies sending to the workload: the last of N clients is
later than one client's p99, and the plan sizes the deadline so that it covers the last
client in 99 deletions out of 100. It only sizes the deadline: meshdrain returns as soon as
the clients actually stop.

--lag-from SOURCE (repeatable; a file or - for stdin) learns the lag instead of --eds-lag: from
meshdrain's own final events in any log export (kubectl logs with or without --prefix and
--timestamps, Loki, CloudWatch, Elasticsearch), or a Prometheus histogram of
kubeproxy_network_programming_duration_seconds or pilot_proxy_convergence_time (a /metrics
scrape, or the HTTP API's JSON answer for the _bucket series); each source's kind is read from
its content, and mixed sources pool. plan fits one client's lag distribution, sets --eds-lag to
the lag one client exceeds with probability --risk P (default 0.001), writes the distribution
and P into the hook (--lag-dist, --risk; --min-wait 0 unless given: the hook's risk figure
guards instead), and with -f the annotation meshdrain.io/lag-from that says what it was learnt
from. Too little evidence for the quantile needed is warned about; the settings are written all
the same. A re-plan without --lag-from keeps the hook's --lag-dist, --risk and the annotation.

-f FILE (or - for stdin) reads your Deployment, StatefulSet or DaemonSet (multi-document YAML
or JSON): its terminationGracePeriodSeconds, containers, ports, annotations and preStop. The
plan then merges into its proxy.istio.io/config and statsInclusionPrefixes (every other key
is kept), takes the mesh and the sidecar kind from its annotations unless --mesh and
--sidecar are given (linkerd.io/inject or config.linkerd.io/... mean Linkerd; injection
asked for on the namespace does not show in the workload: pass --mesh linkerd). A preStop
that only sleeps (sleep N run by exec, directly or by sh -c, or the sleep action) is
replaced, and plan says so; any other hook not meshdrain's needs --replace-prestop.

A re-plan keeps what you set. In a preStop that already runs meshdrain, plan owns the flags
that carry its numbers (--grace-period, --app-drain, --quiet, --poll, --min-wait,
--client-period, --rps-per-client, --eds-lag-bound, --deadline, and --mesh in a Linkerd plan); every other flag
(--drain-at, --port, --client-evidence, --strict-active, your own --log-file or --admin, ...)
stays as written, after plan's, and must pass prestop's own checks or plan refuses to write
it. --app-drain, --quiet, --poll, --min-wait, --client-period and --rps-per-client are read
from that preStop unless given. A grace period in force (the manifest's, or --grace-period) longer than what
suffices is kept, with the sidecar bounds that follow it (terminationDrainDuration,
MINIMUM_DRAIN_DURATION, proxy-wait-before-exit-seconds), and plan says what would suffice;
--lower-grace-period sets that instead. A comment on a line plan changes is kept or moved.
Every change, each value kept and each comment moved is said on stderr, whatever -o is; a
re-plan of plan's own output changes nothing. A duration flag given as 0 where 0 would mean
its default is refused, and a grace period over 10 minutes is warned about.

-o text (default) the timeline, settings, arithmetic and, with -f, the changes;
-o json the same as one object; -o yaml with -f the changed manifests (only the planned lines change), with
--patch a strategic-merge patch for kubectl patch --type strategic; without -f a patch for
the container named by --container.`

const planExample = `  # native sidecars (Kubernetes >= 1.29, Istio >= 1.21), clients' lag from istiod's metrics
  meshdrain plan --p99 450ms --eds-lag p50=1.5s,p99=12s --clients 50 --sidecar native

  # the user's case: classic Istio 1.19 sidecar, grace period 30s today
  meshdrain plan --p99 450ms --eds-lag p50=1.5s,p99=12s --clients 50 --app-drain 5s --sidecar classic --grace-period 30

  # the same without overriding istio-proxy (regime a): Istio drains at the deletion
  meshdrain plan --p99 450ms --eds-lag 12s --defer-sidecar-drain=false

  # Linkerd, native sidecar (its default since 2.20): no annotation, only the grace period
  meshdrain plan --mesh linkerd --p99 450ms --eds-lag p50=1.5s,p99=12s --clients 50 --app-drain 5s

  # Linkerd, classic proxy: proxy-wait-before-exit-seconds covers the app's exit
  meshdrain plan --mesh linkerd --sidecar classic --p99 450ms --eds-lag 8s

  # a pod without a sidecar (kube-proxy, ingress-nginx), and one in Istio ambient mode
  meshdrain plan --mesh none --port 8080 --p99 450ms --eds-lag 5s --app-drain 5s
  meshdrain plan --mesh ambient --port 8080 --p99 450ms --eds-lag p50=1.5s,p99=12s --clients 50

  # learn the lag from past drains and kube-proxy's histogram, at a risk of 1 in 1,000 per drain
  kubectl logs -l app=web --prefix --timestamps --since=168h > drains.log
  meshdrain plan --mesh none --port 8080 --p99 450ms --lag-from drains.log --lag-from kube-proxy.metrics --risk 1e-3

  # change your own Deployment (again: what you set there is kept), or get a patch for it;
  # plan reads the mesh from the manifest, and asks for --mesh where it names none
  meshdrain plan --mesh none --p99 450ms --eds-lag 5s -f deploy.yaml -o yaml > deploy.meshdrain.yaml
  meshdrain plan --mesh istio --p99 450ms --eds-lag 12s -f deploy.yaml -o yaml > deploy.meshdrain.yaml
  meshdrain plan --mesh istio --p99 450ms --eds-lag 12s -f deploy.yaml -o yaml --lower-grace-period > deploy.meshdrain.yaml
  meshdrain plan --mesh istio --p99 450ms --eds-lag 12s -f deploy.yaml -o yaml --patch > patch.yaml
  kubectl patch deployment web --type strategic --patch-file patch.yaml`

// complete checks the flags that go together and reads --eds-lag, before any work.
func (opts *planOptions) complete(changed func(string) bool) error {
	if !changed("p99") {
		return usageError("plan needs --p99")
	}
	if err := opts.completeLag(changed); err != nil {
		return err
	}
	if !slices.Contains(outputFormats, opts.output) {
		return usageError("-o %q: want %s", opts.output, strings.Join(outputFormats, ", "))
	}
	if opts.asPatch && (opts.file == "" || opts.output != outputYAML) {
		return usageError("--patch goes with -f FILE -o yaml (without -f, -o yaml is already a patch)")
	}
	if err := opts.refuseZeros(changed); err != nil {
		return err
	}
	for _, name := range []string{"workload", "replace-prestop"} {
		if changed(name) && opts.file == "" {
			return usageError("--%s needs -f FILE", name)
		}
	}
	if opts.file == "" && opts.output == outputYAML && opts.patch.Container == "" {
		return usageError("-o yaml without -f needs --container NAME, the app container's name: a patch with a name your workload does not have adds a container with no image (or pass -f FILE)")
	}
	return nil
}

// completeLag reads where the lag comes from: --eds-lag as stated, or --lag-from as learnt.
// Both together are refused rather than one silently winning: they are two answers to the
// same question, and the plan would write only one of them.
func (opts *planOptions) completeLag(changed func(string) bool) error {
	if len(opts.lagFrom) == 0 {
		if !changed("eds-lag") {
			return usageError("plan needs --eds-lag (the lag as you know it) or --lag-from SOURCE (the lag learnt from past drains or a histogram)")
		}
		if changed("risk") {
			return usageError("--risk goes with --lag-from: it is the risk the learnt distribution is used at")
		}
		lag, err := plan.ParseDist(opts.edsLag)
		if err != nil {
			return usageError("--eds-lag: %v", err)
		}
		opts.in.EDSLag = lag.P99
		if !lag.Constant() {
			opts.in.EDSLagMedian = lag.Median
		}
		return nil
	}
	if changed("eds-lag") {
		return usageError("--lag-from and --eds-lag both give the lag: --lag-from learns it from the evidence, --eds-lag states it; give one of them")
	}
	if changed("clients") {
		return usageError("--clients goes with --eds-lag p50=D,p99=D, not with --lag-from: with a lag distribution the hook counts the clients it sees")
	}
	if err := plan.CheckRisk(opts.risk); err != nil {
		return usageError("%v", err)
	}
	stdin := 0
	for _, src := range opts.lagFrom {
		if src == "-" {
			stdin++
		}
	}
	if stdin > 1 || (stdin == 1 && opts.file == "-") {
		return usageError("--lag-from - and -f - would both read stdin: give one of them a file")
	}
	if !changed("min-wait") {
		// The hook's risk figure guards its stop; a --min-wait given (or in the workload's
		// preStop) stays a floor.
		opts.in.MinWait = 0
	}
	return nil
}

// readLagFrom reads the --lag-from sources and fits them at --risk.
func readLagFrom(stdin io.Reader, opts planOptions) (*plan.LagFrom, error) {
	var sources []lag.Source
	for _, name := range opts.lagFrom {
		var r io.Reader = stdin
		if name != "-" {
			f, err := os.Open(name)
			if err != nil {
				return nil, usageError("--lag-from: %v", err)
			}
			defer f.Close()
			r = f
		}
		read, err := lag.ReadSource(name, r)
		if err != nil {
			return nil, usageError("--lag-from %v", err)
		}
		sources = append(sources, read...)
	}
	l, err := plan.NewLagFrom(sources, opts.risk)
	if err != nil {
		return nil, usageError("plan: %v", err)
	}
	return l, nil
}

// zeroFlag is a duration flag whose zero value would mean "the default", its value, and what
// to do instead of giving 0.
type zeroFlag struct {
	flag    string
	v       time.Duration
	instead string
}

// zeroMeansDefault are plan's duration flags whose zero value would mean "the default": a 0
// given by hand is refused, naming the default, rather than silently becoming it.
func (opts *planOptions) zeroMeansDefault() []zeroFlag {
	return []zeroFlag{
		{"app-drain", opts.in.AppDrain, fmt.Sprintf("the app gets no time to finish the requests in flight at SIGTERM (each takes up to --p99 %s): give the time it needs, or leave the flag out for 4 × p99 rounded up to a second (%s)",
			plan.FormatDuration(opts.in.P99), plan.FormatDuration(plan.DefaultAppDrain(opts.in.P99)))},
		{"quiet", opts.in.Quiet, fmt.Sprintf("the quiet window must be positive, at least two polls; leave the flag out for prestop's default %s", plan.FormatDuration(plan.DefaultQuiet))},
		{"poll", opts.in.Poll, fmt.Sprintf("the polling interval must be positive, at least %s; leave the flag out for prestop's default %s", plan.FormatDuration(drain.MinPoll), plan.FormatDuration(plan.DefaultPoll))},
		{"min-wait", opts.in.MinWait, fmt.Sprintf("plan writes no preStop without a minimum wait (a client with nothing to send yet may still be on its way); leave the flag out for prestop's default %s, or give a shorter one", plan.FormatDuration(drain.DefaultMinWait))},
		{"drain-duration", opts.in.DrainDuration, fmt.Sprintf("give the drainDuration in force, or leave the flag out for Istio's default %s (with -f: the pod's proxy.istio.io/config)", plan.FormatDuration(plan.DefaultDrainDuration))},
	}
}

// refuseZeros refuses a duration flag given as 0 where 0 would silently become its default.
func (opts *planOptions) refuseZeros(changed func(string) bool) error {
	for _, z := range opts.zeroMeansDefault() {
		if changed(z.flag) && z.v == 0 && !(z.flag == "min-wait" && len(opts.lagFrom) > 0) {
			return usageError("--%s 0s: %s", z.flag, z.instead)
		}
	}
	return nil
}

// addFlags registers plan's flags on f.
func (opts *planOptions) addFlags(f *pflag.FlagSet) {
	f.DurationVar(&opts.in.P99, "p99", 0, "the app's 99th-percentile request latency (required)")
	f.StringVar(&opts.edsLag, "eds-lag", "", "how late clients stop sending after the pod's deletion (required): the last client's lag, or one client's p50=D,p99=D with --clients")
	f.StringArrayVar(&opts.lagFrom, "lag-from", nil, "learn the lag instead of --eds-lag (repeatable): a file or - holding meshdrain's final events (any log export) or a Prometheus histogram of "+
		"kubeproxy_network_programming_duration_seconds or pilot_proxy_convergence_time (a scrape, or the HTTP API's JSON answer)")
	f.Float64Var(&opts.risk, "risk", opts.risk, "with --lag-from: the probability accepted that a drain stops before its last client has learnt (0 < P <= 0.5); --eds-lag becomes the fitted lag one client exceeds with probability P")
	f.IntVar(&opts.in.Clients, "clients", 0, "with --eds-lag p50=D,p99=D: the number of client proxies sending to the workload")
	f.DurationVar(&opts.in.Quiet, "quiet", opts.in.Quiet, "meshdrain's quiet window: no new inbound request for this long = clients stopped (with -f: the preStop's --quiet)")
	f.DurationVar(&opts.in.Poll, "poll", opts.in.Poll, "meshdrain's stats polling interval (with -f: the preStop's --poll)")
	f.DurationVar(&opts.in.MinWait, "min-wait", drain.DefaultMinWait, "meshdrain's --min-wait: the hook never returns earlier (written into the preStop when not the default; with -f: the preStop's --min-wait)")
	f.Float64Var(&opts.in.RPSPerClient, "rps-per-client", 0, "requests a second one client proxy sends to one pod, when known: a sparse client pauses longer, so --quiet becomes at least −ln(1e-4)/rate (9.2 of its mean gaps); written into the preStop too, where a client that sent without showing a pool is judged by that silence of its own")
	f.DurationVar(&opts.in.FallbackWait, "fallback-wait", 0, "meshdrain's --fallback-wait, its fixed wait where it can see nothing (a configuration mistake); default: the preStop sleep plan replaces, else prestop's 5s (with -f: the preStop's --fallback-wait)")
	f.DurationVar(&opts.in.ClientPeriod, "client-period", 0, "when clients send on a schedule: the time between two of one client's requests or bursts (--quiet becomes at least this + --poll; with -f: the preStop's --client-period)")
	f.DurationVar(&opts.in.AppDrain, "app-drain", 0, "time the app needs after SIGTERM to finish in-flight work (default 4 × p99, rounded up to a second, at least 1s; with -f: the preStop's --app-drain; 0 is refused)")
	f.StringVar((*string)(&opts.mesh), "mesh", string(opts.mesh), "the service mesh: "+meshNames()+"; none and ambient are pods without a sidecar, "+
		"where the kernel is the signal (with -f: from the pod's annotations, an ambient label or the preStop's --mesh=none, unless given)")
	f.StringVar(&opts.in.AppMetrics, "app-metrics", "", "--mesh none or ambient: the app's own Prometheus metrics on the pod's loopback (e.g. http://127.0.0.1:9090/metrics), which the preStop reads beside the kernel (prestop --app-metrics; docs/meshless.md)")
	f.StringVar(&opts.in.AppRequests, "app-requests", "", "with --app-metrics: the app's request counter, with label matchers that leave the probes' and the metrics' own paths out (default http_requests_total), e.g. 'http_requests_total{path!~\"/metrics|/healthz\"}'")
	f.IntSliceVar(&opts.in.Ports, "port", nil, "--mesh none or ambient: the app's own listening ports, which the preStop watches (repeatable; with -f: the preStop's --port, else the app container's TCP containerPorts)")
	f.StringVar(&opts.sidecar, "sidecar", opts.sidecar, "how the sidecar runs: "+sidecarNames()+" (with -f: from the pod's annotations unless given; classic is also safe with native Istio sidecars, which ignore terminationDrainDuration; Linkerd: native (default) or classic)")
	secondsVar(f, &opts.in.CurrentGracePeriod, "grace-period", 0, "the pod's terminationGracePeriodSeconds today (with -f: read from the manifest): kept where longer than what suffices, unless --lower-grace-period")
	f.BoolVar(&opts.lowerGracePeriod, "lower-grace-period", false, "set the grace period, and the sidecar bounds that follow it (terminationDrainDuration, MINIMUM_DRAIN_DURATION, proxy-wait-before-exit-seconds), to what suffices even where the pod's own are longer: without it plan keeps them and says what would suffice")
	f.DurationVar(&opts.in.DrainDuration, "drain-duration", opts.in.DrainDuration, "Istio only: proxyConfig drainDuration in force (how long Envoy keeps accepting once drained; with -f: read from proxy.istio.io/config)")
	f.BoolVar(&opts.in.DeferSidecarDrain, "defer-sidecar-drain", opts.in.DeferSidecarDrain, "Istio only: write regime (b), an istio-proxy override whose preStop (meshdrain hold) defers Istio's drain until prestop decides, and prestop --drain-at=end; "+
		"=false keeps regime (a) for a policy that forbids overriding istio-proxy, and loses the per-client evidence in dense shapes (Connection: close on every response erases it: meshdrain falls back to silence and stops later)")
	f.StringVarP(&opts.output, "output", "o", opts.output, "output format: text, json or yaml (see above)")
	f.StringVarP(&opts.file, "filename", "f", "", "the workload's manifest (Deployment, StatefulSet or DaemonSet; - for stdin)")
	f.StringVar(&opts.workload, "workload", "", "with -f: the workload's NAME or KIND/NAME when the file holds several")
	f.BoolVar(&opts.patch.ReplacePreStop, "replace-prestop", false, "with -f: replace the app container's preStop hook when it does more than sleep (one that only sleeps is replaced without this flag)")
	f.BoolVar(&opts.asPatch, "patch", false, "with -f -o yaml: print a strategic-merge patch instead of the changed manifests")
	f.StringVar(&opts.patch.Container, "container", "", "the app container's name (with -f: default the only container; required for -o yaml without -f)")
	f.StringVar(&opts.patch.Image, "image", opts.patch.Image, "the meshdrain image for the install init container (with -f: one the workload's meshdrain-install already runs is kept unless this is given)")
	f.StringVar(&opts.patch.Dir, "dir", opts.patch.Dir, "where the shared emptyDir is mounted")

}

// runPlan reads the workload (with -f), derives the plan and prints it in the requested format.
// What changes the manifest, or questions an input, is also said on stderr in every format.
func runPlan(s streams, opts planOptions, changed func(string) bool) error {
	opts.in.Sidecar = plan.Sidecar(opts.sidecar)
	opts.patch.ImageSet = changed("image")
	var manifests *plan.Manifests
	var workload *plan.Workload
	if opts.file != "" {
		var err error
		if manifests, workload, err = readWorkload(s.in, opts); err != nil {
			return err
		}
	} else if !changed("mesh") && opts.output == outputYAML {
		return usageError("-o yaml without -f writes a patch for a pod plan cannot see: pass --mesh %s (or -f FILE, from which plan reads the mesh)",
			meshNames())
	}
	var given mesh.Mesh
	if changed("mesh") {
		given = opts.mesh
	}
	m, meshWhy, err := plan.DecideMesh(given, workload)
	if err != nil {
		return usageError("plan: -f %s: %v", opts.file, err)
	}
	opts.in.Mesh = m
	for _, name := range plan.MeshFlags {
		if why := plan.RefusedFlag(m, name); changed(name) && why != "" {
			return usageError("%s", why)
		}
	}
	if !changed("sidecar") {
		opts.in.Sidecar = "" // the mesh's default, unless the workload says otherwise
	}
	if workload != nil {
		if err := fromWorkload(&opts, workload, changed); err != nil {
			return err
		}
	}
	if len(opts.lagFrom) > 0 {
		if opts.in.LagFrom, err = readLagFrom(s.in, opts); err != nil {
			return err
		}
	} else if workload != nil {
		raw, ok := workload.PrestopFlag("lag-dist")
		opts.in.KeepsLagDist = ok && raw != ""
	}
	if !opts.lowerGracePeriod && (changed("grace-period") || (workload != nil && workload.GracePeriodSet)) {
		opts.in.KeepLonger.GracePeriod = opts.in.CurrentGracePeriod
	}
	p, err := plan.Recommend(opts.in)
	if err != nil {
		var from string
		if len(opts.fromPrestop) > 0 {
			from = fmt.Sprintf("plan: -f %s: read from %s/%s's preStop: %s; a flag given to plan takes the place of each",
				opts.file, workload.Kind, workload.Name, strings.Join(opts.fromPrestop, " "))
		}
		return planError(err, from)
	}
	var edit *plan.Edit
	if workload != nil || opts.output == outputYAML {
		if edit, err = plan.NewEdit(p, opts.patch, workload); err != nil {
			if workload != nil {
				return usageError("plan: -f %s: %v", opts.file, err)
			}
			return usageError("plan: %v", err)
		}
	}
	if workload != nil {
		if err := checkWrittenPrestop(edit, workload, opts.file); err != nil {
			return err
		}
	}
	notes, err := writePlan(s.out, opts, p, edit, manifests)
	if err != nil {
		return &ExitError{Code: ExitFailure, Err: fmt.Errorf("plan: %w", err)}
	}
	reportPlan(s.err, opts, p, edit, workload, meshWhy, changed("mesh"), notes)
	return nil
}

// writePlan prints the plan in the format asked for; notes are what writing the manifests
// said of the comments it kept or moved.
func writePlan(out io.Writer, opts planOptions, p plan.Plan, edit *plan.Edit, manifests *plan.Manifests) (notes []string, err error) {
	switch {
	case opts.output == outputJSON:
		return nil, plan.WriteJSON(out, p, opts.patch.Dir, edit)
	case opts.output == outputYAML && manifests != nil && !opts.asPatch:
		if err := edit.Apply(); err != nil {
			return nil, err
		}
		err := manifests.Write(out)
		return manifests.Notes(), err
	case opts.output == outputYAML:
		return nil, edit.WritePatch(out)
	}
	if err := plan.WriteText(out, p); err != nil || edit == nil {
		return nil, err
	}
	return nil, plan.WriteChanges(out, p, edit)
}

// reportPlan says on stderr, in every format, how plan read the workload (the mesh where
// --mesh did not name it, the choices it made) and what it changes (stderrReport).
func reportPlan(errOut io.Writer, opts planOptions, p plan.Plan, edit *plan.Edit, workload *plan.Workload, meshWhy string, meshGiven bool, notes []string) {
	if workload != nil {
		id := workload.Kind + "/" + workload.Name
		if !meshGiven {
			fmt.Fprintf(errOut, "meshdrain: plan: %s: mesh %s, from its %s\n", id, p.Input.Mesh, meshWhy)
		}
		choices := opts.choices
		if workload.ContainerWhy != "" {
			choices = append([]string{workload.ContainerWhy}, choices...)
		}
		for _, line := range choices {
			fmt.Fprintf(errOut, "meshdrain: plan: %s: %s\n", id, line)
		}
	}
	for _, line := range stderrReport(p, edit, workload, notes) {
		fmt.Fprintf(errOut, "meshdrain: plan: %s\n", line)
	}
}

// stderrReport is what plan says on stderr, whatever the output format: with -f each change
// to the workload (or that there is none), the preStop it replaces, the comments it kept or
// moved; always the values it kept rather than lower, and a very long grace period. Stdout
// holds only the requested format, so a pipe into a file or kubectl loses none of it.
func stderrReport(p plan.Plan, edit *plan.Edit, workload *plan.Workload, notes []string) []string {
	var report []string
	id := ""
	if workload != nil {
		id = workload.Kind + "/" + workload.Name + ": "
		for _, c := range edit.Changes {
			report = append(report, id+c)
		}
		if len(edit.Changes) == 0 {
			report = append(report, id+"no change: the workload already has this plan")
		}
		for _, note := range []string{edit.ReplacementNote(), edit.ProxyReplacementNote()} {
			if note != "" {
				report = append(report, note)
			}
		}
	}
	for _, a := range p.Attention {
		report = append(report, id+a)
	}
	return append(report, notes...)
}

// planError is plan's usage error for the problems of its inputs: one line per problem, each
// saying it is plan's (Execute prints each line as a message of its own), then where the
// inputs came from when not from the flags alone (from, "" when they did).
func planError(err error, from string) error {
	prefix := "plan: "
	var refusal *plan.PrestopRefusal
	if errors.As(err, &refusal) {
		prefix = "plan: prestop would refuse this plan's preStop: "
		err = errors.Join(refusal.Problems...)
	}
	var lines []string
	var joined interface{ Unwrap() []error }
	if errors.As(err, &joined) {
		for _, e := range joined.Unwrap() {
			lines = append(lines, prefix+e.Error())
		}
	} else {
		lines = append(lines, prefix+err.Error())
	}
	if from != "" {
		lines = append(lines, from)
	}
	return usageError("%s", strings.Join(lines, "\n"))
}

// checkWrittenPrestop checks the preStop the edit writes as prestop will check it at start,
// away from the pod: what plan writes, prestop accepts. plan's own flags pass by
// construction (plan.Recommend checks their timing with prestop's rules); what can still fail
// are the flags it keeps from the workload, which are then named, not written.
func checkWrittenPrestop(edit *plan.Edit, workload *plan.Workload, file string) error {
	var lines []string
	kept := edit.KeptPrestopArgs()
	for _, p := range prestopOffline(edit.PrestopCommand()[2:]) { // after the binary and "prestop"
		lines = append(lines, fmt.Sprintf("plan: -f %s: %s/%s: prestop would refuse the preStop with the flags plan keeps from it (%s): %v",
			file, workload.Kind, workload.Name, strings.Join(kept, " "), p))
	}
	if cmd := edit.ProxyPrestopCommand(); cmd != nil {
		keptHold := edit.KeptHoldArgs()
		for _, p := range holdOffline(cmd[2:]) { // after the binary and "hold"
			lines = append(lines, fmt.Sprintf("plan: -f %s: %s/%s: hold would refuse %s's preStop with the flags plan keeps from it (%s): %v",
				file, workload.Kind, workload.Name, plan.ProxyContainerName, strings.Join(keptHold, " "), p))
		}
	}
	if len(lines) == 0 {
		return nil
	}
	lines = append(lines, "plan: fix or remove those flags in the manifest, then plan again")
	return usageError("%s", strings.Join(lines, "\n"))
}

// holdOffline checks hold's arguments as the hook does at start, without what only the pod
// has (its log file, Istio's ISTIO_META_POD_PORTS). A flag that turns the hook into something
// that returns at once is refused too.
func holdOffline(args []string) []error {
	problems := loadHold(args, nil).problems
	for _, name := range []string{"help", "validate"} {
		if hasFlag(args, name) {
			problems = append(problems, usageError("--%s in a preStop makes the hook print or check and return at once, holding nothing: remove it", name))
		}
	}
	return problems
}

// prestopOffline checks prestop's arguments as the hook does at start, without what only the
// pod has: the process --signal names, its --pidfile, the program --exec runs, the log file.
// A flag that turns the hook into something that returns at once is refused too.
func prestopOffline(args []string) []error {
	from := defaultPrestopOptions()
	from.offline = true
	setup := loadPrestopFrom(context.Background(), from, args, nil)
	problems := setup.problems
	for _, name := range []string{"help", "validate"} { // flagsNotFromEnv, in a fixed order
		if hasFlag(args, name) {
			problems = append(problems, usageError("--%s in a preStop makes the hook print or check and return at once, holding nothing: remove it", name))
		}
	}
	return problems
}

// hasFlag: args give --name (before any "--").
func hasFlag(args []string, name string) bool {
	for _, a := range args {
		if a == "--" {
			return false
		}
		if a == "--"+name || strings.HasPrefix(a, "--"+name+"=") || (name == "help" && a == "-h") {
			return true
		}
	}
	return false
}

// fromWorkload takes what the manifest says about the pod into the plan's input, where the
// flags did not say it: what a meshdrain preStop already says of the app and its clients
// (fromPrestop), then the rest, which the mesh's plan reads (plan.FromWorkload).
func fromWorkload(opts *planOptions, workload *plan.Workload, changed func(string) bool) error {
	if err := fromPrestop(opts, workload, changed); err != nil {
		return err
	}
	choices, err := plan.FromWorkload(&opts.in, workload, changed, opts.lowerGracePeriod)
	if err != nil {
		return usageError("%v", err)
	}
	opts.choices = append(opts.choices, choices...)
	return nil
}

// fromPrestop reads plan's inputs from the workload's meshdrain preStop where their flags
// were not given: what the app needs and how its clients send are facts a re-plan keeps.
func fromPrestop(opts *planOptions, workload *plan.Workload, changed func(string) bool) error {
	targets := map[string]*time.Duration{"app-drain": &opts.in.AppDrain, "quiet": &opts.in.Quiet, "poll": &opts.in.Poll,
		"min-wait": &opts.in.MinWait, "client-period": &opts.in.ClientPeriod, "fallback-wait": &opts.in.FallbackWait}
	for _, name := range plan.InputFlags {
		raw, ok := workload.PrestopFlag(name)
		if !ok || changed(name) {
			continue
		}
		if name == "rps-per-client" {
			r, err := strconv.ParseFloat(raw, 64)
			if err != nil || !isRate(r) {
				return usageError("%s/%s: its preStop's --%s %q is not a rate of 0 or more: fix it, or pass --%s", workload.Kind, workload.Name, name, raw, name)
			}
			opts.in.RPSPerClient = r
			opts.fromPrestop = append(opts.fromPrestop, "--"+name+"="+raw)
			continue
		}
		d, err := time.ParseDuration(raw)
		if err != nil || d < 0 {
			return usageError("%s/%s: its preStop's --%s %q is not a duration of 0 or more: fix it, or pass --%s", workload.Kind, workload.Name, name, raw, name)
		}
		*targets[name] = d
		opts.fromPrestop = append(opts.fromPrestop, "--"+name+"="+raw)
	}
	lagGuards := len(opts.lagFrom) > 0
	if raw, ok := workload.PrestopFlag("lag-dist"); ok && raw != "" {
		lagGuards = true
	}
	for _, z := range opts.zeroMeansDefault() {
		if z.flag == "min-wait" && lagGuards {
			continue // the hook's risk figure guards its stop: 0 is what a plan from --lag-from writes
		}
		if raw, ok := workload.PrestopFlag(z.flag); ok && !changed(z.flag) && z.v == 0 {
			return usageError("%s/%s: its preStop's --%s %s: %s; or pass --%s", workload.Kind, workload.Name, z.flag, raw, z.instead, z.flag)
		}
	}
	return nil
}

// readWorkload reads -f (a file or stdin) and finds the workload and its app container.
func readWorkload(stdin io.Reader, opts planOptions) (*plan.Manifests, *plan.Workload, error) {
	var r io.Reader = stdin
	if opts.file != "-" {
		f, err := os.Open(opts.file)
		if err != nil {
			return nil, nil, usageError("-f: %v", err)
		}
		defer f.Close()
		r = f
	}
	m, err := plan.ReadManifests(r)
	if err != nil {
		return nil, nil, usageError("-f %s: %v", opts.file, err)
	}
	w, err := m.Workload(opts.workload, opts.patch.Container)
	if err != nil {
		return nil, nil, usageError("-f %s: %v", opts.file, err)
	}
	return m, w, nil
}

func sidecarNames() string {
	return strings.Join(sidecarCompletions(), "|")
}

func meshNames() string {
	return strings.Join(meshCompletions(), "|")
}

func meshCompletions() []string {
	var names []string
	for _, m := range plan.Meshes {
		names = append(names, string(m))
	}
	return names
}

func sidecarCompletions() []string {
	var names []string
	for _, sc := range plan.Sidecars {
		names = append(names, string(sc))
	}
	return names
}
