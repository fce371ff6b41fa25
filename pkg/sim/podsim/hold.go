package podsim

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meshdrain/meshdrain/pkg/hook/drain"
	"github.com/meshdrain/meshdrain/pkg/hook/hold"
	"github.com/meshdrain/meshdrain/pkg/hook/risk"
)

// Defaults of meshdrain hold that plan leaves to it, passed explicitly so that they are
// scaled too.
const (
	holdPrestopWait    = hold.DefaultPrestopWait
	holdConnectTimeout = drain.DefaultConnectTimeout
)

// holds says whether the sidecar's preStop is `meshdrain hold`: regime (b) as plan writes it.
func (spec SidecarSpec) holds() bool { return len(spec.PlanHoldArgs) > 0 }

// holdChannels numbers the channels of this process's pods.
var holdChannels atomic.Uint64

// newHoldChannel is one pod's channel between prestop and hold. The pods of a run, and of
// runs side by side, share one network namespace (this machine's), and so one abstract
// namespace: each needs its own name, never the default @meshdrain-hold, which a real hold
// on this machine could hold.
func newHoldChannel() string {
	return fmt.Sprintf("@meshdrain-sim-%d-%d", os.Getpid(), holdChannels.Add(1))
}

// HoldEvent is meshdrain hold's final event ("hold finished"): why the proxy's preStop
// returned when it did.
type HoldEvent struct {
	Reason      string  `json:"reason"`
	Prestop     string  `json:"prestop"`
	ElapsedPodS float64 `json:"elapsed_pod_s"`
	// ReturnedS is when the kubelet saw the hook return, in pod time from the deletion (zero
	// when it was killed with its container).
	ReturnedS   float64 `json:"returned_s,omitempty"`
	DrainCalled bool    `json:"drain_called"`
	ExitCode    int     `json:"exit_code"`
	// Args are the flags hold ran with (durations already scaled).
	Args []string `json:"args"`
	// Raw is the whole event as logged.
	Raw map[string]any `json:"raw,omitempty"`
}

// proxyHold is the istio-proxy container's running preStop, `meshdrain hold`.
type proxyHold struct {
	done   chan struct{}
	err    error
	event  *HoldEvent
	stderr bytes.Buffer
	cancel context.CancelFunc
	once   sync.Once
}

// planArgs overlays the flags plan writes on the simulator's own: every duration plan writes
// is scaled, a flag plan writes takes the place of the simulator's (all its values, for a
// repeatable one such as --ignore-source), and --log-file is left out (the simulator reads the
// hook's stderr). base is the subcommand then "--flag value" pairs; planned is the subcommand
// then "--flag=value" tokens, as plan writes them.
func planArgs(base, planned []string, sc Scenario) []string {
	values := map[string][]string{}
	var order []string
	for _, tok := range planned[1:] {
		name, value, _ := strings.Cut(strings.TrimPrefix(tok, "--"), "=")
		if name == "log-file" {
			continue
		}
		if _, seen := values[name]; !seen {
			order = append(order, name)
		}
		values[name] = append(values[name], scaledFlag(sc, name, value))
	}
	written := map[string]bool{}
	out := []string{base[0]}
	emit := func(name string) {
		if !written[name] {
			for _, v := range values[name] {
				out = append(out, "--"+name, v)
			}
			written[name] = true
		}
	}
	for i := 1; i+1 < len(base); i += 2 {
		name := strings.TrimPrefix(base[i], "--")
		if _, ok := values[name]; ok {
			emit(name)
			continue
		}
		out = append(out, base[i], base[i+1])
	}
	for _, name := range order {
		emit(name)
	}
	return out
}

// scaledFlag is a flag's value at the time scale: durations shrink by it (the lags of a
// --lag-dist too), and a rate (--rps-per-client) grows by as much.
func scaledFlag(sc Scenario, name, value string) string {
	if name == "rps-per-client" {
		if r, err := strconv.ParseFloat(value, 64); err == nil {
			return strconv.FormatFloat(r/sc.TimeScale, 'g', -1, 64)
		}
	}
	if name == "lag-dist" {
		return scaledLagDist(sc, value)
	}
	if d, err := time.ParseDuration(value); err == nil {
		return sc.scale(d).String()
	}
	return value
}

// scaledLagDist is a --lag-dist with every lag at the time scale (shares unchanged); a value
// that does not parse is passed on for prestop to refuse.
func scaledLagDist(sc Scenario, value string) string {
	dist, err := risk.Parse(value)
	if err != nil {
		return value
	}
	points := dist.Points()
	for i := range points {
		points[i].At = sc.scale(points[i].At)
	}
	scaled, err := risk.New(points)
	if err != nil {
		return value
	}
	return scaled.String()
}

// holdGracePeriod is the --grace-period given to hold at the time scale: hold stops by the
// grace period less drain.KillMargin, a second that no flag scales, so the grace period is
// raised by what the scale takes off that second, and hold's bound falls where plan says in
// pod time (deadline + app drain, within grace − 1s).
func holdGracePeriod(sc Scenario, grace time.Duration) time.Duration {
	return sc.scale(grace) + drain.KillMargin - sc.scale(drain.KillMargin)
}

// holdArgs is istio-proxy's preStop as plan writes it (spec.PlanHoldArgs), scaled, with
// what the simulated pod needs: its own channel, the app's real port (the app listens on a
// free loopback port), pilot-agent's /drain on the emulator's status port, the hook deadline
// prestop runs with, no outbound port (the simulated app calls nothing out), and a proxy user
// that owns none of the app's sockets (here every container is this process's user).
func holdArgs(sc Scenario, spec SidecarSpec, channel, drainURL string, appPort int) []string {
	grace := sc.grace(spec)
	base := []string{"hold",
		"--channel", channel,
		"--port", strconv.Itoa(appPort),
		"--outbound-port", "0",
		"--proxy-uid", strconv.Itoa(os.Getuid() + 1),
		"--drain-url", drainURL,
		"--grace-period", "",
		"--app-drain", sc.scale(spec.MeshdrainAppDrain).String(),
		"--deadline", sc.scale(spec.MeshdrainDeadline).String(),
		"--prestop-wait", sc.scale(holdPrestopWait).String(),
		"--poll", max(drain.MinPoll, sc.scale(sc.Poll)).String(),
		"--connect-timeout", sc.scale(holdConnectTimeout).String(),
		"--log-format", "json",
	}
	args := planArgs(base, spec.PlanHoldArgs, sc)
	for i := range args {
		if args[i] == "--grace-period" {
			args[i+1] = holdGracePeriod(sc, grace).String()
		}
	}
	return args
}

// startHold runs the proxy's preStop; done is closed when it returns or is killed.
func startHold(ctx context.Context, sc Scenario, args []string) (*proxyHold, error) {
	if sc.MeshdrainBinary == "" {
		return nil, errors.New("no meshdrain binary to run as the proxy's preStop (hold)")
	}
	ctx, cancel := context.WithCancel(ctx)
	h := &proxyHold{done: make(chan struct{}), cancel: cancel}
	cmd := exec.CommandContext(ctx, sc.MeshdrainBinary, args...)
	cmd.Env = environWithoutMeshdrain()
	cmd.Stderr = &h.stderr
	cmd.WaitDelay = time.Second
	if err := cmd.Start(); err != nil {
		cancel()
		return nil, fmt.Errorf("start %s hold: %w", sc.MeshdrainBinary, err)
	}
	go func() {
		defer close(h.done)
		err := cmd.Wait()
		code := cmd.ProcessState.ExitCode()
		if err != nil && ctx.Err() != nil {
			h.err = errPreStopKilled
		}
		ev, perr := parseHoldEvent(h.stderr.Bytes())
		if perr != nil {
			if h.err == nil {
				h.err = perr
			}
			ev = &HoldEvent{Reason: "(no final event)"}
		}
		ev.ExitCode = code
		ev.ElapsedPodS = roundS(ev.ElapsedPodS / sc.TimeScale)
		ev.Args = args[1:]
		h.event = ev
	}()
	return h, nil
}

// kill is the kubelet's SIGKILL of the proxy container, its preStop included.
func (h *proxyHold) kill() { h.once.Do(h.cancel) }

// parseHoldEvent finds hold's final event; ElapsedPodS is still in real seconds.
func parseHoldEvent(stderr []byte) (*HoldEvent, error) {
	lines := bytes.Split(stderr, []byte("\n"))
	for i := len(lines) - 1; i >= 0; i-- {
		line := bytes.TrimSpace(lines[i])
		if len(line) == 0 || line[0] != '{' {
			continue
		}
		var raw map[string]any
		if err := json.Unmarshal(line, &raw); err != nil || raw["msg"] != hold.FinalMessage {
			continue
		}
		ev := &HoldEvent{Raw: raw}
		ev.Reason, _ = raw["reason"].(string)
		ev.Prestop, _ = raw["prestop"].(string)
		ev.DrainCalled, _ = raw["drain_called"].(bool)
		ms, _ := raw["elapsed_ms"].(float64)
		ev.ElapsedPodS = ms / 1000
		return ev, nil
	}
	tail := stderr
	if len(tail) > 400 {
		tail = tail[len(tail)-400:]
	}
	return nil, fmt.Errorf("meshdrain hold logged no %q event; stderr ends with %q", hold.FinalMessage, tail)
}
