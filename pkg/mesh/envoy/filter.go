package envoy

import (
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/meshdrain/meshdrain/pkg/mesh"
)

// StatsFilter returns the RE2 regex to send as /stats?filter=: it matches the Envoy (text)
// stat names of exactly the stats Normalise reads, in every naming variant, so that one poll
// of a sidecar in a large mesh stays a few kilobytes (docs/facts.md §2: never poll unfiltered).
//
// Envoy matches it against every stat name on its main thread, the thread that also answers
// /ready, so it is written to be cheap for any regex engine: one leading ^ over one
// alternation, every alternative ending in $, and no point where two ways on are possible
// (each character decides: no ".*" before a literal, port lists as a trie). A backtracking
// engine never retries, and Go's regexp runs it as a one-pass matcher; a name is rejected
// after its first characters. Per-worker listener copies (listener.X.worker_N.*) are excluded
// by the anchoring. Two consequences: the HTTP prefix's bind address is matched as IPv4 or
// bracketed IPv6 (a bare IPv6 pod IP leaves that port to its cluster stats), and the
// pre-1.10 cluster names inbound|PORT|NAME|HOST are not read (their HTTP stats are). Asking
// for completions adds two alternatives that need ".*", which costs the one-pass property:
// they are only asked for when nothing request-level exists.
func StatsFilter(sel mesh.Selector) string {
	return "^(?:" + strings.Join(filterAlternatives(sel), "|") + ")$"
}

// The stats each family contributes (Normalise reads no other).
const (
	httpStats    = `\.downstream_(?:rq_(?:total|active)|cx_(?:active|drain_close))`
	clusterStats = `\.upstream_(?:rq_(?:total|active)|cx_active)`
	// An IPv4 address or a bracketed IPv6 one, whose colons Envoy may have made underscores.
	bindAddress = `(?:[0-9.]*|\[[0-9a-fA-F_:]*\])`
)

func filterAlternatives(sel mesh.Selector) []string {
	port := portPattern(sel)
	var alternatives []string
	if len(sel.Clusters) == 0 && len(sel.HTTPPrefixes) == 0 {
		alternatives = append(alternatives,
			// inbound_<bind>_<port>, with Istio >= 1.23's ";" after it; and the admin's own
			// requests: an answer that does not count them is a frozen one.
			`http\.(?:inbound_`+bindAddress+`_`+port+`;?`+httpStats+`|admin\.downstream_rq_total)`,
			`cluster\.inbound\|`+port+`\|\|;?`+clusterStats,
			// A TCP proxy port: Istio's stat prefix is the inbound cluster's name.
			`tcp\.inbound\|`+port+`\|\|;?\.downstream_cx_total`,
			`listener\.`+bindAddress+`_`+virtualInboundPort+`\.downstream_cx_(?:total|active)`,
		)
		if sel.Completions {
			alternatives = append(alternatives,
				// Istio >= 1.17 (native stats): istiocustom.istio_requests_total.reporter.destination....
				`istiocustom\.istio_requests_total\.reporter\.(?:=\.)?destination[.;].*`,
				// Istio <= 1.16 (telemetry v2 stats plugin): the tags first, the metric last,
				// without or (Wasm with a custom stat namespace) with a wasmcustom. prefix;
				// Istio 1.7 wrote the metric as _istio_requests_total.
				`(?:wasmcustom\.)?reporter=\.=destination;\.;.*;\.;_?istio_requests_total`,
			)
		}
	} else {
		alternatives = append(alternatives, `http\.admin\.downstream_rq_total`)
	}
	for _, name := range sel.Clusters {
		alternatives = append(alternatives, `cluster\.`+regexp.QuoteMeta(name)+`;?`+clusterStats)
	}
	for _, name := range sel.HTTPPrefixes {
		alternatives = append(alternatives, `http\.`+regexp.QuoteMeta(name)+`;?`+httpStats)
	}
	// server.uptime gives the long-run arrival rate (drain's rule).
	return append(alternatives, `server\.(?:state|uptime)`)
}

// FailuresFilter returns the /stats filter of the sidecar's failure stats, which status and
// check ask for in a request of their own: the drain's poll (StatsFilter) stays as small as it
// is. It selects, for the endpoints sel names, the HTTP connection manager's 5xx counter
// (downstream_rq_5xx: every 5xx a client got, the app's and the sidecar's own), and the
// inbound cluster's 5xx counter and the counters Envoy charges for each response flag of a
// failed attempt to reach the app: upstream_cx_connect_fail (UF),
// upstream_cx_destroy_remote_with_active_rq (UC over HTTP/1.1), upstream_rq_timeout (UT) and
// upstream_rq_rx_reset (UR over HTTP/2) (envoyproxy/envoy conn_pool_base.cc onConnectionEvent,
// router.cc onUpstreamReset, onResponseTimeout, streamResetReasonToResponseFlag). Istio's
// default inclusion list hides all of them; what it keeps is istio_requests_total, so the
// filter also selects its destination series with a 5xx response_code, which carry the
// response flag. Those need ".*": this filter is not one-pass, and need not be (one request
// per status sample, never on the drain's 200ms poll).
func FailuresFilter(sel mesh.Selector) string {
	const (
		httpFailures    = `\.downstream_rq_5xx`
		clusterFailures = `\.upstream_(?:rq_(?:5xx|timeout|rx_reset)|cx_(?:connect_fail|destroy_remote_with_active_rq))`
	)
	var alternatives []string
	if len(sel.Clusters) == 0 && len(sel.HTTPPrefixes) == 0 {
		port := portPattern(sel)
		alternatives = append(alternatives,
			`http\.inbound_`+bindAddress+`_`+port+`;?`+httpFailures,
			`cluster\.inbound\|`+port+`\|\|;?`+clusterFailures,
			// The series with a 5xx response_code, in both text namings of istio_requests_total
			// (StatsFilter's completions): the value follows its tag as ".response_code.503."
			// natively (";.;response_code.=.503;.;" in some builds), "response_code=.=503;.;" in
			// the stats plugin's.
			`istiocustom\.istio_requests_total\.reporter\.(?:=\.)?destination[.;].*[.;]response_code\.(?:=\.)?5[0-9][0-9][.;].*`,
			`(?:wasmcustom\.)?reporter=\.=destination;\.;.*;\.;response_code=\.=5[0-9][0-9];\.;.*;\.;_?istio_requests_total`,
		)
	}
	for _, name := range sel.Clusters {
		alternatives = append(alternatives, `cluster\.`+regexp.QuoteMeta(name)+`;?`+clusterFailures)
	}
	for _, name := range sel.HTTPPrefixes {
		alternatives = append(alternatives, `http\.`+regexp.QuoteMeta(name)+`;?`+httpFailures)
	}
	return "^(?:" + strings.Join(alternatives, "|") + ")$"
}

// portPattern matches the selected ports in a stat name, or any port when none is selected.
func portPattern(sel mesh.Selector) string {
	if len(sel.Ports) == 0 {
		return `[0-9]+`
	}
	ports := make([]string, len(sel.Ports))
	for i, p := range sel.Ports {
		ports[i] = strconv.Itoa(p)
	}
	return digitTrie(ports)
}

// digitTrie writes a set of numbers as a regex in which each digit decides the way on
// (8080 and 80 become 80(?:80)?), so that a port list keeps the filter one-pass.
func digitTrie(numbers []string) string {
	sort.Strings(numbers)
	numbers = slices.Compact(numbers)
	var write func(set []string) string
	write = func(set []string) string {
		var branches []string
		optional := false
		for i := 0; i < len(set); {
			if set[i] == "" {
				optional = true
				i++
				continue
			}
			first := set[i][0]
			var rest []string
			for ; i < len(set) && set[i] != "" && set[i][0] == first; i++ {
				rest = append(rest, set[i][1:])
			}
			branches = append(branches, string(first)+write(rest))
		}
		switch {
		case len(branches) == 0:
			return ""
		case len(branches) == 1 && !optional:
			return branches[0]
		case optional:
			return "(?:" + strings.Join(branches, "|") + ")?"
		default:
			return "(?:" + strings.Join(branches, "|") + ")"
		}
	}
	return write(numbers)
}
