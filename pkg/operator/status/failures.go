package status

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/meshdrain/meshdrain/pkg/mesh"
	"github.com/meshdrain/meshdrain/pkg/mesh/envoy"
)

// The response flags Envoy answers a failed attempt to reach the app with, and the inbound
// cluster counter it charges for each (envoyproxy/envoy source/common/router/router.cc
// streamResetReasonToResponseFlag, onResponseTimeout; source/common/conn_pool/conn_pool_base.cc
// onConnectionEvent).
const (
	FlagUF = "UF" // connection to the app refused or timed out: upstream_cx_connect_fail
	FlagUC = "UC" // the app closed the connection under a request: upstream_cx_destroy_remote_with_active_rq
	FlagUT = "UT" // the route's timeout expired: upstream_rq_timeout
	FlagUR = "UR" // the app reset an HTTP/2 stream: upstream_rq_rx_reset
)

// failureFlags is the order flags are shown in.
var failureFlags = []string{FlagUF, FlagUC, FlagUT, FlagUR}

// DefaultFailureWindow is how far apart check's two samples are when the sidecar has answered
// 5xx before: a count that moves between them is one it answers now.
const DefaultFailureWindow = time.Second

// failureCauses say what each flag (or, for a Linkerd proxy, each status code it answers with
// itself) means for the app, and "-" a 5xx that Envoy forwarded from the app.
var failureCauses = map[string]string{
	FlagUF: "UF: the sidecar could not connect to the app (upstream_cx_connect_fail): the app is down or still starting, " +
		"or does not listen on the port the sidecar forwards to",
	FlagUC: "UC: the app closed connections with a request on them (upstream_cx_destroy_remote_with_active_rq): it crashed or is " +
		"stopping, or closes idle keep-alive connections the sidecar still reuses (give it a longer keep-alive idle timeout)",
	FlagUT: "UT: requests to the app outlived the route's timeout (upstream_rq_timeout)",
	FlagUR: "UR: the app reset HTTP/2 streams (upstream_rq_rx_reset)",
	"-":    "no flag: the app answered the 5xx itself; see its logs",
	"502":  "502: a Linkerd proxy answers 502 for an app that refused or reset the connection (the app may also have answered it)",
	"504":  "504: a Linkerd proxy answers 504 when connecting to the app timed out (the app may also have answered it)",
}

// addEnvoyFailures reads the failure stats in a request of their own (envoy.FailuresFilter:
// the drain's poll never carries them) and adds them to the report's endpoints. A sidecar
// that does not answer leaves them unknown.
func addEnvoyFailures(ctx context.Context, admin Admin, sel mesh.Selector, r *Report) {
	families, err := admin.Stats(ctx, envoy.FailuresFilter(sel))
	if err != nil {
		return
	}
	snap := envoy.Normalise(families, sel)
	byKey := make(map[string]mesh.Endpoint, len(snap.Endpoints))
	for _, e := range snap.Endpoints {
		byKey[Port{Port: e.Port, Name: e.Name}.key()] = e
	}
	for i := range r.Inbound {
		e, ok := byKey[r.Inbound[i].key()]
		if !ok {
			continue
		}
		p := &r.Inbound[i]
		// What the clients got, when the sidecar shows it; else what the router charged.
		p.ServerErrorsTotal = e.HTTPServerErrorsTotal
		if p.ServerErrorsTotal == nil {
			p.ServerErrorsTotal = e.ClusterServerErrorsTotal
		}
		for flag, v := range map[string]*float64{FlagUF: e.ConnectFailuresTotal, FlagUC: e.ConnectionTerminationsTotal,
			FlagUT: e.RequestTimeoutsTotal, FlagUR: e.RemoteResetsTotal} {
			if v == nil {
				continue
			}
			if p.Failures == nil {
				p.Failures = map[string]float64{}
			}
			p.Failures[flag] = *v
		}
	}
	if len(snap.CompletedServerErrors) > 0 {
		r.CompletedServerErrors = snap.CompletedServerErrors
		var total float64
		for _, v := range snap.CompletedServerErrors {
			total += v
		}
		r.CompletedServerErrorsTotal = &total
	}
}

// withFailureRates fills the 5xx rates from the previous sample.
func withFailureRates(prev *Report, cur Report, elapsed float64) Report {
	before := map[string]*float64{}
	for _, p := range prev.Inbound {
		before[p.key()] = p.ServerErrorsTotal
	}
	for i, p := range cur.Inbound {
		cur.Inbound[i].ServerErrorsRate = counterRate(before[p.key()], p.ServerErrorsTotal, elapsed)
	}
	cur.CompletedServerErrorsRate = counterRate(prev.CompletedServerErrorsTotal, cur.CompletedServerErrorsTotal, elapsed)
	return cur
}

// failureCounts flattens a report's failure counters (each endpoint's 5xx, flags and codes,
// and the sidecar-wide completions), keyed "<endpoint>\x00<what>"; known reports whether the
// sidecar exposes any.
func (r Report) failureCounts() (counts map[string]float64, known bool) {
	counts = map[string]float64{}
	for _, p := range r.Inbound {
		if p.ServerErrorsTotal != nil {
			counts[p.key()+"\x005xx"] = *p.ServerErrorsTotal
		}
		for flag, v := range p.Failures {
			counts[p.key()+"\x00"+flag] = v
		}
		for code, v := range p.ServerErrorsByCode {
			counts[p.key()+"\x00"+code] = v
		}
	}
	if r.CompletedServerErrorsTotal != nil {
		counts["completed\x005xx"] = *r.CompletedServerErrorsTotal
		for flag, v := range r.CompletedServerErrors {
			counts["completed\x00"+flag] = v
		}
	}
	return counts, len(counts) > 0
}

// serverErrorsTotal is every 5xx the sample shows: the endpoints', or the completions' when
// no endpoint counts them.
func (r Report) serverErrorsTotal() float64 {
	if !r.endpointsCountServerErrors() && r.CompletedServerErrorsTotal != nil {
		return *r.CompletedServerErrorsTotal
	}
	var total float64
	for _, p := range r.Inbound {
		if p.ServerErrorsTotal != nil {
			total += *p.ServerErrorsTotal
		}
	}
	return total
}

// endpointsCountServerErrors reports whether some endpoint has its own 5xx counter: the
// sidecar-wide completions then only repeat what the endpoints say.
func (r Report) endpointsCountServerErrors() bool {
	for _, p := range r.Inbound {
		if p.ServerErrorsTotal != nil {
			return true
		}
	}
	return false
}

// failuresSeen reports whether the sample shows any 5xx or failure so far.
func (r Report) failuresSeen() bool {
	counts, _ := r.failureCounts()
	for _, v := range counts {
		if v > 0 {
			return true
		}
	}
	return false
}

// failureChange is what one endpoint (or the completions) answered between two samples.
type failureChange struct {
	label      string
	serverErrs float64
	// causes are the flags or codes that moved, with how much.
	causes map[string]float64
}

// failureChanges compares two samples; a counter that went down (a restarted sidecar) is
// left out.
func failureChanges(before, after Report) []failureChange {
	prev, _ := before.failureCounts()
	delta := func(key string, now float64) float64 {
		old, ok := prev[key]
		if !ok || now < old {
			return 0
		}
		return now - old
	}
	var out []failureChange
	for _, p := range after.Inbound {
		c := failureChange{label: endpointLabel(p), causes: map[string]float64{}}
		if p.ServerErrorsTotal != nil {
			c.serverErrs = delta(p.key()+"\x005xx", *p.ServerErrorsTotal)
		}
		for flag, v := range p.Failures {
			if d := delta(p.key()+"\x00"+flag, v); d > 0 {
				c.causes[flag] = d
			}
		}
		for code, v := range p.ServerErrorsByCode {
			if d := delta(p.key()+"\x00"+code, v); d > 0 {
				c.causes[code] = d
			}
		}
		if c.serverErrs > 0 || len(c.causes) > 0 {
			out = append(out, c)
		}
	}
	if after.CompletedServerErrorsTotal != nil && !after.endpointsCountServerErrors() {
		c := failureChange{label: "istio_requests_total (every port)", causes: map[string]float64{}}
		c.serverErrs = delta("completed\x005xx", *after.CompletedServerErrorsTotal)
		for flag, v := range after.CompletedServerErrors {
			if d := delta("completed\x00"+flag, v); d > 0 {
				c.causes[flag] = d
			}
		}
		if c.serverErrs > 0 || len(c.causes) > 0 {
			out = append(out, c)
		}
	}
	return out
}

func endpointLabel(p Port) string {
	if p.Port != nil {
		return fmt.Sprintf("port %d", *p.Port)
	}
	return p.Name
}

// serverErrorsItem judges whether the sidecar answers 5xx to its clients now. Its counters
// only say how many since it started, so a non-zero count is sampled again window later: one
// that moved is a warning (the app is failing, or the sidecar cannot reach it: not
// something prestop can fix, but what the operator must know before trusting the pod). A
// sidecar that has never answered a 5xx needs no second sample. Without any failure counter
// the check says nothing.
func serverErrorsItem(first Report, second *Report, secondErr error, window time.Duration) (Item, bool) {
	if _, known := first.failureCounts(); !known {
		return Item{}, false
	}
	const name = "server-errors"
	if !first.failuresSeen() {
		return Item{Name: name, Status: Pass, Message: "no 5xx answered to clients since the sidecar started"}, true
	}
	total := num(ptrTo(first.serverErrorsTotal()))
	if second == nil {
		return Item{Name: name, Status: Warn,
			Message: fmt.Sprintf("%s 5xx answered to clients since the sidecar started; whether it still answers them is unknown: "+
				"the second sample, %s later, failed: %v", total, window, secondErr),
			Fix: "run the check again"}, true
	}
	changes := failureChanges(first, *second)
	if len(changes) == 0 {
		return Item{Name: name, Status: Pass,
			Message: fmt.Sprintf("%s 5xx answered to clients since the sidecar started, none in %s between two samples", total, window)}, true
	}
	var parts []string
	seen := map[string]float64{}
	for _, c := range changes {
		parts = append(parts, fmt.Sprintf("%s: %s 5xx in %s%s", c.label, num(ptrTo(c.serverErrs)), window, causesText(c.causes)))
		for cause, v := range c.causes {
			seen[cause] += v
		}
	}
	return Item{Name: name, Status: Warn,
		Message: "the sidecar is answering 5xx to its clients now: " + strings.Join(parts, "; "),
		Fix:     causesFix(seen)}, true
}

// causesText writes " (UF 12, UC 1)", flags first in their order, then codes.
func causesText(causes map[string]float64) string {
	if len(causes) == 0 {
		return ""
	}
	var parts []string
	for _, k := range sortedCauses(causes) {
		parts = append(parts, k+" "+num(ptrTo(causes[k])))
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

// sortedCauses orders flags as failureFlags, then anything else (codes, "-") by name.
func sortedCauses(causes map[string]float64) []string {
	var keys []string
	for _, f := range failureFlags {
		if _, ok := causes[f]; ok {
			keys = append(keys, f)
		}
	}
	var rest []string
	for k := range causes {
		if !slices.Contains(failureFlags, k) {
			rest = append(rest, k)
		}
	}
	sort.Strings(rest)
	return append(keys, rest...)
}

// causesFix explains the causes seen; without any, the 5xx came from the app.
func causesFix(seen map[string]float64) string {
	var out []string
	for _, k := range sortedCauses(seen) {
		if text, ok := failureCauses[k]; ok {
			out = append(out, text)
		}
	}
	if len(out) == 0 {
		return "the sidecar forwarded them from the app (no failure of its own moved): see the app's logs"
	}
	return strings.Join(out, "; ")
}

// failureHints tell the operator what the sidecar's own failures so far mean.
func failureHints(r Report) []string {
	var out []string
	for _, p := range r.Inbound {
		flags, codes := map[string]float64{}, map[string]float64{}
		for flag, v := range p.Failures {
			if v > 0 {
				flags[flag] = v
			}
		}
		for code, v := range p.ServerErrorsByCode {
			if _, explained := failureCauses[code]; explained && v > 0 {
				codes[code] = v
			}
		}
		if len(flags) > 0 {
			out = append(out, fmt.Sprintf("%s: the sidecar failed to reach the app since it started%s: %s",
				endpointLabel(p), causesText(flags), causesFix(flags)))
		}
		if len(codes) > 0 {
			out = append(out, fmt.Sprintf("%s: answered since the proxy started%s: %s", endpointLabel(p), causesText(codes), causesFix(codes)))
		}
	}
	if len(r.CompletedServerErrors) > 0 && !r.endpointsCountServerErrors() {
		out = append(out, fmt.Sprintf("istio_requests_total: %s requests completed with a 5xx since the sidecar started%s: %s",
			num(r.CompletedServerErrorsTotal), causesText(r.CompletedServerErrors), causesFix(r.CompletedServerErrors)))
	}
	return out
}

// failuresText is a table cell: "UF 12, UC 1", "0" when every known counter is zero, "-"
// when none is known.
func failuresText(failures map[string]float64) string {
	if len(failures) == 0 {
		return "-"
	}
	nonzero := map[string]float64{}
	for k, v := range failures {
		if v != 0 {
			nonzero[k] = v
		}
	}
	if len(nonzero) == 0 {
		return "0"
	}
	return strings.TrimSuffix(strings.TrimPrefix(causesText(nonzero), " ("), ")")
}

// codesText is failuresText for a Linkerd proxy's status codes.
func codesText(codes map[string]float64) string {
	if len(codes) == 0 {
		return "-"
	}
	return failuresText(codes)
}

func ptrTo(v float64) *float64 { return &v }
