package status

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/meshdrain/meshdrain/pkg/hook/regime"
	"github.com/meshdrain/meshdrain/pkg/mesh"
	"github.com/meshdrain/meshdrain/pkg/operator/output"
)

// Output formats of status and check: every command that prints data takes the same three.
const (
	OutputText = output.Text
	OutputJSON = output.JSON
	OutputYAML = output.YAML
)

// ParseOutput validates an -o value.
func ParseOutput(s string) (string, error) { return output.Parse(s) }

// WriteText writes the report for a person: a header, one row per inbound endpoint, hints.
// Unknown values print as "-", never as 0, so a missing stat is not mistaken for silence.
func WriteText(w io.Writer, r Report) error {
	switch r.Mesh {
	case mesh.Linkerd:
		return writeLinkerdText(w, r)
	case mesh.None:
		return writeKernelText(w, r)
	}
	var b strings.Builder
	version := ""
	if r.EnvoyVersion != "" {
		version = " (" + r.EnvoyVersion + ")"
	}
	fmt.Fprintf(&b, "admin:   %s%s\n", r.Admin, version)
	server := r.ServerState
	if r.DrainTime != "" || r.DrainStrategy != "" {
		server += fmt.Sprintf("  (envoy drain_time %s, drain_strategy %s)", orDash(r.DrainTime), orDash(r.DrainStrategy))
	}
	fmt.Fprintf(&b, "server:  %s\n", server)
	if lm := r.ListenerManager; lm != nil {
		stopped := "none stopped"
		if lm.InboundStopped() {
			stopped = num(lm.Stopped) + " STOPPED: new inbound connections are refused"
		}
		fmt.Fprintf(&b, "listeners: %s active, %s\n", num(lm.Active), stopped)
	}
	fmt.Fprintf(&b, "drain:   %s\n", drainText(r.Drain))
	if r.DrainRegime != "" {
		fmt.Fprintf(&b, "regime:  %s\n", regimeText(r))
	}
	fmt.Fprintf(&b, "naming:  %s (mesh: %s)\n", r.Naming, r.Mesh)
	fmt.Fprintf(&b, "signal:  %s\n\n", r.Signal)

	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "PORT\tNAME\tSIGNAL\tREQUESTS\tRATE/s\tACTIVE\tCONNECTIONS\t5XX\t5XX/s\tFAILURES*")
	if len(r.Inbound) == 0 {
		fmt.Fprintln(tw, "-\t(no inbound endpoint found)\t-\t-\t-\t-\t-\t-\t-\t-")
	}
	for _, p := range r.Inbound {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", portText(p.Port), p.Name, p.Signal,
			num(p.RequestsTotal), rate(p.RequestsRate), num(p.RequestsActive), num(p.ConnectionsActive),
			num(p.ServerErrorsTotal), rate(p.ServerErrorsRate), failuresText(p.Failures))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if r.Listener != nil {
		fmt.Fprintf(&b, "\nlistener %s: %s connections active, %s accepted\n", r.Listener.Address,
			num(r.Listener.ConnectionsActive), num(r.Listener.ConnectionsTotal))
	}
	if r.CompletedRequestsTotal != nil {
		fmt.Fprintf(&b, "completed requests (istio_requests_total, reporter=destination): %s\n", num(r.CompletedRequestsTotal))
	}
	if r.CompletedServerErrorsTotal != nil {
		perSecond := ""
		if r.CompletedServerErrorsRate != nil {
			perSecond = " (" + rate(r.CompletedServerErrorsRate) + "/s)"
		}
		fmt.Fprintf(&b, "completed with a 5xx (istio_requests_total, reporter=destination, every port): %s%s, by response flag: %s\n",
			num(r.CompletedServerErrorsTotal), perSecond, failuresText(r.CompletedServerErrors))
	}
	writeClients(&b, r)
	writeRisk(&b, r)
	b.WriteString("\n* the sidecar's own failures to reach the app, by the response flag it answered with: UF connect failed,\n" +
		"  UC the app closed the connection under a request, UT route timeout, UR the app reset the stream\n")
	for _, h := range r.Hints {
		fmt.Fprintf(&b, "\nhint: %s\n", h)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteLine writes the report as one line, for --watch when stdout is not a terminal (a log
// file, a pipe): one sample per line, greppable, without escape sequences.
func WriteLine(w io.Writer, r Report) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s state=%s signal=%s", r.SampledAt.UTC().Format(time.RFC3339), r.ServerState, r.Signal)
	if lm := r.ListenerManager; lm != nil {
		fmt.Fprintf(&b, " listeners_stopped=%s", num(lm.Stopped))
	}
	if r.Mesh != mesh.Linkerd && r.Mesh != mesh.None {
		fmt.Fprintf(&b, " drain=%s", drainToken(r.Drain))
	}
	if r.DrainRegime != "" {
		fmt.Fprintf(&b, " regime=%s", r.DrainRegime)
	}
	for _, p := range r.Inbound {
		fmt.Fprintf(&b, " | port=%s name=%s requests=%s rate=%s active=%s connections=%s 5xx=%s 5xx_rate=%s", portText(p.Port), p.Name,
			num(p.RequestsTotal), rate(p.RequestsRate), num(p.RequestsActive), num(p.ConnectionsActive),
			num(p.ServerErrorsTotal), rate(p.ServerErrorsRate))
		if r.Mesh == mesh.Linkerd {
			fmt.Fprintf(&b, " responses=%s probes=%s 5xx_codes=%s", num(p.ResponsesTotal), num(p.ProbeRequestsTotal), lineList(codesText(p.ServerErrorsByCode)))
		} else {
			fmt.Fprintf(&b, " failures=%s", lineList(failuresText(p.Failures)))
		}
	}
	if r.Listener != nil {
		fmt.Fprintf(&b, " | listener=%s connections=%s", r.Listener.Address, num(r.Listener.ConnectionsActive))
	}
	if r.CompletedRequestsTotal != nil {
		fmt.Fprintf(&b, " | completed=%s", num(r.CompletedRequestsTotal))
	}
	if r.CompletedServerErrorsTotal != nil {
		fmt.Fprintf(&b, " | completed_5xx=%s completed_5xx_rate=%s completed_5xx_flags=%s", num(r.CompletedServerErrorsTotal),
			rate(r.CompletedServerErrorsRate), lineList(failuresText(r.CompletedServerErrors)))
	}
	switch {
	case r.Clients != nil && r.Mesh == mesh.None:
		counts := clientCounts(r.Clients)
		fmt.Fprintf(&b, " | clients opening=%d sending=%d idle=%d ignored=%d", counts[KernelOpening], counts[KernelSending], counts[KernelIdle], counts[KernelIgnored])
	case r.Clients != nil:
		counts := clientCounts(r.Clients)
		fmt.Fprintf(&b, " | clients holding=%d sending=%d left=%d no_evidence=%d", counts["holding"], counts["sending"], counts["left"], counts["no-evidence"])
	}
	if k := r.Risk; k != nil {
		fmt.Fprintf(&b, " | risk=%s level=%s", riskText(k.Figure), strconv.FormatFloat(k.Level, 'g', -1, 64))
	}
	b.WriteByte('\n')
	_, err := io.WriteString(w, b.String())
	return err
}

// writeLinkerdText is WriteText for a Linkerd proxy: its state is /ready's, its active
// requests are an estimate, and the kubelet's probes are shown apart.
func writeLinkerdText(w io.Writer, r Report) error {
	var b strings.Builder
	fmt.Fprintf(&b, "admin:   %s (linkerd-proxy %s)\n", r.Admin, orDash(r.ProxyVersion))
	fmt.Fprintf(&b, "server:  %s (no drain call: the proxy stops accepting only at SIGTERM)\n", r.ServerState)
	fmt.Fprintf(&b, "naming:  %s (mesh: %s, port labels: %s)\n", r.Naming, r.Mesh, orDash(r.LabelScheme))
	fmt.Fprintf(&b, "signal:  %s\n\n", r.Signal)
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "PORT\tNAME\tSIGNAL\tREQUESTS\tRATE/s\tIN FLIGHT*\tRESPONSES\tCONNECTIONS\tPROBES\t5XX\t5XX/s\t5XX CODES")
	if len(r.Inbound) == 0 {
		fmt.Fprintln(tw, "-\t(no app port has series)\t-\t-\t-\t-\t-\t-\t-\t-\t-\t-")
	}
	for _, p := range r.Inbound {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", portText(p.Port), p.Name, p.Signal, num(p.RequestsTotal), rate(p.RequestsRate),
			num(p.RequestsActive), num(p.ResponsesTotal), num(p.ConnectionsActive), num(p.ProbeRequestsTotal),
			num(p.ServerErrorsTotal), rate(p.ServerErrorsRate), codesText(p.ServerErrorsByCode))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	b.WriteString("\n* request_total - response_total: Linkerd has no in-flight gauge. A request a client gave up on before its response\n" +
		"  stays counted for the proxy's life; prestop then waits until its deadline. Probes (route \"probe\") are not counted.\n")
	if r.Listener != nil {
		fmt.Fprintf(&b, "\nclient connections (tcp_open_connections, peer=\"src\"): %s open, %s opened\n",
			num(r.Listener.ConnectionsActive), num(r.Listener.ConnectionsTotal))
	}
	writeRisk(&b, r)
	for _, h := range r.Hints {
		fmt.Fprintf(&b, "\nhint: %s\n", h)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// lineList makes a cell's list one token of a greppable line: "UF 12, UC 1" → "UF:12,UC:1".
func lineList(cell string) string {
	return strings.ReplaceAll(strings.ReplaceAll(cell, ", ", ","), " ", ":")
}

// WriteJSON writes v as one JSON object on one line, so --watch -o json is JSON Lines.
func WriteJSON(w io.Writer, v any) error { return output.WriteJSON(w, v) }

func portText(p *int) string {
	if p == nil {
		return "-"
	}
	return strconv.Itoa(*p)
}

func num(v *float64) string {
	if v == nil {
		return "-"
	}
	return strconv.FormatFloat(*v, 'f', -1, 64)
}

func rate(v *float64) string {
	if v == nil {
		return "-"
	}
	return strconv.FormatFloat(*v, 'f', 1, 64)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// drainText is the text report's drain line.
func drainText(d *Drain) string {
	switch {
	case d == nil:
		return "unknown: the sidecar exposes no HTTP connection manager stats (http.<prefix>.downstream_cx_drain_close)"
	case !d.Draining:
		return "none seen (a draining sidecar shows it once it tells a connection to close: http.<prefix>.downstream_cx_drain_close)"
	}
	told := fmt.Sprintf("%s connections told to close", strconv.FormatFloat(d.ConnectionsToldToClose, 'f', -1, 64))
	switch {
	case d.Since == nil:
		return "DRAINING (" + told + ")"
	case d.BeforeFirstSample:
		return fmt.Sprintf("DRAINING since before %s, status's first sample (%s)", d.Since.UTC().Format(time.RFC3339), told)
	}
	return fmt.Sprintf("DRAINING since %s, first seen (%s)", d.Since.UTC().Format(time.RFC3339), told)
}

// regimeText is the text report's regime line: what the samples show of who drains, judged
// as prestop's final event judges it (Report.DrainRegime).
func regimeText(r Report) string {
	seen := r.regimeSeen
	judged, why, fix := seen.Verdict()
	switch {
	case judged == regime.B && seen.AtFirst > 0:
		return fmt.Sprintf("b so far: the sidecar told %s connections to close before status's first sample (a drain, or a listener update), "+
			"and has answered since without telling one to close: it is not draining", strconv.FormatFloat(seen.AtFirst, 'f', -1, 64))
	case judged == regime.B:
		return "b so far: no connection told to close " + RegimeSpan + ": the sidecar's own drain has not run (in regime b nothing drains before prestop --drain-at end decides)"
	case judged == regime.A && seen.DrainAtEnd:
		// With --drain-at end the only drain before prestop's decision is the sidecar's own;
		// prestop's own drain comes at its decision, just before the app is told to stop.
		return fmt.Sprintf("a: the sidecar drains on its own (http.<prefix>.downstream_cx_drain_close rose by %s %s): unless prestop --drain-at end "+
			"has already decided (its own drain comes then, just before the app is told to stop), %s", strconv.FormatFloat(seen.Rise, 'f', -1, 64), RegimeSpan, fix)
	case judged == regime.A:
		return "a: prestop --drain-at start drains when its hook starts"
	}
	if fix != "" {
		why += ": " + fix
	}
	return "unknown: " + why
}

// drainToken is the drain as one token of a --watch line: no, unknown, or since when.
func drainToken(d *Drain) string {
	switch {
	case d == nil:
		return "unknown"
	case !d.Draining:
		return "no"
	case d.Since == nil:
		return "yes"
	case d.BeforeFirstSample:
		return "before:" + d.Since.UTC().Format(time.RFC3339)
	}
	return "since:" + d.Since.UTC().Format(time.RFC3339)
}

// WriteClientChanges writes, for --watch when stdout is not a terminal, a line per client
// whose state changed since the previous sample shown (prev nil: every client is new), and
// the reason when there are no clients to show, once: a sample's line has no room for them.
func WriteClientChanges(w io.Writer, prev *Report, r Report) error {
	var b strings.Builder
	at := r.SampledAt.UTC().Format(time.RFC3339)
	if r.ClientsError != "" && (prev == nil || prev.ClientsError != r.ClientsError) {
		fmt.Fprintf(&b, "%s clients: none shown: %s\n", at, r.ClientsError)
	}
	was := map[string]Client{}
	if prev != nil {
		for _, c := range prev.Clients {
			was[c.Address] = c
		}
	}
	for _, c := range r.Clients {
		before, known := was[c.Address]
		if known && before.State == c.State {
			continue
		}
		from := "-"
		if known {
			from = before.State
		}
		last := "-"
		if c.LastData != nil {
			last = c.LastData.UTC().Format(time.RFC3339Nano)
		}
		fmt.Fprintf(&b, "%s client=%s state=%s was=%s open=%d last_sent=%s", at, c.Address, c.State, from, c.Open, last)
		if c.NewConnections != nil {
			fmt.Fprintf(&b, " new_connections=%d last_sent_on_old=%s", *c.NewConnections, timeToken(c.LastSentOnOld))
		}
		b.WriteByte('\n')
	}
	_, err := io.WriteString(w, b.String())
	return err
}
