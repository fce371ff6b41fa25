package appmetrics

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	dto "github.com/prometheus/client_model/go"

	"github.com/meshdrain/meshdrain/pkg/mesh"
)

// Selector names the app's request counter and the series of it that count: a metric name and
// label matchers, written as in PromQL (http_requests_total{handler!="/healthz"}), so that the
// kubelet's probes and the metrics scrapes, which the app counts as requests too, are left out.
type Selector struct {
	Name     string
	Matchers []Matcher
}

// Matcher is one label matcher. A label a series lacks matches as the empty value, and a
// regular expression must match the whole value, as in PromQL.
type Matcher struct {
	Label, Op, Value string
	re               *regexp.Regexp
}

// The matcher operators, PromQL's.
const (
	OpEqual     = "="
	OpNotEqual  = "!="
	OpRegex     = "=~"
	OpNotRegexp = "!~"
)

// SelectorSyntax is the accepted form, for errors and help.
const SelectorSyntax = `NAME or NAME{LABEL="VALUE",...} with =, !=, =~ or !~`

// ParseSelector reads a selector. The name is required: a counter is read by name.
func ParseSelector(s string) (Selector, error) {
	s = strings.TrimSpace(s)
	name, rest, hasLabels := strings.Cut(s, "{")
	name = strings.TrimSpace(name)
	if !validName(name) {
		return Selector{}, fmt.Errorf("%q: %q is not a metric name: want %s", s, name, SelectorSyntax)
	}
	sel := Selector{Name: name}
	if !hasLabels {
		return sel, nil
	}
	body, ok := strings.CutSuffix(strings.TrimSpace(rest), "}")
	if !ok {
		return Selector{}, fmt.Errorf("%q: no closing }: want %s", s, SelectorSyntax)
	}
	for body = strings.TrimSpace(body); body != ""; {
		m, after, err := parseMatcher(body)
		if err != nil {
			return Selector{}, fmt.Errorf("%q: %w: want %s", s, err, SelectorSyntax)
		}
		sel.Matchers = append(sel.Matchers, m)
		after = strings.TrimSpace(after)
		if after != "" {
			var comma bool
			if after, comma = strings.CutPrefix(after, ","); !comma {
				return Selector{}, fmt.Errorf("%q: %q after a matcher: want , between matchers: want %s", s, after, SelectorSyntax)
			}
		}
		body = strings.TrimSpace(after)
	}
	return sel, nil
}

// parseMatcher reads one LABEL OP "VALUE" at the start of s and returns what follows it.
func parseMatcher(s string) (Matcher, string, error) {
	end := strings.IndexAny(s, "=!")
	if end < 0 {
		return Matcher{}, "", fmt.Errorf("%q has no operator", s)
	}
	m := Matcher{Label: strings.TrimSpace(s[:end])}
	if !validLabel(m.Label) {
		return Matcher{}, "", fmt.Errorf("%q is not a label name", m.Label)
	}
	rest := s[end:]
	for _, op := range []string{OpNotEqual, OpRegex, OpNotRegexp, OpEqual} {
		if strings.HasPrefix(rest, op) {
			m.Op, rest = op, strings.TrimSpace(rest[len(op):])
			break
		}
	}
	if m.Op == "" {
		return Matcher{}, "", fmt.Errorf("label %s: unknown operator in %q", m.Label, rest)
	}
	quoted, after, err := leadingQuoted(rest)
	if err != nil {
		return Matcher{}, "", fmt.Errorf("label %s: %w", m.Label, err)
	}
	if m.Value, err = strconv.Unquote(quoted); err != nil {
		return Matcher{}, "", fmt.Errorf("label %s: value %s: %w", m.Label, quoted, err)
	}
	if m.Op == OpRegex || m.Op == OpNotRegexp {
		if m.re, err = regexp.Compile("^(?:" + m.Value + ")$"); err != nil {
			return Matcher{}, "", fmt.Errorf("label %s: %w", m.Label, err)
		}
	}
	return m, after, nil
}

// leadingQuoted splits s after the double-quoted string it starts with.
func leadingQuoted(s string) (string, string, error) {
	if !strings.HasPrefix(s, `"`) {
		return "", "", fmt.Errorf("value %q is not double-quoted", s)
	}
	for i := 1; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case '"':
			return s[:i+1], s[i+1:], nil
		}
	}
	return "", "", fmt.Errorf("value %s has no closing quote", s)
}

func validName(s string) bool  { return validIdent(s, true) }
func validLabel(s string) bool { return validIdent(s, false) }

// validIdent is Prometheus's legacy name syntax: [a-zA-Z_:][a-zA-Z0-9_:]* for metric names,
// without the colon for labels.
func validIdent(s string, colon bool) bool {
	if s == "" {
		return false
	}
	for i, r := range s {
		switch {
		case r == '_', r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z':
		case r == ':' && colon:
		case r >= '0' && r <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}

// Matches says whether a series of the counter counts.
func (s Selector) Matches(m *dto.Metric) bool {
	for _, x := range s.Matchers {
		if !x.matches(mesh.Label(m, x.Label)) {
			return false
		}
	}
	return true
}

func (x Matcher) matches(v string) bool {
	switch x.Op {
	case OpEqual:
		return v == x.Value
	case OpNotEqual:
		return v != x.Value
	case OpRegex:
		return x.re.MatchString(v)
	default:
		return !x.re.MatchString(v)
	}
}

// String is the selector as it is written.
func (s Selector) String() string {
	if len(s.Matchers) == 0 {
		return s.Name
	}
	parts := make([]string, len(s.Matchers))
	for i, m := range s.Matchers {
		parts[i] = m.Label + m.Op + strconv.Quote(m.Value)
	}
	return s.Name + "{" + strings.Join(parts, ",") + "}"
}
