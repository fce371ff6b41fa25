package podsim

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/meshdrain/meshdrain/pkg/mesh"
)

// Report is everything `meshdrain-sim simulate` prints, in the shape of its JSON output.
type Report struct {
	Scenario ScenarioSummary `json:"scenario"`
	Sidecars []SidecarNote   `json:"sidecars"`
	Results  []Result        `json:"results"`
	// WallSeconds is how long the runs took on this machine.
	WallSeconds float64 `json:"wall_s"`
}

// ScenarioSummary is the scenario as the JSON output shows it.
type ScenarioSummary struct {
	// Mesh is written for Linkerd and none only, so that an Istio report's JSON stays what
	// it was.
	Mesh mesh.Mesh `json:"mesh,omitempty"`
	// Meshless is a pod without a sidecar's clients by kind.
	Meshless       *MeshlessSummary `json:"meshless,omitempty"`
	Traffic        string           `json:"traffic"`
	QPS            float64          `json:"qps"`
	Clients        int              `json:"clients"`
	Threads        int              `json:"threads"`
	P99            string           `json:"p99"`
	AppShutdown    string           `json:"app_shutdown"`
	EDSLag         string           `json:"eds_lag"`
	LastClientLagS float64          `json:"last_client_lag_s"`
	Retries        int              `json:"retries"`
	RouteTimeout   string           `json:"route_timeout"`
	GracePeriod    string           `json:"grace_period"`
	TimeScale      float64          `json:"time_scale"`
	Seed           uint64           `json:"seed"`
}

// MeshlessSummary is a pod without a sidecar's clients, as the JSON output shows them.
type MeshlessSummary struct {
	Nodes       int    `json:"nodes"`
	PerRequest  int    `json:"per_request"`
	Holders     int    `json:"keep_alive"`
	Ingress     int    `json:"ingress"`
	IngressLag  string `json:"ingress_lag"`
	ProbePeriod string `json:"probe_period"`
	// AppMetrics: meshdrain read the app's request counter beside the kernel.
	AppMetrics bool `json:"app_metrics,omitempty"`
}

// SidecarNote says what one sidecar label stands for.
type SidecarNote struct {
	Name string `json:"name"`
	Note string `json:"note"`
}

// NewReport assembles the report of a set of runs.
func NewReport(sc Scenario, sidecars []SidecarSpec, results []Result, wall time.Duration) Report {
	r := Report{
		Scenario: ScenarioSummary{
			Mesh: notIstio(sc.Mesh), Traffic: sc.Traffic, QPS: sc.QPS, Clients: sc.Clients, Threads: sc.Threads, P99: fmtD(sc.P99),
			AppShutdown: string(sc.AppShutdown), EDSLag: sc.EDSLag.String(),
			LastClientLagS: roundS(lastLag(planClients(sc)).Seconds()),
			Retries:        sc.Retries, RouteTimeout: fmtD(sc.RouteTimeout), GracePeriod: fmtD(sc.GracePeriod),
			TimeScale: sc.TimeScale, Seed: sc.Seed,
		},
		Results:     results,
		WallSeconds: roundS(wall.Seconds()),
	}
	if m := sc.Meshless; sc.meshless() {
		r.Scenario.Meshless = &MeshlessSummary{Nodes: m.Nodes, PerRequest: m.PerRequest, Holders: m.Holders, Ingress: m.Ingress,
			IngressLag: m.IngressLag.String(), ProbePeriod: fmtD(m.ProbePeriod), AppMetrics: m.AppMetrics}
	}
	for _, s := range sidecars {
		r.Sidecars = append(r.Sidecars, SidecarNote{Name: s.Name, Note: s.Note})
	}
	return r
}

// WriteJSON writes the report as indented JSON.
func (r Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// TableOptions say what the text report prints besides its headline and table.
type TableOptions struct {
	// Timelines adds each run's timeline, event by event.
	Timelines bool
}

// WriteTable writes the headline, the scenario, the comparison table and its legend, and
// with opts.Timelines each run's timeline.
func (r Report) WriteTable(w io.Writer, opts TableOptions) error {
	r.writeHeadline(w)
	r.writeScenario(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "STRATEGY\tSIDECAR\tREQUESTS\tSIDECAR 5XX\tCLIENT FAILURES\tAPP STOP\tPOD GONE\tSIGKILL\t")
	for _, res := range r.Results {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%.2fs\t%.2fs\t%s\t\n",
			res.Strategy, res.Sidecar, res.Requests, res.Sidecar5xx, failureCell(res),
			res.AppStopS, res.PodGoneS, killedCell(res))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	r.writeColumns(w)
	for _, res := range r.Results {
		for _, warning := range res.Warnings {
			fmt.Fprintf(w, "WARNING %s, sidecar %s: %s\n", res.Strategy, res.Sidecar, warning)
		}
	}
	if opts.Timelines {
		r.writeTimelines(w)
	}
	return nil
}

// writeHeadline writes the verdict per sidecar setting, wrapped to the table's width.
func (r Report) writeHeadline(w io.Writer) {
	headline := r.Headline()
	if len(headline) == 0 {
		return
	}
	fmt.Fprintln(w, "meshdrain against the best sleep, per sidecar setting (clean: no client failure and no 5xx in the sidecar's log):")
	label := 0
	for _, h := range headline {
		label = max(label, len(h.Sidecar))
	}
	for _, h := range headline {
		lines := wrapWords(h.Verdict, headlineWidth-label-4)
		fmt.Fprintf(w, "  %-*s  %s\n", label, h.Sidecar, lines[0])
		for _, line := range lines[1:] {
			fmt.Fprintf(w, "  %-*s  %s\n", label, "", line)
		}
	}
	fmt.Fprintln(w)
}

// writeScenario says what was replayed, and the sidecar settings compared.
func (r Report) writeScenario(w io.Writer) {
	sc := r.Scenario
	timeout := "no route timeout (Istio default)"
	retries := fmt.Sprintf("Istio retries %d", sc.Retries)
	if sc.Mesh == mesh.Linkerd {
		timeout = "no route timeout (Linkerd default)"
		retries = "Linkerd clients (no retries)"
	}
	if sc.RouteTimeout != "0s" {
		timeout = "route timeout " + sc.RouteTimeout
	}
	if sc.Traffic != "" && sc.Traffic != "steady" {
		fmt.Fprintf(w, "Traffic %q: ", sc.Traffic)
	}
	if m := sc.Meshless; m != nil {
		fmt.Fprintf(w, "Pod deletion replayed without a sidecar: %g QPS from %d per-request and %d keep-alive clients on %d nodes and %d ingresses\n",
			sc.QPS, m.PerRequest, m.Holders, m.Nodes, m.Ingress)
		fmt.Fprintf(w, "to an app with P99 %s on %d threads (%s shutdown), grace period %s, kube-proxy lag %s per node, ingress lag %s\n",
			sc.P99, sc.Threads, sc.AppShutdown, sc.GracePeriod, sc.EDSLag, m.IngressLag)
		fmt.Fprintf(w, "(the last learns at %.2fs), readiness probe every %s, ingress retries %d.\n", sc.LastClientLagS, m.ProbePeriod, sc.Retries)
		if m.AppMetrics {
			fmt.Fprintf(w, "The app serves its request counter at %s; meshdrain reads %s beside the kernel.\n", appMetricsPath, appRequestsSelector)
		}
	} else {
		fmt.Fprintf(w, "Pod deletion replayed: %g QPS from %d client sidecars to an app with P99 %s on %d threads (%s shutdown),\n",
			sc.QPS, sc.Clients, sc.P99, sc.Threads, sc.AppShutdown)
		fmt.Fprintf(w, "grace period %s, EDS lag %s (last client at %.2fs), %s, %s.\n",
			sc.GracePeriod, sc.EDSLag, sc.LastClientLagS, retries, timeout)
	}
	fmt.Fprintf(w, "Times are pod seconds from the deletion; run at time scale %g, seed %d, in %.1fs.\n\n", sc.TimeScale, sc.Seed, r.WallSeconds)
	for _, s := range r.Sidecars {
		fmt.Fprintf(w, "  %-14s %s\n", s.Name, s.Note)
	}
	fmt.Fprintln(w)
}

// writeColumns says what the table's columns count, in the words of the mesh replayed.
func (r Report) writeColumns(w io.Writer) {
	switch r.Scenario.Mesh {
	case MeshNone:
		fmt.Fprintln(w, "SIDECAR 5XX  none: the pod has no sidecar.")
		fmt.Fprintln(w, "CLIENT FAILURES  what the callers saw: connection refused = a node's kube-proxy still sent a new connection to an")
		fmt.Fprintln(w, "             app that had stopped listening; connection reset = the app closed or cut a connection under a request;")
		fmt.Fprintln(w, "             ingress 502 = an ingress's connection to the app was refused or reset (the ingress's caller sees it).")
	case mesh.Linkerd:
		fmt.Fprintln(w, "SIDECAR 5XX  502s linkerd-proxy answered for the app (l5d-proxy-error), in Envoy's two classes: UF = the app")
		fmt.Fprintln(w, "             refused the connection, UC = the connection to the app was reset. Linkerd clients retry none.")
		fmt.Fprintln(w, "CLIENT FAILURES  what the callers saw: 502 l5d-proxy-error = the app had stopped accepting while clients")
		fmt.Fprintln(w, "             still sent; 503 UC = cut in flight (a container killed mid-request).")
	default:
		fmt.Fprintln(w, "SIDECAR 5XX  503s in the pod sidecar's access log: UF = the app refused the connection, UC = the connection to the")
		fmt.Fprintln(w, "             app was reset. The callers' sidecars retried them on another replica (Istio's default policy).")
		fmt.Fprintln(w, "CLIENT FAILURES  what the callers saw after retries: 503 UC = cut in flight (Envoy or the app killed mid-request,")
		fmt.Fprintln(w, "             not retried by default), 504 UT = route timeout.")
	}
	fmt.Fprintln(w, "APP STOP     when the app got SIGTERM (its preStop returned).  POD GONE  when the last container exited.")
	fmt.Fprintln(w, "SIGKILL      what was killed, by whom, when.")
}

// writeTimelines writes each run's timeline, event by event.
func (r Report) writeTimelines(w io.Writer) {
	who := 11 // "istio-proxy"
	for _, res := range r.Results {
		for _, e := range res.Timeline {
			who = max(who, len(e.Who))
		}
	}
	for _, res := range r.Results {
		fmt.Fprintf(w, "\n%s, sidecar %s:\n", res.Strategy, res.Sidecar)
		for _, e := range res.Timeline {
			fmt.Fprintf(w, "  %6.2fs  %-*s  %s\n", e.AtS, who, e.Who, e.What)
		}
		if res.PreStopError != "" {
			fmt.Fprintf(w, "           preStop failed: %s\n", res.PreStopError)
		}
	}
}

// headlineWidth is where the headline wraps: the width of the default table.
const headlineWidth = 130

// HeadlineItem is the verdict of the runs under one sidecar setting.
type HeadlineItem struct {
	Sidecar string
	Verdict string
}

// Headline is the report's point, one item per sidecar setting, in the order of the table:
// what meshdrain lost and when it let the app stop, against the earliest sleep that was
// clean under the same sidecar; or, where the sidecar died while clients were still sending
// in every run, that no preStop can help until the sidecar is fixed.
func (r Report) Headline() []HeadlineItem {
	var order []string
	rows := map[string][]Result{}
	for _, res := range r.Results {
		if _, seen := rows[res.Sidecar]; !seen {
			order = append(order, res.Sidecar)
		}
		rows[res.Sidecar] = append(rows[res.Sidecar], res)
	}
	var items []HeadlineItem
	for _, sidecar := range order {
		verdict := r.verdict(rows[sidecar])
		for _, res := range rows[sidecar] {
			if len(res.Warnings) > 0 {
				verdict += " (WARNING: timers fired late on this busy machine; rerun)"
				break
			}
		}
		items = append(items, HeadlineItem{Sidecar: sidecar, Verdict: verdict})
	}
	return items
}

// verdict sums up the runs of one sidecar setting in a sentence.
func (r Report) verdict(rows []Result) string {
	if first, last, ok := sidecarDiedFirst(rows); ok {
		return r.sidecarDiedVerdict(rows, first, last)
	}
	byKind := strategyRowsOf(rows)
	var parts []string
	if md := byKind.meshdrain; md != nil {
		parts = append(parts, fmt.Sprintf("meshdrain %s, app stopped at %.2fs%s", cost(*md), md.AppStopS, md.Meshdrain.statedRisk()))
	}
	parts = append(parts, byKind.sleepParts()...)
	if oracle := byKind.oracle; oracle != nil {
		parts = append(parts, fmt.Sprintf("oracle (the earliest stop that loses nothing) %s at %.2fs", cost(*oracle), oracle.AppStopS))
	}
	if len(parts) == 0 { // neither meshdrain nor a sleep: each strategy for itself
		for _, res := range rows {
			parts = append(parts, fmt.Sprintf("%s %s, app stopped at %.2fs", res.Strategy, cost(res), res.AppStopS))
		}
	}
	return strings.Join(parts, "; ")
}

// sidecarDiedVerdict is the verdict when the sidecar died, between first and last, while
// clients still sent in every run: no strategy of the app's can help.
func (r Report) sidecarDiedVerdict(rows []Result, first, last float64) string {
	proxy, plan := "Envoy", "meshdrain plan"
	if r.Scenario.Mesh == mesh.Linkerd {
		proxy, plan = "linkerd-proxy", "meshdrain plan --mesh linkerd"
	}
	died := fmt.Sprintf("at %.2fs", first)
	if last-first > lateTolerance {
		died = fmt.Sprintf("between %.2fs and %.2fs", first, last)
	}
	var costs []string
	for _, res := range rows {
		costs = append(costs, res.Strategy+" "+cost(res))
	}
	verdict := "whatever the app did, no strategy was clean (" + strings.Join(costs, ", ") + ")"
	if len(rows) == 1 {
		verdict = costs[0]
	}
	return fmt.Sprintf("%s died %s while clients sent until %.2fs: %s; fix the sidecar first: %s.",
		proxy, died, rows[0].LastClientLagS, verdict, plan)
}

// strategyRows are one sidecar setting's runs that the verdict compares, by strategy.
type strategyRows struct {
	meshdrain, oracle *Result
	sleeps            []Result
	// bestSleep is the clean sleep that stopped the app first.
	bestSleep *Result
}

func strategyRowsOf(rows []Result) strategyRows {
	var s strategyRows
	for i, res := range rows {
		strat, err := ParseStrategy(res.Strategy)
		if err != nil {
			continue
		}
		switch strat.Kind {
		case StrategyMeshdrain:
			s.meshdrain = &rows[i]
		case StrategyOracle:
			s.oracle = &rows[i]
		case StrategySleep:
			s.sleeps = append(s.sleeps, res)
			if clean(res) && (s.bestSleep == nil || res.AppStopS < s.bestSleep.AppStopS) {
				s.bestSleep = &rows[i]
			}
		}
	}
	return s
}

// sleepParts compare meshdrain with the best clean sleep, and name the shorter sleeps that
// were not clean; or, with no clean sleep, what each cost.
func (s strategyRows) sleepParts() []string {
	best, md := s.bestSleep, s.meshdrain
	if best == nil {
		if len(s.sleeps) == 0 {
			return nil
		}
		var costs []string
		for _, res := range s.sleeps {
			costs = append(costs, res.Strategy+" "+cost(res))
		}
		return []string{"no sleep was clean: " + strings.Join(costs, ", ")}
	}
	part := fmt.Sprintf("best clean sleep: %s at %.2fs", best.Strategy, best.AppStopS)
	if md != nil && clean(*md) {
		if d := best.AppStopS - md.AppStopS; d >= 0 {
			part += fmt.Sprintf(", meshdrain %.2fs sooner", d)
		} else {
			part += fmt.Sprintf(", meshdrain %.2fs later", -d)
		}
	}
	parts := []string{part}
	var sooner []string
	for _, res := range s.sleeps {
		if !clean(res) && res.AppStopS < best.AppStopS {
			sooner = append(sooner, res.Strategy+" "+cost(res))
		}
	}
	if len(sooner) > 0 {
		parts = append(parts, "shorter sleeps were not clean: "+strings.Join(sooner, ", "))
	}
	return parts
}

// sidecarDiedFirst says whether in every run the sidecar died before the last client stopped
// sending, and no run was clean: then whatever the app does it either stops before the
// clients (the sidecar answers 5xx for it) or is serving when the sidecar dies (the requests
// in flight are cut), and the sidecar setting is what must change. first and last bound when
// it died.
func sidecarDiedFirst(rows []Result) (first, last float64, ok bool) {
	for i, res := range rows {
		if clean(res) || res.SidecarExit <= 0 || res.SidecarExit >= res.LastClientLagS {
			return 0, 0, false
		}
		if i == 0 || res.SidecarExit < first {
			first = res.SidecarExit
		}
		last = max(last, res.SidecarExit)
	}
	return first, last, len(rows) > 0
}

// clean is a run that neither failed a request nor made the sidecar log a 5xx (Istio's
// clients retry those, but each is an alarm in the access log and a round trip more).
func clean(res Result) bool { return res.ClientFailures == 0 && res.Sidecar5xx == 0 }

// cost is what a run lost, in a few words.
func cost(res Result) string {
	switch {
	case res.ClientFailures > 0:
		return fmt.Sprintf("lost %d", res.ClientFailures)
	case res.Sidecar5xx > 0:
		return fmt.Sprintf("%d sidecar 5xx", res.Sidecar5xx)
	}
	return "clean"
}

// wrapWords breaks text into lines of at most width columns, between words, keeping a number
// with the word before it ("lost 14", "at 8.45s").
func wrapWords(text string, width int) []string {
	var words []string
	for _, word := range strings.Fields(text) {
		if n := len(words); n > 0 && word[0] >= '0' && word[0] <= '9' {
			words[n-1] += " " + word
			continue
		}
		words = append(words, word)
	}
	var lines []string
	line := ""
	for _, word := range words {
		if line != "" && len(line)+1+len(word) > width {
			lines = append(lines, line)
			line = ""
		}
		if line != "" {
			line += " "
		}
		line += word
	}
	return append(lines, line)
}

// notIstio keeps the mesh out of an Istio report.
func notIstio(m mesh.Mesh) mesh.Mesh {
	if m == mesh.Linkerd || m == MeshNone {
		return m
	}
	return ""
}

// failureCell is "0", or "7 (0.29%, 503 UC 7)".
func failureCell(res Result) string {
	if res.ClientFailures == 0 {
		return "0"
	}
	pct := 100 * float64(res.ClientFailures) / float64(max(res.Requests, 1))
	return fmt.Sprintf("%d (%.2f%%: %s)", res.ClientFailures, pct, kindsText(res.FailuresByKind))
}

// kindsText is "503 UC 12, 504 UT 2": each failure kind by its short name, with its count.
func kindsText(byKind map[string]int) string {
	var kinds []string
	for k, v := range byKind {
		short, _, _ := strings.Cut(k, " (")
		kinds = append(kinds, fmt.Sprintf("%s %d", short, v))
	}
	sort.Strings(kinds)
	return strings.Join(kinds, ", ")
}

func killedCell(res Result) string {
	if len(res.KilledDetail) == 0 {
		return "-"
	}
	return strings.Join(res.KilledDetail, "; ")
}
