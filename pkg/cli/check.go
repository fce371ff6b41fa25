package cli

import (
	"io"
	"os"
	"time"

	"github.com/meshdrain/meshdrain/pkg/mesh"
	"github.com/meshdrain/meshdrain/pkg/mesh/backends"
	"github.com/meshdrain/meshdrain/pkg/operator/status"
	"github.com/spf13/cobra"
)

type checkOptions struct {
	sidecar                  sidecarFlags
	output                   string
	minSignal                string
	gracePeriod              time.Duration
	appDrain                 time.Duration
	terminationDrainDuration time.Duration
	proxyWaitBeforeExit      time.Duration
	drainAt                  string
	podSpec                  string
}

// checkLong is check's help text.
const checkLong = `check verifies that meshdrain prestop can do its job in this pod:

  - the sidecar's admin API answers (--mesh auto finds which sidecar: Linkerd's admin port
    4191, then Envoy's 15000; or --admin),
  - the server is LIVE (Envoy) or ready (Linkerd's /ready),
  - a request-level inbound signal (HTTP or inbound-cluster request counters; Linkerd's
    request_total with response_total) exists for every --port given, or for at least one
    inbound port; --min-signal completions or connections also accepts istio_requests_total
    or connection counts,
  - with --grace-period: prestop's deadline (grace - app-drain - 1s) leaves time, and with
    --termination-drain-duration the classic sidecar outlives the app (the sidecar cannot tell
    its own terminationDrainDuration: pass the value of the pod's proxy config); for a classic
    Linkerd proxy --proxy-wait-before-exit does the same for its preStop sleep,
  - with --drain-at end (the pod's prestop runs --drain-at end: regime (b), the sidecar's own
    drain deferred by the istio-proxy override that runs meshdrain hold): the sidecar is not
    draining before meshdrain's call. It counts the connections it tells to close
    (http.<prefix>.downstream_cx_drain_close); when some were, check samples again and fails
    if the count rises (regime a: the override is missing), as prestop's final event would
    say drain_regime "a". terminationDrainDuration then only bounds a fallback (hold keeps
    a classic proxy's SIGTERM until the app has let go), so regime (a)'s rule that it outlive
    the app's latest exit is not applied.

--mesh none (no sidecar: the kernel is the sidecar) checks what prestop --mesh none needs in
the pod instead: a network namespace of its own (not hostNetwork: no kubelet listening; the
item also says whether it is PID 1's, and names a machine's own namespace as such), /proc/net/snmp,
a listener on every --port, the socket table with tcp_info (inet_diag), and the kernel's destroy
records; with --grace-period, that prestop's deadline leaves time, as prestop --validate checks it.

A Linkerd proxy needs no annotation for its metrics, but writes a port's series only once
traffic has used it and drops them after 10 minutes idle: a --port with no series fails
(quiet or wrong, the proxy cannot tell), one that only the kubelet's probes reached warns.

--admin must be the loopback or a unix socket, as prestop's (kubectl exec, or kubectl
port-forward, which listens on your loopback); --allow-remote lets it name another host.

--pod-spec judges the live pod as kubectl prints it (a file, or - for stdin), from a machine
with kubectl, in place of the sidecar's items: whether Istio's injector merged plan's
istio-proxy override (meshdrain hold as the proxy's preStop, the meshdrain volume mounted)
where the app's prestop runs --drain-at=end, and that no istio-proxy kept the image auto.
The app container cannot see this: containers do not see each other's specs.

Each problem is printed with its fix (e.g. the exact sidecar.istio.io/statsInclusionPrefixes
annotation). Exit codes: 0 passed; 1 a problem was found; 2 bad flags.
Every flag can also be set as MESHDRAIN_<FLAG>, so a pod configured for prestop through its
environment is checked with the same settings.`

// checkExamples are check's help examples.
const checkExamples = `  # In CI, after deploying (fails with the annotation to add when Istio hides the stats):
  kubectl exec deploy/web -c web -- /meshdrain/meshdrain check --port 8080

  # Also verify the termination timing of a classic Istio sidecar (regime a, --drain-at start):
  meshdrain check --grace-period 52s --app-drain 5s --termination-drain-duration 52s

  # A pod in regime (b), as plan writes it by default (prestop --drain-at end, meshdrain hold):
  meshdrain check --port 8080 --drain-at end --grace-period 52s --app-drain 5s

  # A classic Linkerd proxy, with its proxy-wait-before-exit-seconds:
  meshdrain check --mesh linkerd --port 8080 --grace-period 52s --app-drain 5s --proxy-wait-before-exit 51s

  # A pod without a sidecar (prestop --mesh none), in the app's container:
  kubectl exec deploy/web -c web -- /meshdrain/meshdrain check --mesh none --port 8080

  # Whether the injector merged the istio-proxy override (regime b), from a machine with kubectl:
  kubectl get pod web-7d9c5b6f4-x2kq8 -o yaml | meshdrain check --pod-spec -

  # Accept istio_requests_total when request-level stats cannot be enabled, as JSON:
  meshdrain check --min-signal completions -o json`

func newCheckCommand(s streams) *cobra.Command {
	o := checkOptions{
		sidecar:   defaultSidecarFlags(),
		output:    status.OutputText,
		minSignal: string(status.MinRequests),
		appDrain:  defaultPrestopOptions().appDrain,
	}
	cmd := &cobra.Command{
		Use:     "check [flags]",
		Short:   "Smoke-check a pod for CI or readiness: exit 0 only if prestop will find a request-level signal",
		Long:    checkLong,
		Example: checkExamples,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := bindEnv(cmd, os.LookupEnv); err != nil {
				return err
			}
			return runCheck(cmd, s, o)
		},
	}
	f := cmd.Flags()
	o.sidecar.bind(f)
	f.StringVarP(&o.output, "output", "o", o.output, "output format: text, json or yaml")
	f.StringVar(&o.minSignal, "min-signal", o.minSignal, "weakest signal accepted: requests, completions or connections")
	secondsVar(f, &o.gracePeriod, "grace-period", 0, "the pod's terminationGracePeriodSeconds: enables the timing checks")
	f.DurationVar(&o.appDrain, "app-drain", o.appDrain, "time the app needs after SIGTERM (as prestop's --app-drain)")
	f.DurationVar(&o.terminationDrainDuration, "termination-drain-duration", 0, "the pod's proxy config terminationDrainDuration (classic Istio sidecars), to verify it outlives the app")
	f.DurationVar(&o.proxyWaitBeforeExit, "proxy-wait-before-exit", 0, "the pod's config.alpha.linkerd.io/proxy-wait-before-exit-seconds (classic Linkerd proxies), to verify it outlives the app")
	f.StringVar(&o.drainAt, "drain-at", "", "the pod's prestop --drain-at: end checks regime (b) (the sidecar must not drain before meshdrain's call; terminationDrainDuration only bounds a fallback); start or empty: regime (a)")
	f.StringVar(&o.podSpec, "pod-spec", "", "the live pod as kubectl get pod POD -o yaml (or -o json) prints it, a file or - for stdin: checks only whether the injector merged the istio-proxy override")
	_ = cmd.MarkFlagFilename("pod-spec", "yaml", "yml", "json")
	return cmd
}

func runCheck(cmd *cobra.Command, s streams, o checkOptions) error {
	output, err := status.ParseOutput(o.output)
	if err != nil {
		return usageError("-o: %v", err)
	}
	minSignal, err := status.ParseMinSignal(o.minSignal)
	if err != nil {
		return usageError("--min-signal: %v", err)
	}
	if o.gracePeriod < 0 || o.appDrain < 0 || o.terminationDrainDuration < 0 || o.proxyWaitBeforeExit < 0 {
		return usageError("--grace-period, --app-drain, --termination-drain-duration and --proxy-wait-before-exit must not be negative")
	}
	if o.terminationDrainDuration > 0 && o.gracePeriod == 0 {
		return usageError("--termination-drain-duration is judged against the app's latest exit: give --grace-period too")
	}
	if o.proxyWaitBeforeExit > 0 && o.gracePeriod == 0 {
		return usageError("--proxy-wait-before-exit is judged against the app's latest exit: give --grace-period too")
	}
	if o.drainAt != "" && o.drainAt != drainAtStart && o.drainAt != drainAtEnd {
		return usageError("--drain-at %q: want %s or %s, as the pod's prestop", o.drainAt, drainAtStart, drainAtEnd)
	}
	if o.podSpec != "" {
		return runPodSpecCheck(s, o.podSpec, output)
	}
	o.sidecar.given = backends.Given{RegimeB: o.drainAt == drainAtEnd,
		TerminationDrainDuration: o.terminationDrainDuration > 0, ProxyWaitBeforeExit: o.proxyWaitBeforeExit > 0}
	if o.sidecar.mesh == mesh.None {
		return runKernelCheck(s, o, output)
	}
	sc, admin, sel, err := o.sidecar.sidecar()
	if err != nil {
		return err
	}
	res, err := status.Check(cmd.Context(), sc, s.out, status.CheckOptions{
		AdminURL:                 admin,
		Selector:                 sel,
		MinSignal:                minSignal,
		GracePeriod:              o.gracePeriod,
		AppDrain:                 o.appDrain,
		TerminationDrainDuration: o.terminationDrainDuration,
		ProxyWaitBeforeExit:      o.proxyWaitBeforeExit,
		DrainAtEnd:               o.drainAt == drainAtEnd,
		Output:                   output,
		Timeout:                  o.sidecar.connectTimeout,
	})
	if err != nil {
		return &ExitError{Code: ExitFailure, Err: err}
	}
	if !res.OK {
		// The problems and their fixes are already on stdout.
		return &ExitError{Code: ExitFailure}
	}
	return nil
}

// runKernelCheck is check --mesh none: the pod's kernel, as prestop --mesh none reads it.
func runKernelCheck(s streams, o checkOptions, format string) error {
	b, err := o.sidecar.open()
	if err != nil {
		return err
	}
	items := status.CheckKernel(b.Reader, "", o.sidecar.ports, b.Ignore)
	if o.gracePeriod > 0 {
		items = append(items, status.KernelTiming(o.gracePeriod, o.appDrain))
	}
	if err := status.WriteKernelCheck(s.out, items, format); err != nil {
		return err
	}
	if status.KernelCheckFailed(items) {
		return &ExitError{Code: ExitFailure}
	}
	return nil
}

// runPodSpecCheck is check --pod-spec: the pod's spec as the API server holds it after
// injection, which no container of the pod can read.
func runPodSpecCheck(s streams, file, format string) error {
	var data []byte
	var err error
	if file == "-" {
		data, err = io.ReadAll(s.in)
	} else {
		data, err = os.ReadFile(file)
	}
	if err != nil {
		return usageError("--pod-spec: %v", err)
	}
	item, err := status.CheckProxyOverride(data)
	if err != nil {
		return usageError("--pod-spec %s: %v", file, err)
	}
	if err := status.WritePodSpecCheck(s.out, []status.Item{item}, format); err != nil {
		return err
	}
	if item.Status == status.Fail {
		return &ExitError{Code: ExitFailure}
	}
	return nil
}
