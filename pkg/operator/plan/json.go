package plan

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/meshdrain/meshdrain/pkg/hook/drain"
	"github.com/meshdrain/meshdrain/pkg/localhttp"
	"github.com/meshdrain/meshdrain/pkg/mesh"
)

// Release is the meshdrain release this tree builds; the Makefile's RELEASE and the
// examples' image tag must equal it (examples_test checks both).
const Release = "v0.1.0"

// DefaultImage is the meshdrain image the init container runs unless told otherwise.
const DefaultImage = "ghcr.io/meshdrain/meshdrain:" + Release

// jsonPlan is plan -o json: every derived number, as the flags and manifests spell it
// ("15s"), plus the whole-second grace period, so scripts need no duration parser.
type jsonPlan struct {
	// Mesh is written for every mesh but Istio, so that an Istio plan's JSON stays what it was.
	Mesh mesh.Mesh `json:"mesh,omitempty"`
	// Sidecar is empty for a pod without one (meshless).
	Sidecar                     Sidecar           `json:"sidecar,omitempty"`
	Inputs                      map[string]any    `json:"inputs"`
	LastClientLag               string            `json:"last_client_lag"`
	TypicalLastClientLag        string            `json:"typical_last_client_lag,omitempty"`
	ExpectedFinish              string            `json:"expected_finish"`
	TypicalFinish               string            `json:"typical_finish,omitempty"`
	Margin                      string            `json:"margin"`
	GracePeriodSeconds          int               `json:"termination_grace_period_seconds"`
	Deadline                    string            `json:"deadline"`
	AppDrain                    string            `json:"app_drain"`
	AppExitWorst                string            `json:"app_exit_worst"`
	TerminationDrainDuration    string            `json:"termination_drain_duration,omitempty"`
	ExitOnZeroActiveConnections bool              `json:"exit_on_zero_active_connections,omitempty"`
	MinimumDrainDuration        string            `json:"minimum_drain_duration,omitempty"`
	DrainDuration               string            `json:"drain_duration,omitempty"`
	WaitBeforeExitSeconds       int               `json:"proxy_wait_before_exit_seconds,omitempty"`
	Annotations                 map[string]string `json:"annotations"`
	PrestopCommand              []string          `json:"prestop_command"`
	// Env and ReadinessProbe are a meshless plan's: the app container's variables from the
	// downward API (name: fieldPath), and the probe added where the container has none (with
	// -f, only when the workload's has none).
	Env            map[string]string `json:"env,omitempty"`
	ReadinessProbe *jsonProbe        `json:"readiness_probe,omitempty"`
	// DeferSidecarDrain is written for Istio plans: true is regime (b), with the istio-proxy
	// override whose preStop is ProxyPrestopCommand.
	DeferSidecarDrain   *bool         `json:"defer_sidecar_drain,omitempty"`
	ProxyPrestopCommand []string      `json:"proxy_prestop_command,omitempty"`
	Timeline            []jsonStep    `json:"timeline"`
	Arithmetic          []jsonLine    `json:"arithmetic"`
	Warnings            []string      `json:"warnings"`
	Kept                []jsonKept    `json:"kept,omitempty"`
	Workload            *jsonWorkload `json:"workload,omitempty"`
	// Lag is the evidence and the fit of a plan from --lag-from.
	Lag *jsonLag `json:"lag,omitempty"`
}

// jsonLag is what --lag-from read and fitted, and the arithmetic that turns it into settings.
type jsonLag struct {
	Sources    []jsonLagSource `json:"sources"`
	Summary    jsonLagSummary  `json:"summary"`
	Points     []jsonLagPoint  `json:"points"`
	LagDist    string          `json:"lag_dist"`
	Risk       float64         `json:"risk"`
	Arithmetic []jsonLine      `json:"arithmetic"`
	Warnings   []string        `json:"warnings"`
	Annotation string          `json:"annotation"`
}

type jsonLagSource struct {
	Name         string  `json:"name"`
	Kind         string  `json:"kind"`
	Drains       int     `json:"drains,omitempty"`
	Censored     int     `json:"censored,omitempty"`
	Skipped      int     `json:"skipped,omitempty"`
	Observations float64 `json:"observations,omitempty"`
	Series       int     `json:"series,omitempty"`
	Nodes        int     `json:"nodes,omitempty"`
	Summary      string  `json:"summary"`
}

type jsonLagSummary struct {
	Drains       int     `json:"drains"`
	Clients      int     `json:"clients"`
	Nodes        int     `json:"nodes"`
	Observations float64 `json:"observations"`
	Censored     int     `json:"censored"`
	Tail         float64 `json:"tail"`
	Skipped      int     `json:"skipped"`
	// Needed is the quantile the settings rest on (1 − risk), TooFew the warning when the
	// observations are fewer than it needs.
	Needed float64 `json:"needed_quantile"`
	TooFew string  `json:"too_few,omitempty"`
}

type jsonLagPoint struct {
	Share float64 `json:"share"`
	Lag   string  `json:"lag"`
	From  string  `json:"from"`
}

// lagJSON is the lag object of a plan from --lag-from; nil without.
func lagJSON(p Plan) *jsonLag {
	l := p.Input.LagFrom
	if l == nil {
		return nil
	}
	s := l.Fit.Summary
	out := &jsonLag{
		Summary: jsonLagSummary{Drains: s.Drains, Clients: s.Clients, Nodes: s.Nodes, Observations: s.Observations, Censored: s.Censored,
			Tail: s.Tail, Skipped: s.Skipped.Total(), Needed: s.Need, TooFew: s.TooFew},
		LagDist: l.Dist().String(), Risk: l.Risk, Warnings: append([]string{}, l.Fit.Warnings...), Annotation: l.annotation(p.Input.EDSLag),
	}
	for _, src := range l.Sources {
		js := jsonLagSource{Name: src.Name, Kind: src.Kind, Summary: sourceLine(src)}
		if h := src.Histogram; h != nil {
			js.Observations, js.Series, js.Nodes = h.Count(), len(h.SeriesCounts), len(h.Nodes())
		} else {
			js.Drains, js.Censored, js.Skipped = len(src.Samples), src.Samples.Censored(), src.Skipped.Total()
		}
		out.Sources = append(out.Sources, js)
	}
	for _, pt := range l.Fit.Points {
		out.Points = append(out.Points, jsonLagPoint{pt.Q, fmtD(pt.At), pt.From})
	}
	for _, line := range p.lagArithmetic() {
		out.Arithmetic = append(out.Arithmetic, jsonLine{line.Name, fmtD(line.Value), line.Why})
	}
	return out
}

// jsonKept is a value of the pod's that the plan keeps although a shorter one suffices.
type jsonKept struct {
	Setting  string `json:"setting"`
	Value    string `json:"value"`
	Suffices string `json:"suffices"`
}

// jsonProbe is a tcpSocket readiness probe.
type jsonProbe struct {
	TCPSocketPort int `json:"tcp_socket_port"`
	PeriodSeconds int `json:"period_seconds"`
}

type jsonStep struct {
	At    string `json:"at"`
	Until string `json:"until,omitempty"`
	Worst string `json:"worst,omitempty"`
	Who   string `json:"who"`
	What  string `json:"what"`
}

type jsonLine struct {
	Name  string `json:"name"`
	Value string `json:"value"`
	Why   string `json:"why"`
}

type jsonWorkload struct {
	Kind      string   `json:"kind"`
	Name      string   `json:"name"`
	Namespace string   `json:"namespace,omitempty"`
	Container string   `json:"container"`
	Ports     []int    `json:"ports"`
	Changes   []string `json:"changes"`
	Replaced  string   `json:"replaced_prestop,omitempty"`
	// ProxyReplaced is istio-proxy's preStop replaced with meshdrain hold (--replace-prestop).
	ProxyReplaced string `json:"replaced_proxy_prestop,omitempty"`
}

// WriteJSON prints the plan as one JSON object; with an edit, also the workload it changes.
func WriteJSON(w io.Writer, p Plan, dir string, e *Edit) error {
	in := p.Input
	inputs := jsonInputs(p)
	out := jsonPlan{
		Sidecar:                     in.Sidecar,
		Inputs:                      inputs,
		LastClientLag:               fmtD(p.LastClientLag),
		TypicalLastClientLag:        optD(p.TypicalLastClientLag),
		ExpectedFinish:              fmtD(p.ExpectedFinish),
		TypicalFinish:               optD(p.TypicalFinish),
		Margin:                      fmtD(p.Margin),
		GracePeriodSeconds:          int(p.GracePeriod / time.Second),
		Deadline:                    fmtD(p.Deadline),
		AppDrain:                    fmtD(p.AppDrain),
		AppExitWorst:                fmtD(p.AppExitWorst),
		TerminationDrainDuration:    optD(p.TerminationDrainDuration),
		ExitOnZeroActiveConnections: p.ExitOnZeroActiveConnections,
		MinimumDrainDuration:        optD(p.MinimumDrainDuration),
		DrainDuration:               optD(p.DrainDuration),
		WaitBeforeExitSeconds:       int(p.WaitBeforeExit / time.Second),
		Annotations:                 map[string]string{},
		PrestopCommand:              append([]string{strings.TrimRight(dir, "/") + "/meshdrain"}, p.PrestopArgs()...),
		Warnings:                    append([]string{}, p.Warnings...),
		Lag:                         lagJSON(p),
	}
	p.mesh().writeJSON(p, strings.TrimRight(dir, "/")+"/meshdrain", e, &out)
	for _, a := range p.Annotations() {
		out.Annotations[a.Key] = a.Value
	}
	for _, k := range p.Kept {
		out.Kept = append(out.Kept, jsonKept{k.Setting, fmtD(k.Value), fmtD(k.Suffices)})
	}
	for _, s := range p.Steps {
		out.Timeline = append(out.Timeline, jsonStep{At: fmtD(s.At), Until: optD(s.Until), Worst: optD(s.Worst), Who: s.Who, What: s.What})
	}
	for _, l := range p.Arithmetic {
		out.Arithmetic = append(out.Arithmetic, jsonLine{l.Name, fmtD(l.Value), l.Why})
	}
	if e != nil && e.workload != nil {
		wl := e.workload
		out.Workload = &jsonWorkload{Kind: wl.Kind, Name: wl.Name, Namespace: wl.Namespace, Container: wl.Container,
			Ports: append([]int{}, wl.Ports...), Changes: append([]string{}, e.Changes...), Replaced: e.Replaced, ProxyReplaced: e.ProxyReplaced}
		for _, a := range e.annotations {
			out.Annotations[a.Key] = a.Value // the merged values
		}
		out.PrestopCommand = e.PrestopCommand() // with the flags the workload's preStop keeps
		if cmd := e.ProxyPrestopCommand(); cmd != nil {
			out.ProxyPrestopCommand = cmd
		}
	}
	data, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return err
	}
	_, err = w.Write(append(data, '\n'))
	return err
}

// jsonInputs are the plan's inputs as -o json names them; a mesh adds its own (writeJSON).
func jsonInputs(p Plan) map[string]any {
	in := p.Input
	inputs := map[string]any{
		"p99": fmtD(in.P99), "eds_lag": fmtD(in.EDSLag), "quiet": fmtD(in.Quiet), "poll": fmtD(in.Poll),
		"app_drain": fmtD(p.AppDrain),
	}
	if len(in.Ports) > 0 {
		inputs["ports"] = in.Ports
	}
	if in.AppMetrics != "" {
		inputs["app_metrics"] = localhttp.Redact(in.AppMetrics)
		if in.AppRequests != "" {
			inputs["app_requests"] = in.AppRequests
		}
	}
	if in.MinWait != drain.DefaultMinWait {
		inputs["min_wait"] = fmtD(in.MinWait)
	}
	if in.RPSPerClient > 0 {
		inputs["rps_per_client"] = in.RPSPerClient
	}
	if in.ClientPeriod > 0 {
		inputs["client_period"] = fmtD(in.ClientPeriod)
	}
	if in.EDSLagMedian > 0 {
		inputs["eds_lag"] = fmt.Sprintf("p50=%s,p99=%s", fmtD(in.EDSLagMedian), fmtD(in.EDSLag))
		inputs["clients"] = in.Clients
	}
	if in.CurrentGracePeriod > 0 {
		inputs["current_grace_period"] = fmtD(in.CurrentGracePeriod)
	}
	if l := in.LagFrom; l != nil {
		inputs["lag_from"] = SourceNames(l.Sources)
		inputs["risk"] = l.Risk
	}
	return inputs
}

func optD(d time.Duration) string {
	if d == 0 {
		return ""
	}
	return fmtD(d)
}

// WriteChanges prints, after the plan's text, what it changes in the workload and how to
// check the rolled-out pod.
func WriteChanges(w io.Writer, p Plan, e *Edit) error {
	ew := &errWriter{w: w}
	wl := e.workload
	ew.printf("\nChanges to %s/%s (container %s)\n\n", wl.Kind, wl.Name, wl.Container)
	if len(e.Changes) == 0 {
		ew.printf("  - none: the workload already has this plan\n")
	}
	for _, c := range e.Changes {
		lines := wrap(c, textWidth-4)
		ew.printf("  - %s\n", lines[0])
		for _, l := range lines[1:] {
			ew.printf("    %s\n", l)
		}
	}
	for _, note := range []string{e.ReplacementNote(), e.ProxyReplacementNote()} {
		if note != "" {
			ew.printf("  - %s\n", note)
		}
	}
	ew.printf("\nOnce rolled out, check a pod (exit 0 when prestop will find its signal and the timing holds):\n\n")
	ns := ""
	if wl.Namespace != "" {
		ns = " -n " + wl.Namespace
	}
	check := p.mesh().rolloutCheck(p, e)
	ew.printf("  kubectl exec%s %s/%s -c %s -- %s\n", ns, strings.ToLower(wl.Kind), wl.Name, wl.Container, shellJoin(check))
	if cmd := e.ProxyPrestopCommand(); cmd != nil {
		// hold's own check, with the flags its preStop runs with: the proxy's preStop as merged.
		ew.printf("  kubectl exec%s %s/%s -c %s -- %s --validate\n", ns, strings.ToLower(wl.Kind), wl.Name, ProxyContainerName, shellJoin(cmd))
	}
	return ew.err
}

// checkCommand is the `meshdrain check` that verifies a pod with a sidecar rolled out with
// the plan: before are the mesh's flags before the ports, after those after the timing.
func checkCommand(p Plan, e *Edit, before, after []string) []string {
	ports := e.workload.Ports
	cmd := append([]string{e.opts.Dir + "/meshdrain", "check"}, before...)
	for _, port := range ports {
		cmd = append(cmd, fmt.Sprintf("--port=%d", port))
	}
	cmd = append(cmd, "--grace-period="+fmtD(p.GracePeriod), "--app-drain="+fmtD(p.AppDrain))
	return append(cmd, after...)
}

// shellJoin joins a command for a shell to run: an argument a shell would change (such as
// --ignore-source=$(HOST_IP), which prestop itself reads in the pod) is single-quoted.
func shellJoin(args []string) string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = a
		if strings.ContainsFunc(a, func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("_@%+=:,./-", r))
		}) {
			out[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
	}
	return strings.Join(out, " ")
}
