package cli

import (
	"context"
	"os"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/meshdrain/meshdrain/pkg/hook/evidence"
	"github.com/meshdrain/meshdrain/pkg/hook/risk"
	"github.com/meshdrain/meshdrain/pkg/mesh"
	"github.com/meshdrain/meshdrain/pkg/mesh/backends"
	"github.com/meshdrain/meshdrain/pkg/mesh/envoy"
	"github.com/meshdrain/meshdrain/pkg/mesh/linkerd"
	"github.com/meshdrain/meshdrain/pkg/operator/status"
)

// sidecarFlags are the flags that say which sidecar and which inbound endpoints to read,
// spelled as prestop spells them so an operator can copy a hook's flags to status or check.
type sidecarFlags struct {
	mesh           mesh.Mesh
	admin          string
	ports          []int
	clusters       []string
	httpPrefixes   []string
	connectTimeout time.Duration
	allowRemote    bool
	ignoreSources  []string
	// given are the command's own flags some mesh refuses (backends.Refused), set before
	// the backend opens.
	given backends.Given
}

func defaultSidecarFlags() sidecarFlags {
	return sidecarFlags{mesh: mesh.Auto, connectTimeout: 2 * time.Second}
}

func (s *sidecarFlags) bind(f *pflag.FlagSet) {
	f.StringVar((*string)(&s.mesh), "mesh", string(s.mesh), "the sidecar: auto (ask the admin port: Linkerd's 4191, then Envoy's 15000), istio, envoy, linkerd, or none (no sidecar: the pod's own socket table and TCP counters on the app's --port)")
	f.StringVar(&s.admin, "admin", "", "the sidecar's admin base URL (default per mesh: Envoy "+envoy.DefaultURL+", Linkerd "+linkerd.DefaultAdminURL+")")
	f.IntSliceVar(&s.ports, "port", nil, "inbound target port to read (repeatable; default: every inbound port found)")
	f.StringSliceVar(&s.clusters, "cluster", nil, "generic Envoy: inbound cluster name, e.g. local_app (repeatable)")
	f.StringSliceVar(&s.httpPrefixes, "http-prefix", nil, "generic Envoy: inbound HTTP stat prefix, e.g. public_listener (repeatable)")
	f.DurationVar(&s.connectTimeout, "connect-timeout", s.connectTimeout, "bound on one sample's admin calls")
	f.BoolVar(&s.allowRemote, "allow-remote", false, "let --admin name a host other than the loopback (a pod's IP); kubectl port-forward keeps it loopback")
	f.StringSliceVar(&s.ignoreSources, "ignore-source", nil, "--mesh none: a source that is never a client, as a CIDR, an IP or $(NAME), an environment variable (repeatable; the kubelet's probes come from the node's address)")
}

// options are the flags as backends.Open takes them. Each admin call is bounded by the
// sample's timeout, at most 1s.
func (s *sidecarFlags) options() backends.Options {
	return backends.Options{
		Mesh: s.mesh, AdminURL: s.admin, Given: s.given,
		Selector:       mesh.Selector{Ports: s.ports, Clusters: s.clusters, HTTPPrefixes: s.httpPrefixes},
		RequestTimeout: min(s.connectTimeout, time.Second), AllowRemote: s.allowRemote,
		Kernel: backends.KernelOptions{IgnoreSources: s.ignoreSources, Lookup: os.LookupEnv},
	}
}

// open checks the flags and opens the backend as prestop does (backends.Open: loopback only
// unless --allow-remote, for every mesh: a person reaches a pod with kubectl exec or kubectl
// port-forward, both loopback, and a MESHDRAIN_ADMIN variable must not turn a CI job's check
// into a request to any host). Its problems are one usage error.
func (s *sidecarFlags) open() (backends.Backend, error) {
	if s.connectTimeout <= 0 {
		return backends.Backend{}, usageError("--connect-timeout must be positive, got %v", s.connectTimeout)
	}
	b := backends.Open(context.Background(), s.options())
	if len(b.Problems) > 0 {
		return b, usageError("%w", backends.JoinOneLine(b.Problems))
	}
	return b, nil
}

// sidecar checks the flags and returns the sidecar to sample, the admin URL to show (""
// while the mesh is still to be detected, and without a sidecar) and the selector.
func (s *sidecarFlags) sidecar() (status.Sampler, string, mesh.Selector, error) {
	opts := s.options()
	b, err := s.open()
	if err != nil {
		return nil, "", opts.Selector, err
	}
	if s.mesh == mesh.Auto {
		detect := func(ctx context.Context, u string) (mesh.Mesh, error) { return backends.Detect(ctx, u, opts) }
		build := func(found mesh.Mesh, u string) (status.Sampler, error) {
			foundOpts := opts
			foundOpts.Mesh, foundOpts.AdminURL = found, u
			opened := backends.Open(context.Background(), foundOpts)
			if len(opened.Problems) > 0 {
				return nil, backends.JoinOneLine(opened.Problems)
			}
			return status.SamplerFor(opened.Sidecar)
		}
		return status.Detect(b.Candidates, detect, build), s.admin, opts.Selector, nil
	}
	sc, err := status.SamplerFor(b.Sidecar)
	if err != nil {
		return nil, "", opts.Selector, err
	}
	return sc, b.AdminURL, opts.Selector, nil
}

type statusOptions struct {
	sidecar       sidecarFlags
	output        string
	watch         bool
	interval      time.Duration
	clients       bool
	listenerPorts []int
	drainAt       string
	lagDist       string
	risk          float64
}

// statusLong is status's help text.
const statusLong = `status reads the sidecar's admin API (the same stats prestop reads) and shows: the server
state, the stat naming profile and the signal prestop would use, and per inbound port the
new-request counter, its rate, the active requests and the active connections. A value the
sidecar does not expose is shown as "-" (null in JSON), never as 0. Hints say what to change
when the stats prestop needs are missing.

--mesh auto (the default) asks the admin port which sidecar it is: Linkerd's (4191) is tried
first, then Envoy's (15000), or only --admin when given. For a Linkerd proxy status reads
/metrics (the proxy cannot filter it): request_total per target port, request_total minus
response_total as the requests in flight (Linkerd has no in-flight gauge), the client
connections, and the kubelet's probes apart. A port no traffic has used for 10 minutes has no
series at all: Linkerd drops idle label sets.

--watch refreshes every --interval until Ctrl-C: in place on a terminal, one line per sample
otherwise, and a line per client whose state changed (-o json: one JSON object per line; -o
yaml: one YAML document per sample). The rate is the counter's change between two samples, so
the first sample has none. The drain line says whether the sidecar drains (its own drain or
prestop's): a draining Envoy stays LIVE, and shows it only by telling connections to close
(http.<prefix>.downstream_cx_drain_close), from the sample that first saw it. The regime line
judges it as prestop's final event judges drain_regime: "a" when the count rose since status's
first sample, that is the sidecar draining on its own before prestop --drain-at end has
decided (its own drain comes only then, just before the app is told to stop) and the
istio-proxy override missing; "b so far" while it has not; "unknown" where the count is not
exposed. --drain-at start says the pod's prestop drains at its start: regime (a) by design.

--clients (on by default) adds the clients of the sidecar's inbound listener (Istio's 15006,
or --inbound-listener-port), one line per client address, from the socket table of the network
namespace status runs in: run it in the pod (kubectl exec); where nothing listens on that port
there, it says so. Each client is judged as prestop counts it: holding (keeps an idle
connection open: it still routes here), sending (sent since), left (closed its connection
itself: it applied the endpoint removal), with its open connections and when it last sent.

--mesh none (a pod without a sidecar: plain Services, ingress controllers, load balancers in IP
mode, Istio ambient) reads the app's own --port from the kernel of the namespace status runs
in (run it in the pod): per port, the activity prestop --mesh none counts (connections accepted
from clients, data on open ones), its rate and the requests in flight; per client, who opens
new connections, who still sends on connections that were open at the first sample (routed per
connection, such a client will not move), and since when. The kernel counts from status's first
read, so without --watch status reads twice, --interval apart (1s by default), and shows the
second read: what the clients did in between. --ignore-source leaves the kubelet's probes out,
as prestop's.

--lag-dist (and --risk), copied from the pod's prestop, add the risk figure the hook would
state: the probability that some client still routes here, from the clients as shown and one
not seen yet. status cannot see when the preStop started: the figure counts from status's first
sample, as a hook started then would; start status --watch at the deletion to follow a drain.

--admin must be the loopback (127.0.0.0/8, [::1], localhost) or a unix socket, as prestop's:
run status in the pod (kubectl exec), or through kubectl port-forward, which listens on your
loopback. --allow-remote lets it name another host, e.g. a pod IP from a debug pod.

Exit codes: 0 shown; 1 the admin API could not be read (without --watch); 2 bad flags.
Every flag can also be set as MESHDRAIN_<FLAG>.`

// statusExamples are status's help examples.
const statusExamples = `  # Inside the pod, against the Istio sidecar:
  kubectl exec deploy/web -c web -- /meshdrain/meshdrain status

  # Watch one port's request rate, and which clients still hold on, while a pod drains:
  kubectl exec web-7d9f -c web -- /meshdrain/meshdrain status --port 8080 --watch --interval 500ms

  # A Linkerd proxy (found by itself; --mesh linkerd skips the question):
  kubectl exec deploy/web -c web -- /meshdrain/meshdrain status --port 8080

  # From your machine, through a port-forward (loopback, no --allow-remote needed):
  kubectl port-forward deploy/web 15000:15000 &
  meshdrain status --admin http://127.0.0.1:15000

  # A pod without a sidecar: who still opens connections to port 8080, who sends on old ones:
  kubectl exec web-7d9f -c web -- /meshdrain/meshdrain status --mesh none --port 8080 --ignore-source '$(HOST_IP)' --watch

  # A plain Envoy or Consul sidecar, as JSON:
  meshdrain status --admin http://127.0.0.1:19000 --cluster local_app --http-prefix public_listener -o json`

func newStatusCommand(s streams) *cobra.Command {
	o := statusOptions{sidecar: defaultSidecarFlags(), output: status.OutputText, interval: time.Second, risk: risk.DefaultLevel}
	cmd := &cobra.Command{
		Use:     "status [flags]",
		Short:   "Show what the sidecar's inbound side is doing now: state, signal, requests per port",
		Long:    statusLong,
		Example: statusExamples,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := bindEnv(cmd, os.LookupEnv); err != nil {
				return err
			}
			return runStatus(cmd, s, o)
		},
	}
	f := cmd.Flags()
	o.sidecar.bind(f)
	f.StringVarP(&o.output, "output", "o", o.output, "output format: text, json or yaml")
	f.BoolVarP(&o.watch, "watch", "w", false, "refresh every --interval until Ctrl-C")
	f.DurationVar(&o.interval, "interval", o.interval, "time between two samples with --watch; without it, under --mesh none, between the first read and the one shown (the kernel counts from the first)")
	f.BoolVar(&o.clients, "clients", true, "show the inbound listener's clients from this network namespace's socket table (run status in the pod)")
	f.IntSliceVar(&o.listenerPorts, "inbound-listener-port", nil, "the sidecar's inbound listener port(s) whose clients to show (default: the listener its stats name, Istio's 15006)")
	f.StringVar(&o.drainAt, "drain-at", "", "the pod's prestop --drain-at: start is regime (a) by design; end or empty: the regime line says whether the sidecar drains on its own before meshdrain's call")
	f.StringVar(&o.lagDist, "lag-dist", "", "the pod's prestop --lag-dist: each sample shows the risk figure the hook would state, counted from status's first sample")
	f.Float64Var(&o.risk, "risk", o.risk, "the pod's prestop --risk (with --lag-dist): the figure a hook may stop at")
	return cmd
}

func runStatus(cmd *cobra.Command, s streams, o statusOptions) error {
	output, err := status.ParseOutput(o.output)
	if err != nil {
		return usageError("-o: %v", err)
	}
	if o.interval <= 0 {
		return usageError("--interval must be positive, got %v", o.interval)
	}
	if o.drainAt != "" && o.drainAt != drainAtStart && o.drainAt != drainAtEnd {
		return usageError("--drain-at %q: want %s or %s, as the pod's prestop", o.drainAt, drainAtStart, drainAtEnd)
	}
	lag, err := parseLagDist(o.lagDist)
	if err != nil {
		return usageError("--lag-dist %q: %v", o.lagDist, err)
	}
	if err := risk.CheckLevel(o.risk); err != nil {
		return usageError("--risk %v", err)
	}
	o.sidecar.given = backends.Given{InboundListenerPorts: len(o.listenerPorts) > 0}
	sc, admin, sel, err := o.sidecar.sidecar()
	if err != nil {
		return err
	}
	var clients status.ClientWatch
	if w := o.clientWatch(); w != nil {
		defer w.Close()
		clients = w
	}
	err = status.Run(cmd.Context(), sc, s.out, status.Options{
		AdminURL:      admin,
		Selector:      sel,
		Output:        output,
		Watch:         o.watch,
		Interval:      o.interval,
		SampleTimeout: o.sidecar.connectTimeout,
		Terminal:      isTerminal(s.out),
		Clients:       clients,
		DrainAtStart:  o.drainAt == drainAtStart,
		Lag:           lag,
		Risk:          o.risk,
	})
	if err != nil {
		return &ExitError{Code: ExitFailure, Err: err}
	}
	return nil
}

// isTerminal reports whether w is a character device, without a terminal library: redrawing
// in place only makes sense there, and a log file must get plain lines.
func isTerminal(w any) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	info, err := f.Stat()
	return err == nil && info.Mode()&os.ModeCharDevice != 0
}

// clientWatch is the clients view of the sidecar (backends.ClientWatch), nil without one
// or without --clients. A pool shows over one sample interval, as over prestop's read
// interval.
func (o statusOptions) clientWatch() *evidence.Watch {
	if !o.clients {
		return nil
	}
	return backends.ClientWatch(o.sidecar.mesh, o.listenerPorts, o.interval)
}
