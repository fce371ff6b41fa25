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

// Report is everything `meshdrain simulate` prints, in the shape of its JSON output.
type Report struct {
	Scenario ScenarioSummary `json:"scenario"`
	Sidecars []SidecarNote   `json:"sidecars"`
	Results  []Result        `json:"results"`
	// WallSeconds is how long the runs took on this machine.
	WallSeconds float64 `json:"wall_s"`
}

// ScenarioSummary is the scenario as the JSON output shows it.
type ScenarioSummary struct {
	// Mesh is written for Linkerd only, so that an Istio report's JSON stays what it was.
	Mesh           mesh.Mesh `json:"mesh,omitempty"`
	Traffic        string    `json:"traffic"`
	QPS            float64   `json:"qps"`
	Clients        int       `json:"clients"`
	Threads        int       `json:"threads"`
	P99            string    `json:"p99"`
	AppShutdown    string    `json:"app_shutdown"`
	EDSLag         string    `json:"eds_lag"`
	LastClientLagS float64   `json:"last_client_lag_s"`
	Retries        int       `json:"retries"`
	RouteTimeout   string    `json:"route_timeout"`
	GracePeriod    string    `json:"grace_period"`
	TimeScale      float64   `json:"time_scale"`
	Seed           uint64    `json:"seed"`
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
			Mesh: linkerdOnly(sc.Mesh), Traffic: sc.Traffic, QPS: sc.QPS, Clients: sc.Clients, Threads: sc.Threads, P99: fmtD(sc.P99),
			AppShutdown: string(sc.AppShutdown), EDSLag: sc.EDSLag.String(),
			LastClientLagS: roundS(lastLag(planClients(sc)).Seconds()),
			Retries:        sc.Retries, RouteTimeout: fmtD(sc.RouteTimeout), GracePeriod: fmtD(sc.GracePeriod),
			TimeScale: sc.TimeScale, Seed: sc.Seed,
		},
		Results:     results,
		WallSeconds: roundS(wall.Seconds()),
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

// WriteTable writes the comparison table, a legend, and each run's timeline.
func (r Report) WriteTable(w io.Writer) error {
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
	fmt.Fprintf(w, "Pod deletion replayed: %g QPS from %d client sidecars to an app with P99 %s on %d threads (%s shutdown),\n",
		sc.QPS, sc.Clients, sc.P99, sc.Threads, sc.AppShutdown)
	fmt.Fprintf(w, "grace period %s, EDS lag %s (last client at %.2fs), %s, %s.\n",
		sc.GracePeriod, sc.EDSLag, sc.LastClientLagS, retries, timeout)
	fmt.Fprintf(w, "Times are pod seconds from the deletion; run at time scale %g, seed %d, in %.1fs.\n\n", sc.TimeScale, sc.Seed, r.WallSeconds)
	for _, s := range r.Sidecars {
		fmt.Fprintf(w, "  %-14s %s\n", s.Name, s.Note)
	}
	fmt.Fprintln(w)

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
	if sc.Mesh == mesh.Linkerd {
		fmt.Fprintln(w, "SIDECAR 5XX  502s linkerd-proxy answered for the app (l5d-proxy-error), in Envoy's two classes: UF = the app")
		fmt.Fprintln(w, "             refused the connection, UC = the connection to the app was reset. Linkerd clients retry none.")
		fmt.Fprintln(w, "CLIENT FAILURES  what the callers saw: 502 l5d-proxy-error = the app had stopped accepting while clients")
		fmt.Fprintln(w, "             still sent; 503 UC = cut in flight (a container killed mid-request).")
	} else {
		fmt.Fprintln(w, "SIDECAR 5XX  503s in the pod sidecar's access log: UF = the app refused the connection, UC = the connection to the")
		fmt.Fprintln(w, "             app was reset. The callers' sidecars retried them on another replica (Istio's default policy).")
		fmt.Fprintln(w, "CLIENT FAILURES  what the callers saw after retries: 503 UC = cut in flight (Envoy or the app killed mid-request,")
		fmt.Fprintln(w, "             not retried by default), 504 UT = route timeout.")
	}
	fmt.Fprintln(w, "APP STOP     when the app got SIGTERM (its preStop returned).  POD GONE  when the last container exited.")
	fmt.Fprintln(w, "SIGKILL      what was killed, by whom, when.")
	for _, res := range r.Results {
		for _, warning := range res.Warnings {
			fmt.Fprintf(w, "WARNING %s, sidecar %s: %s\n", res.Strategy, res.Sidecar, warning)
		}
	}

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
	return nil
}

// linkerdOnly keeps the mesh out of an Istio report.
func linkerdOnly(m mesh.Mesh) mesh.Mesh {
	if m == mesh.Linkerd {
		return m
	}
	return ""
}

// failureCell is "0", or "7 (0.29%, 503 UC 7)".
func failureCell(res Result) string {
	if res.ClientFailures == 0 {
		return "0"
	}
	var kinds []string
	for k, v := range res.FailuresByKind {
		short, _, _ := strings.Cut(k, " (")
		kinds = append(kinds, fmt.Sprintf("%s %d", short, v))
	}
	sort.Strings(kinds)
	pct := 100 * float64(res.ClientFailures) / float64(max(res.Requests, 1))
	return fmt.Sprintf("%d (%.2f%%: %s)", res.ClientFailures, pct, strings.Join(kinds, ", "))
}

func killedCell(res Result) string {
	if len(res.KilledDetail) == 0 {
		return "-"
	}
	return strings.Join(res.KilledDetail, "; ")
}
