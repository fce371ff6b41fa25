package cli

import (
	"os"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/meshdrain/meshdrain/pkg/envoyadmin"
	"github.com/meshdrain/meshdrain/pkg/inbound"
	"github.com/meshdrain/meshdrain/pkg/status"
)

// sidecarFlags are the flags that say which sidecar and which inbound endpoints to read,
// spelled as prestop spells them so an operator can copy a hook's flags to status or check.
type sidecarFlags struct {
	admin          string
	ports          []int
	clusters       []string
	httpPrefixes   []string
	connectTimeout time.Duration
}

func defaultSidecarFlags() sidecarFlags {
	return sidecarFlags{admin: envoyadmin.DefaultURL, connectTimeout: 2 * time.Second}
}

func (s *sidecarFlags) bind(f *pflag.FlagSet) {
	f.StringVar(&s.admin, "admin", s.admin, "Envoy admin API base URL")
	f.IntSliceVar(&s.ports, "port", nil, "inbound target port to read (repeatable; default: every inbound port found)")
	f.StringSliceVar(&s.clusters, "cluster", nil, "generic Envoy: inbound cluster name, e.g. local_app (repeatable)")
	f.StringSliceVar(&s.httpPrefixes, "http-prefix", nil, "generic Envoy: inbound HTTP stat prefix, e.g. public_listener (repeatable)")
	f.DurationVar(&s.connectTimeout, "connect-timeout", s.connectTimeout, "bound on one sample's admin calls")
}

// client validates the flags and builds the admin client and the selector.
func (s *sidecarFlags) client() (*envoyadmin.Client, inbound.Selector, error) {
	var sel inbound.Selector
	if s.connectTimeout <= 0 {
		return nil, sel, usageError("--connect-timeout must be positive, got %v", s.connectTimeout)
	}
	for _, p := range s.ports {
		if p < 1 || p > 65535 {
			return nil, sel, usageError("--port %d: not a port number", p)
		}
	}
	if len(s.ports) > 0 && (len(s.clusters) > 0 || len(s.httpPrefixes) > 0) {
		return nil, sel, usageError("--port selects Istio inbound ports; --cluster and --http-prefix name a generic Envoy's stats: use one or the other")
	}
	client, err := envoyadmin.New(s.admin, envoyadmin.Options{RequestTimeout: min(s.connectTimeout, time.Second)})
	if err != nil {
		return nil, sel, usageError("--admin: %v", err)
	}
	sel = inbound.Selector{Ports: s.ports, Clusters: s.clusters, HTTPPrefixes: s.httpPrefixes}
	return client, sel, nil
}

type statusOptions struct {
	sidecar  sidecarFlags
	output   string
	watch    bool
	interval time.Duration
}

func newStatusCommand(s streams) *cobra.Command {
	o := statusOptions{sidecar: defaultSidecarFlags(), output: status.OutputText, interval: time.Second}
	cmd := &cobra.Command{
		Use:   "status [flags]",
		Short: "Show what the sidecar's inbound side is doing now: state, signal, requests per port",
		Long: `status reads the Envoy sidecar's admin API (the same filtered stats prestop reads) and shows:
the server state, the stat naming profile and the signal prestop would use, and per inbound
port the new-request counter, its rate, the active requests and the active connections. A
value the sidecar does not expose is shown as "-" (null in JSON), never as 0. Hints say what
to change when the stats prestop needs are missing.

--watch refreshes every --interval until Ctrl-C: in place on a terminal, one line per sample
otherwise (-o json: one JSON object per line; -o yaml: one YAML document per sample). The rate is the counter's change between two
samples, so the first sample has none.

Exit codes: 0 shown; 1 the admin API could not be read (without --watch); 2 bad flags.
Every flag can also be set as MESHDRAIN_<FLAG>.`,
		Example: `  # Inside the pod, against the Istio sidecar:
  kubectl exec deploy/web -c web -- /meshdrain/meshdrain status

  # Watch one port's request rate while a rollout runs:
  meshdrain status --port 8080 --watch --interval 500ms

  # A plain Envoy or Consul sidecar, as JSON:
  meshdrain status --admin http://127.0.0.1:19000 --cluster local_app --http-prefix public_listener -o json`,
		Args: cobra.NoArgs,
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
	f.DurationVar(&o.interval, "interval", o.interval, "time between two samples with --watch")
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
	client, sel, err := o.sidecar.client()
	if err != nil {
		return err
	}
	err = status.Run(cmd.Context(), client, s.out, status.Options{
		AdminURL:      client.URL(),
		Selector:      sel,
		Output:        output,
		Watch:         o.watch,
		Interval:      o.interval,
		SampleTimeout: o.sidecar.connectTimeout,
		Terminal:      isTerminal(s.out),
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
