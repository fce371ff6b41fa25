package envoysim

import (
	"regexp"
	"strings"
)

// tagRule is one Envoy tag extractor: the first capture group is cut from the name, the
// second (or the first, when there is only one) is the tag value (Envoy
// source/common/stats/tag_extractor_impl.cc).
type tagRule struct {
	tag string
	re  *regexp.Regexp
}

// tagExtractor turns an Envoy stat name into its tag-extracted name and labels.
type tagExtractor struct{ rules []tagRule }

// listenerAddressRegex is shared by Envoy's default tags and Istio's bootstrap: it admits only
// IP-and-port looking addresses, so listener.admin.* keeps "admin" in its name.
const listenerAddressRegex = `^listener\.(((?:[_.[:digit:]]*|[_\[\]aAbBcCdDeEfF[:digit:]]*))\.)`

// tcpPrefixRegex is the tcp_proxy stat prefix tag, the same in Envoy's defaults and Istio's
// bootstraps: the shortest prefix followed by one last name part.
const tcpPrefixRegex = `^tcp\.((.*?)\.)\w+?$`

// newTagExtractor returns the extractor of a profile. Only the rules that touch the stats this
// emulator emits are listed.
func newTagExtractor(p Profile) *tagExtractor {
	var specs [][2]string
	switch p {
	case ProfileEnvoy:
		// Envoy's default tags (source/common/config/well_known_names.cc).
		specs = [][2]string{
			{"envoy.cluster_name", `^cluster\.((.+?)\.)`},
			{"envoy.http_conn_manager_prefix", `^http\.((.*?)\.)`},
			{"envoy.listener_address", listenerAddressRegex},
			{"envoy.tcp_prefix", tcpPrefixRegex},
			{"envoy.response_code", `_rq(_(\d{3}))$`},
			{"envoy.response_code_class", `_rq_(\d)xx$`},
		}
	case ProfileIstio:
		// Istio >= 1.23 bootstrap (tools/packaging/common/envoy_bootstrap.json): tag values
		// end with ";" in the text name (DelimitedStatsPrefix).
		specs = [][2]string{
			{"cluster_name", `^cluster(\.(.+);)`},
			{"tcp_prefix", tcpPrefixRegex},
			{"http_conn_manager_prefix", `^http\.(((?:[_.[:digit:]\w]*|[_\[\]aAbBcCdDeEfF[:digit:]\w\:]*));\.)`},
			{"response_code", `_rq(_(\d{3}))$`},
			{"response_code_class", `_rq(_(\dxx))$`},
			{"listener_address", listenerAddressRegex},
		}
	case ProfileIstioLegacy, ProfileIstio116:
		// Istio < 1.23 bootstrap: the HTTP prefix regex admits only digits and dots (or hex for
		// IPv6), so inbound_0.0.0.0_8080 is never extracted.
		specs = [][2]string{
			{"cluster_name", `^cluster\.((.+?(\..+?\.svc\.cluster\.local)?)\.)`},
			{"tcp_prefix", tcpPrefixRegex},
			{"response_code", `_rq(_(\d{3}))$`},
			{"response_code_class", `_rq(_(\dxx))$`},
			{"http_conn_manager_prefix", `^http\.(((?:[_.[:digit:]]*|[_\[\]aAbBcCdDeEfF[:digit:]]*))\.)`},
			{"listener_address", listenerAddressRegex},
		}
	}
	te := &tagExtractor{}
	for _, s := range specs {
		te.rules = append(te.rules, tagRule{tag: s[0], re: regexp.MustCompile(s[1])})
	}
	return te
}

// extract applies every rule to the full name, as Envoy does, cutting the matched ranges
// from the name and collecting the values as labels.
func (te *tagExtractor) extract(name string) (string, []label) {
	type cut struct{ from, to int }
	var cuts []cut
	var labels []label
	for _, r := range te.rules {
		m := r.re.FindStringSubmatchIndex(name)
		if m == nil || len(m) < 4 || m[2] < 0 {
			continue
		}
		remove := cut{m[2], m[3]}
		value := name[m[2]:m[3]]
		if len(m) >= 6 && m[4] >= 0 {
			value = name[m[4]:m[5]]
		}
		overlaps := false
		for _, c := range cuts {
			if remove.from < c.to && c.from < remove.to {
				overlaps = true
			}
		}
		if overlaps {
			continue
		}
		cuts = append(cuts, remove)
		labels = append(labels, label{name: r.tag, value: value})
	}
	if len(cuts) == 0 {
		return name, nil
	}
	var b strings.Builder
	last := 0
	// Cuts never overlap; apply them in name order.
	for len(cuts) > 0 {
		first := 0
		for i, c := range cuts {
			if c.from < cuts[first].from {
				first = i
			}
		}
		b.WriteString(name[last:cuts[first].from])
		last = cuts[first].to
		cuts = append(cuts[:first], cuts[first+1:]...)
	}
	b.WriteString(name[last:])
	return b.String(), labels
}

// promLabelName turns Envoy's tag name into a Prometheus label name (envoy.cluster_name →
// envoy_cluster_name).
func promLabelName(tag string) string { return sanitizeMetricName(tag) }

// sanitizeMetricName replaces every character outside [a-zA-Z0-9_] with "_", as Envoy's
// Prometheus formatter does.
func sanitizeMetricName(name string) string {
	b := []byte(name)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
			b[i] = '_'
		}
	}
	return string(b)
}

// promName is a stat's Prometheus metric name: "envoy_" plus the sanitised tag-extracted name,
// except for custom namespaces (istiocustom), which are written without any prefix.
func (s *stat) promName() string {
	tagged, _ := s.tagsOf()
	if s.custom {
		return sanitizeMetricName(tagged)
	}
	return "envoy_" + sanitizeMetricName(tagged)
}

// istioDefaultInclusion is Istio's default stats inclusion list (docs/facts.md §3).
var (
	istioDefaultPrefixes = []string{"reporter=", "component", "istio", "cluster_manager", "listener_manager", "server", "cluster.xds-grpc", "wasm"}
	istioDefaultSuffixes = []string{"rbac.allowed", "rbac.denied", "shadow_allowed", "shadow_denied"}
)

// inclusionFunc returns the predicate that decides whether a stat is created at all.
func inclusionFunc(cfg Config) func(string) bool {
	if cfg.Inclusion != InclusionIstioDefault {
		return func(string) bool { return true }
	}
	prefixes := append(append([]string(nil), istioDefaultPrefixes...), cfg.InclusionPrefixes...)
	suffixes := append([]string(nil), istioDefaultSuffixes...)
	if cfg.Agent == AgentExitOnZero {
		// pilot-agent adds this suffix so that its own poll keeps working.
		suffixes = append(suffixes, "downstream_cx_active")
	}
	return func(name string) bool {
		for _, p := range prefixes {
			if strings.HasPrefix(name, p) {
				return true
			}
		}
		for _, s := range suffixes {
			if strings.HasSuffix(name, s) {
				return true
			}
		}
		return false
	}
}
