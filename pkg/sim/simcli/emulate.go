package simcli

import (
	"fmt"
	"io"
	"net/url"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/meshdrain/meshdrain/pkg/cli"
	"github.com/meshdrain/meshdrain/pkg/mesh"
	"github.com/meshdrain/meshdrain/pkg/mesh/envoy"
	"github.com/meshdrain/meshdrain/pkg/mesh/linkerd"
	"github.com/meshdrain/meshdrain/pkg/sim/envoysim"
	"github.com/meshdrain/meshdrain/pkg/sim/linkerdsim"
)

// emulateOptions are the flags of meshdrain-sim emulate, with Istio's defaults.
type emulateOptions struct {
	cfg        envoysim.Config
	mesh       mesh.Mesh
	injection  string
	wait       time.Duration
	admin      string
	inbound    []string
	probePaths []string
	profile    string
	inclusion  string
	agent      string
	logFormat  string
}

func defaultEmulateOptions() emulateOptions {
	return emulateOptions{
		cfg: envoysim.Config{
			BindAddress:              "0.0.0.0",
			DrainTime:                45 * time.Second,
			DrainStrategy:            envoysim.DrainImmediate,
			TerminationDrainDuration: 5 * time.Second,
			MinimumDrainDuration:     5 * time.Second,
			ExitOnZeroPoll:           time.Second,
			Workers:                  2,
		},
		mesh:      mesh.Istio,
		injection: string(linkerdsim.InjectionNative),
		profile:   string(envoysim.ProfileIstio),
		inclusion: string(envoysim.InclusionAll),
		agent:     string(envoysim.AgentClassic),
		logFormat: "console",
	}
}

// emulateLong is emulate's help.
const emulateLong = `emulate runs meshdrain's Envoy sidecar emulator: an admin API with Envoy's methods, status
codes and stat names (plain Envoy, Istio >= 1.23 or Istio < 1.23), a real inbound HTTP/1.1
proxy in front of your app that counts like Envoy, Envoy's drain semantics, and pilot-agent's
termination modes. Use it to smoke-test an app and its preStop hook in CI without a mesh.

--inbound PORT=APP_ADDR listens on a free loopback port; PORT=LISTEN_ADDR>APP_ADDR listens
where you say. PORT is the target port as it appears in stat names (inbound|PORT||).
The admin URL and the inbound addresses are printed first; then one access log line per
request. On SIGTERM or SIGINT it behaves as pilot-agent (--agent) and exits when Envoy has.

--mesh linkerd runs meshdrain's Linkerd proxy emulator instead (pkg/sim/linkerdsim): an admin
port (default http://127.0.0.1:4191) with /metrics, /ready and /live as linkerd2-proxy writes
them, and an inbound HTTP/1.1 proxy that counts request_total, response_total and the
transport metrics per target port (--probe-path requests on the "probe" route). On SIGTERM
or SIGINT it stops accepting on every port at once and exits when its connections have
closed: a native sidecar at once (the app is taken to have exited), a classic one after
--wait-before-exit. The Envoy flags (--profile, --agent, ...) do not apply to it.`

// emulateExample are emulate's examples.
const emulateExample = `  # a sidecar in front of an app on :8080, clients connect to 127.0.0.1:15006
  meshdrain-sim emulate --inbound '8080=127.0.0.1:15006>127.0.0.1:8080'

  # Istio < 1.23 names, default Istio stats inclusion, EXIT_ON_ZERO_ACTIVE_CONNECTIONS
  meshdrain-sim emulate --inbound 8080=127.0.0.1:8080 --profile istio-legacy \
    --inclusion istio-default --agent exit-on-zero

  # a large mesh: 5000 outbound clusters (an unfiltered /stats of 100k+ lines)
  meshdrain-sim emulate --inbound 8080=127.0.0.1:8080 --extra-clusters 5000

  # a Linkerd proxy in front of the same app, admin on 127.0.0.1:4191
  meshdrain-sim emulate --mesh linkerd --inbound '8080=127.0.0.1:14143>127.0.0.1:8080' --probe-path /healthz`

func newEmulateCommand(s streams) *cobra.Command {
	opts := defaultEmulateOptions()
	cmd := &cobra.Command{
		Use:     "emulate --inbound PORT=APP_ADDR [flags]",
		Short:   "Run an emulated Istio sidecar (Envoy admin API, inbound proxy, pilot-agent) or Linkerd proxy in the foreground",
		Long:    emulateLong,
		Example: emulateExample,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if opts.mesh == mesh.Linkerd {
				return runEmulateLinkerd(cmd, s, opts)
			}
			if opts.mesh != mesh.Istio {
				return usageError("--mesh %q: want istio or linkerd", opts.mesh)
			}
			if opts.admin == "" {
				opts.admin = envoy.DefaultURL
			}
			cfg := opts.cfg
			addr, err := adminListenAddr(opts.admin)
			if err != nil {
				return usageError("--admin: %v", err)
			}
			cfg.AdminAddr = addr
			cfg.Profile = envoysim.Profile(opts.profile)
			cfg.Inclusion = envoysim.Inclusion(opts.inclusion)
			cfg.Agent = envoysim.AgentMode(opts.agent)
			for _, spec := range opts.inbound {
				in, err := envoysim.ParseInboundPort(spec)
				if err != nil {
					return usageError("--inbound: %v", err)
				}
				cfg.Inbound = append(cfg.Inbound, in)
			}
			logger, closeLog, err := cli.NewLogger(opts.logFormat, "", s.err, zapcore.InfoLevel)
			if err != nil {
				return err
			}
			defer closeLog()
			cfg.Logger = logger
			return runEmulate(cmd, s.out, cfg)
		},
	}
	f := cmd.Flags()
	f.StringVar((*string)(&opts.mesh), "mesh", string(opts.mesh), "the sidecar to emulate: istio (an Envoy sidecar) or linkerd")
	f.StringVar(&opts.admin, "admin", "", "the admin API's base URL, as prestop, status and check take it (http://HOST:PORT; port 0 picks a free one; default "+envoy.DefaultURL+", Linkerd "+linkerd.DefaultAdminURL+")")
	f.StringVar(&opts.injection, "injection", opts.injection, "linkerd: native (SIGTERM once the app has exited) or classic")
	f.DurationVar(&opts.wait, "wait-before-exit", 0, "linkerd, classic: the proxy's preStop sleep (proxy-wait-before-exit-seconds)")
	f.StringArrayVar(&opts.probePaths, "probe-path", nil, "linkerd: a kubelet probe path on the app's ports, counted on the probe route (repeatable)")
	f.StringArrayVar(&opts.inbound, "inbound", nil, "inbound port, PORT=APP_ADDR or PORT=LISTEN_ADDR>APP_ADDR, PORT/tcp=... for a TCP proxy port, PORT/grpc=... for an HTTP/2 (h2c) port (repeatable)")
	f.StringVar(&opts.profile, "profile", opts.profile, "stat naming: envoy, istio (>= 1.23), istio-legacy (< 1.23) or istio-1.16 (<= 1.16: telemetry v2 istio_requests_total names)")
	f.StringVar(&opts.inclusion, "inclusion", opts.inclusion, "stats kept: all, or istio-default (Istio's default inclusion list)")
	f.StringArrayVar(&opts.cfg.InclusionPrefixes, "inclusion-prefix", nil, "extra stat prefix kept under --inclusion istio-default (repeatable), as sidecar.istio.io/statsInclusionPrefixes")
	f.StringVar(&opts.cfg.BindAddress, "bind-address", opts.cfg.BindAddress, "address in Istio's inbound HTTP stat prefix (0.0.0.0 or a pod IP)")
	f.DurationVar(&opts.cfg.DrainTime, "drain-time", opts.cfg.DrainTime, "Envoy --drain-time-s (Istio drainDuration)")
	f.StringVar(&opts.cfg.DrainStrategy, "drain-strategy", opts.cfg.DrainStrategy, "Envoy --drain-strategy: immediate (Istio) or gradual")
	f.BoolVar(&opts.cfg.NonGracefulDrainNotifies, "non-graceful-drain-notifies", false, "newest Envoy: a drain without graceful also drains connections, and skip_exit needs no graceful")
	f.StringVar(&opts.agent, "agent", opts.agent, "pilot-agent mode: none, classic, exit-on-zero or native")
	f.DurationVar(&opts.cfg.TerminationDrainDuration, "termination-drain-duration", opts.cfg.TerminationDrainDuration, "classic: time from SIGTERM until pilot-agent kills Envoy")
	f.DurationVar(&opts.cfg.MinimumDrainDuration, "minimum-drain-duration", opts.cfg.MinimumDrainDuration, "exit-on-zero: MINIMUM_DRAIN_DURATION")
	f.DurationVar(&opts.cfg.ExitOnZeroPoll, "exit-on-zero-poll", opts.cfg.ExitOnZeroPoll, "exit-on-zero: interval of pilot-agent's active connection poll")
	f.DurationVar(&opts.cfg.ExitOnZeroDeadline, "exit-on-zero-deadline", 0, "exit-on-zero: give up waiting after this long (0: never, as older pilot-agents)")
	f.IntVar(&opts.cfg.ExtraClusters, "extra-clusters", 0, "outbound clusters to add, about 20 stats each")
	f.IntVar(&opts.cfg.Workers, "workers", opts.cfg.Workers, "Envoy worker threads (per-worker listener stats)")
	f.StringVar(&opts.logFormat, "log-format", opts.logFormat, "log format on stderr: json or console")
	return cmd
}

// runEmulateLinkerd runs the Linkerd proxy emulator until it exits or the command's context
// ends; the latter is the pod's deletion and, for a native sidecar, the app's exit.
func runEmulateLinkerd(cmd *cobra.Command, s streams, opts emulateOptions) error {
	if opts.admin == "" {
		opts.admin = linkerd.DefaultAdminURL
	}
	addr, err := adminListenAddr(opts.admin)
	if err != nil {
		return usageError("--admin: %v", err)
	}
	cfg := linkerdsim.Config{AdminAddr: addr, Injection: linkerdsim.Injection(opts.injection), WaitBeforeExit: opts.wait, ProbePaths: opts.probePaths}
	for _, spec := range opts.inbound {
		in, err := envoysim.ParseInboundPort(spec)
		if err != nil {
			return usageError("--inbound: %v", err)
		}
		cfg.Inbound = append(cfg.Inbound, linkerdsim.InboundPort{Port: in.Port, ListenAddr: in.ListenAddr, AppAddr: in.AppAddr})
	}
	logger, closeLog, err := cli.NewLogger(opts.logFormat, "", s.err, zapcore.InfoLevel)
	if err != nil {
		return err
	}
	defer closeLog()
	cfg.Logger = logger
	proxy, err := linkerdsim.Start(cfg)
	if err != nil {
		return usageError("%v", err)
	}
	fmt.Fprintf(s.out, "admin: %s\n", proxy.AdminURL())
	for _, in := range cfg.Inbound {
		fmt.Fprintf(s.out, "inbound %d: %s -> %s\n", in.Port, proxy.InboundAddr(in.Port), in.AppAddr)
	}
	select {
	case <-proxy.Done():
	case <-cmd.Context().Done():
		proxy.Terminate()
		proxy.AppExited() // a native sidecar: the kubelet's SIGTERM once the app is gone
		<-proxy.Done()
	}
	logger.Info("emulator stopped", zap.String("reason", proxy.ExitReason()))
	return nil
}

// adminListenAddr turns the --admin URL into the address to listen on: the same spelling as
// prestop's --admin, so one value serves both sides of a smoke test.
func adminListenAddr(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "http" || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.User != nil {
		return "", fmt.Errorf("%q: want an http URL with no path, e.g. http://127.0.0.1:15000", raw)
	}
	if u.Port() == "" {
		return "", fmt.Errorf("%q: give the port, e.g. http://127.0.0.1:15000", raw)
	}
	return u.Host, nil
}

// runEmulate runs the sidecar until Envoy exits or the command's context ends; in the latter
// case it acts as the kubelet's SIGTERM and waits for Envoy to exit.
func runEmulate(cmd *cobra.Command, out io.Writer, cfg envoysim.Config) error {
	locked := &lockedWriter{w: out}
	cfg.AccessLog = locked
	sidecar, err := envoysim.Start(cfg)
	if err != nil {
		return usageError("%v", err)
	}
	fmt.Fprintf(locked, "admin: %s\n", sidecar.AdminURL())
	for _, in := range cfg.Inbound {
		fmt.Fprintf(locked, "inbound %d: %s -> %s\n", in.Port, sidecar.InboundAddr(in.Port), in.AppAddr)
	}
	select {
	case <-sidecar.Done():
	case <-cmd.Context().Done():
		sidecar.Terminate()
		<-sidecar.Done()
	}
	cfg.Logger.Info("emulator stopped", zap.String("reason", sidecar.ExitReason()))
	return nil
}

// lockedWriter keeps the banner and access log lines whole.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
