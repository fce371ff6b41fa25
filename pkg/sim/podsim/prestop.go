package podsim

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/meshdrain/meshdrain/pkg/hook/drain"
	"github.com/meshdrain/meshdrain/pkg/mesh"
	"github.com/meshdrain/meshdrain/pkg/operator/plan"
)

// Istio's pilot-agent polls every second under EXIT_ON_ZERO_ACTIVE_CONNECTIONS. The others
// are meshdrain prestop's defaults, passed explicitly so that they are scaled too.
const (
	exitOnZeroPoll            = time.Second
	meshdrainConnectTimeout   = 2 * time.Second
	meshdrainLatencyAllowance = time.Second
	meshdrainFallbackWait     = 5 * time.Second
)

// MeshdrainEvent is meshdrain's own final log event ("drain finished"), the evidence of why
// the preStop returned when it did. Durations in it are real time; ElapsedPodS converts.
type MeshdrainEvent struct {
	Reason             string  `json:"reason"`
	ElapsedMS          float64 `json:"elapsed_ms"`
	ElapsedPodS        float64 `json:"elapsed_pod_s"`
	Signal             string  `json:"signal,omitempty"`
	RequestsAfterDrain float64 `json:"requests_after_drain"`
	ActiveAtEnd        float64 `json:"active_at_end"`
	ExitCode           int     `json:"exit_code"`
	// Risk is the figure meshdrain stated at its stop (prestop --lag-dist): the probability
	// that some client still routed to the pod then. nil without a lag distribution.
	Risk *float64 `json:"risk,omitempty"`
	// Args are the flags meshdrain ran with (durations already scaled).
	Args []string `json:"args"`
	// Raw is the whole event as logged.
	Raw map[string]any `json:"raw,omitempty"`
}

// statedRisk is ", stated risk 0.000812" for a run whose meshdrain stated a figure at its
// stop, "" otherwise: the text, the timeline and the SVG say it beside the reason.
func (ev *MeshdrainEvent) statedRisk() string {
	if ev == nil || ev.Risk == nil {
		return ""
	}
	return ", stated risk " + strconv.FormatFloat(*ev.Risk, 'g', 3, 64)
}

// errPreStopKilled is a hook the kubelet killed at the end of the grace period: it did not
// complete, which the kubelet only logs, unlike a hook that failed (FailedPreStopHook).
var errPreStopKilled = errors.New("killed")

// preStop is a running preStop hook of the app container.
type preStop struct {
	done   chan struct{}
	err    error // why the hook failed, if it did (a failed hook still ends in SIGTERM)
	event  *MeshdrainEvent
	stderr bytes.Buffer
	cancel context.CancelFunc
	once   sync.Once
}

// meshdrainArgs are the flags a pod with this scenario and sidecar would give meshdrain,
// every duration multiplied by the time scale. The deadline is always passed explicitly,
// because meshdrain's derived default subtracts an unscaled second. Where the pod runs plan's
// preStop (regime (b), or a pod without a sidecar), plan's own prestop flags
// (spec.PlanPrestopArgs) take the place of these.
func meshdrainArgs(sc Scenario, spec SidecarSpec, adminURL string, listenerPort int) []string {
	grace := sc.grace(spec)
	appDrain := sc.AppDrain
	if spec.MeshdrainAppDrain > 0 {
		appDrain = spec.MeshdrainAppDrain
	}
	deadline := grace - appDrain - time.Second
	if spec.MeshdrainDeadline > 0 {
		deadline = spec.MeshdrainDeadline
	}
	quiet, minWait := sc.Quiet, sc.MinWait
	if spec.MeshdrainQuiet > 0 {
		quiet = spec.MeshdrainQuiet
	}
	if spec.MeshdrainMinWait > 0 {
		minWait = spec.MeshdrainMinWait
	}
	args := []string{"prestop"}
	switch spec.Mesh {
	case mesh.Linkerd:
		args = append(args, "--mesh", string(mesh.Linkerd), "--admin", adminURL, "--port", strconv.Itoa(sc.Port))
	case MeshNone:
		// No sidecar: the kernel is read for the app's own listening port, and the kubelet's
		// probes, from the node's address, are nobody's traffic.
		args = append(args, "--mesh", string(MeshNone), "--port", strconv.Itoa(listenerPort), "--ignore-source", probeSourceIP.String())
		if sc.Meshless.AppMetrics {
			args = append(args, "--app-metrics", fmt.Sprintf("http://127.0.0.1:%d%s", listenerPort, appMetricsPath), "--app-requests", appRequestsSelector)
		}
	default:
		args = append(args, "--admin", adminURL, "--port", strconv.Itoa(sc.Port))
	}
	args = append(args,
		"--grace-period", sc.scale(grace).String(),
		"--app-drain", sc.scale(appDrain).String(),
		"--deadline", sc.scale(deadline).String(),
		"--quiet", sc.scale(quiet).String(),
		"--min-wait", sc.scale(minWait).String(),
		"--streams-wait", sc.scale(sc.StreamsWait).String(),
		"--poll", sc.scale(sc.Poll).String(),
		"--connect-timeout", sc.scale(meshdrainConnectTimeout).String(),
		"--latency-allowance", sc.scale(meshdrainLatencyAllowance).String(),
		"--fallback-wait", sc.scale(meshdrainFallbackWait).String(),
		"--log-format", "json",
	)
	if spec.MeshdrainClientPeriod > 0 {
		args = append(args, "--client-period", sc.scale(spec.MeshdrainClientPeriod).String())
	}
	if spec.MeshdrainLagBound > 0 {
		args = append(args, "--eds-lag-bound", sc.scale(spec.MeshdrainLagBound).String(),
			"--settled-quiet", sc.scale(drain.DefaultQuiet).String())
	}
	// The emulator's stats name Istio's 15006 but it listens on a free loopback port: the
	// clients' connections are on that one.
	if spec.Mesh != mesh.Linkerd && spec.Mesh != MeshNone && listenerPort > 0 {
		args = append(args, "--inbound-listener-port", strconv.Itoa(listenerPort))
	}
	if spec.DeferDrain || spec.MeshdrainDrainAtEnd {
		args = append(args, "--drain-at", "end")
	}
	if spec.MeshdrainClientEvidence != "" {
		args = append(args, "--client-evidence", spec.MeshdrainClientEvidence)
	}
	// The pod's own channel to its hold; none where the proxy runs no hold, so that a prestop
	// never reports to another pod's (or this machine's) hold.
	args = append(args, "--hold-channel", spec.holdChannel)
	if planned := spec.PlanPrestopArgs; planned != nil {
		if spec.Mesh == MeshNone {
			planned = onListenerPort(planned, sc.Port, listenerPort)
		}
		args = planArgs(args, planned, sc)
	}
	return args
}

// onListenerPort is a meshless plan's preStop for the simulated pod: plan's --port and the
// port of its --app-metrics name the pod's port (sc.Port), and the simulated app listens on a
// free loopback port instead.
func onListenerPort(planned []string, podPort, listenerPort int) []string {
	pod, listener := strconv.Itoa(podPort), strconv.Itoa(listenerPort)
	out := make([]string, len(planned))
	for i, tok := range planned {
		name, value, _ := strings.Cut(strings.TrimPrefix(tok, "--"), "=")
		switch name {
		case "port":
			if value == pod {
				tok = "--port=" + listener
			}
		case "app-metrics":
			if u, err := url.Parse(value); err == nil && u.Port() == pod {
				u.Host = net.JoinHostPort(u.Hostname(), listener)
				tok = "--app-metrics=" + u.String()
			}
		}
		out[i] = tok
	}
	return out
}

// startPreStop runs the strategy's hook; done is closed when it returns or is killed.
// lastAnswered is closed when the last request that will reach the pod has been answered:
// only the oracle may look at it.
func startPreStop(ctx context.Context, sc Scenario, spec SidecarSpec, strat Strategy, adminURL string, listenerPort int, lastAnswered <-chan struct{}) (*preStop, error) {
	ctx, cancel := context.WithCancel(ctx)
	p := &preStop{done: make(chan struct{}), cancel: cancel}
	switch strat.Kind {
	case StrategyNone:
		cancel()
		close(p.done)
	case StrategyOracle:
		go func() {
			defer close(p.done)
			select {
			case <-lastAnswered:
			case <-ctx.Done():
				p.err = errPreStopKilled
			}
		}()
	case StrategySleep:
		go func() {
			defer close(p.done)
			t := time.NewTimer(sc.scale(strat.Sleep))
			defer t.Stop()
			select {
			case <-t.C:
			case <-ctx.Done():
				p.err = errPreStopKilled
			}
		}()
	case StrategyMeshdrain:
		if sc.MeshdrainBinary == "" {
			cancel()
			return nil, errors.New("no meshdrain binary to run as the preStop")
		}
		args := meshdrainArgs(sc, spec, adminURL, listenerPort)
		cmd := exec.CommandContext(ctx, sc.MeshdrainBinary, args...)
		cmd.Env = preStopEnv(spec)
		cmd.Stdout = nil
		cmd.Stderr = &p.stderr
		cmd.WaitDelay = time.Second
		started := time.Now()
		if err := cmd.Start(); err != nil {
			cancel()
			return nil, fmt.Errorf("start %s: %w", sc.MeshdrainBinary, err)
		}
		go func() {
			defer close(p.done)
			err := cmd.Wait()
			code := cmd.ProcessState.ExitCode()
			if err != nil && ctx.Err() != nil {
				p.err = errPreStopKilled
			} else if err != nil {
				p.err = fmt.Errorf("meshdrain exited %d", code)
			}
			ev, perr := parseFinalEvent(p.stderr.Bytes())
			if perr != nil {
				if p.err == nil {
					p.err = perr
				}
				ev = &MeshdrainEvent{Reason: "(no final event)", ElapsedMS: float64(time.Since(started).Milliseconds())}
			}
			ev.ExitCode = code
			ev.ElapsedPodS = ev.ElapsedMS / 1000 / sc.TimeScale
			ev.Args = args[1:]
			p.event = ev
		}()
	default:
		cancel()
		return nil, fmt.Errorf("unknown strategy %q", strat.Kind)
	}
	return p, nil
}

// kill is the kubelet's SIGKILL of the container the hook runs in.
func (p *preStop) kill() { p.once.Do(p.cancel) }

// preStopEnv is the hook's environment. A meshless plan's preStop leaves the kubelet's probes
// out with --ignore-source=$(HOST_IP), which prestop reads from its environment, where plan's
// downward API puts the node's address: here the address the simulated kubelet probes from.
func preStopEnv(spec SidecarSpec) []string {
	env := environWithoutMeshdrain()
	if spec.Mesh == MeshNone {
		env = append(env, plan.HostIPEnv+"="+probeSourceIP.String())
	}
	return env
}

// environWithoutMeshdrain keeps the caller's MESHDRAIN_* settings (meant for the simulate
// command itself) from changing the preStop under test.
func environWithoutMeshdrain() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "MESHDRAIN_") {
			env = append(env, kv)
		}
	}
	return env
}

// adminTimeouts counts the admin requests meshdrain logged as failed by a timeout, those its
// log suppressed after a logged one included; 0 for a hook other than meshdrain's.
func (p *preStop) adminTimeouts() int {
	n := 0
	for _, line := range bytes.Split(p.stderr.Bytes(), []byte("\n")) {
		if !bytes.Contains(line, []byte(`"admin request failed`)) {
			continue
		}
		var entry struct {
			Error      string  `json:"error"`
			Suppressed float64 `json:"suppressed"`
		}
		if json.Unmarshal(line, &entry) != nil {
			continue
		}
		if strings.Contains(entry.Error, "deadline exceeded") || strings.Contains(entry.Error, "timeout") {
			n += 1 + int(entry.Suppressed)
		}
	}
	return n
}

// parseFinalEvent finds meshdrain's last "drain finished" JSON log line.
func parseFinalEvent(stderr []byte) (*MeshdrainEvent, error) {
	lines := bytes.Split(stderr, []byte("\n"))
	for i := len(lines) - 1; i >= 0; i-- {
		line := bytes.TrimSpace(lines[i])
		if len(line) == 0 || line[0] != '{' {
			continue
		}
		var raw map[string]any
		if err := json.Unmarshal(line, &raw); err != nil || raw["msg"] != "drain finished" {
			continue
		}
		ev := &MeshdrainEvent{Raw: raw}
		ev.Reason, _ = raw["reason"].(string)
		ev.Signal, _ = raw["signal"].(string)
		ev.ElapsedMS, _ = raw["elapsed_ms"].(float64)
		ev.RequestsAfterDrain, _ = raw["requests_after_drain"].(float64)
		ev.ActiveAtEnd, _ = raw["active_at_end"].(float64)
		if figure, ok := raw["risk"].(float64); ok {
			ev.Risk = &figure
		}
		return ev, nil
	}
	tail := stderr
	if len(tail) > 400 {
		tail = tail[len(tail)-400:]
	}
	return nil, fmt.Errorf("meshdrain logged no \"drain finished\" event; stderr ends with %q", tail)
}
