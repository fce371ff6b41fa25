package plan

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// A re-plan of a workload whose preStop already runs meshdrain keeps what the user set there.
// plan owns the flags that carry its numbers (plannedFlags), and a meshless plan's app metrics
// (--app-metrics, --app-requests, which a re-plan reads back as its inputs): it writes them
// from the plan and says what changes. Every other flag is the user's (--drain-at, --port, --client-evidence,
// --strict-active, ...) and stays as it is, in its order, after plan's own; --log-file and
// --admin are written only where the preStop has none of its own, and so are a meshless
// plan's --port (the user's own ports stay) and each --ignore-source value (one the user adds
// for a scraper stays beside the node's).

// plannedFlags are the preStop flags whose values are the plan's numbers. --deadline is among
// them although plan never writes it: prestop derives it from the grace period, which is what
// the plan's arithmetic is sized on, so a hand-set one is removed (and said).
var plannedFlags = []string{"grace-period", "app-drain", "quiet", "min-wait", "eds-lag-bound", "client-period", "rps-per-client", "poll", "deadline",
	"app-metrics", "app-requests", "fallback-wait"}

// lagFlags are the hook's distribution and risk, which a plan from --lag-from writes.
var lagFlags = []string{"lag-dist", "risk"}

// defaultedFlags are flags plan writes where the preStop has none: where the hook logs and
// where it reads the sidecar are the user's to point elsewhere.
var defaultedFlags = []string{"log-file", "admin", "port"}

// additiveFlags are repeatable flags of which plan writes its values where the preStop does not
// give the same value already; the preStop's other values stay (--ignore-source=10.0.0.0/8 for
// a scraper, beside plan's $(HOST_IP)).
var additiveFlags = []string{"ignore-source"}

// repeatedFlags are repeatable flags a plan may own: each value is a flag of its own.
var repeatedFlags = []string{"port", "ignore-source"}

// InputFlags are the preStop flags a re-plan reads as its inputs where the plan's own flag is
// not given (Workload.PrestopFlag): facts about the app and its clients, which a re-plan must
// not lower to a default.
var InputFlags = []string{"app-drain", "quiet", "poll", "min-wait", "client-period", "rps-per-client", "fallback-wait"}

// prestopToken is one item of a preStop command after "prestop": a flag plan knows, with its
// value and the tokens it took, or (name "") a token plan keeps as it is.
type prestopToken struct {
	name, value string
	tokens      []string
}

// splitPrestopArgs splits a meshdrain prestop command's arguments into items, and what follows
// "--" (the program --exec runs, and its arguments). Only the flags plan writes are known to
// take their value from the next token; every other token is an item of its own, so a flag
// plan does not know keeps its value next to it.
func splitPrestopArgs(args []string) (items []prestopToken, tail []string, hasTail bool) {
	for i := 0; i < len(args); i++ {
		t := args[i]
		if t == "--" {
			return items, args[i+1:], true
		}
		name, value, hasValue := strings.Cut(strings.TrimPrefix(t, "--"), "=")
		if !strings.HasPrefix(t, "--") || !isPlanFlag(name) {
			items = append(items, prestopToken{tokens: []string{t}})
			continue
		}
		item := prestopToken{name: name, value: value, tokens: []string{t}}
		if !hasValue && i+1 < len(args) {
			item.value = args[i+1]
			item.tokens = append(item.tokens, args[i+1])
			i++
		}
		items = append(items, item)
	}
	return items, nil, false
}

// isPlanFlag: plan writes this flag (in some plan), and it takes a value.
func isPlanFlag(name string) bool {
	return slices.Contains(plannedFlags, name) || slices.Contains(defaultedFlags, name) || slices.Contains(additiveFlags, name) || slices.Contains(lagFlags, name) || name == "mesh" || name == "drain-at"
}

// plannedHoldFlags are the flags of istio-proxy's `meshdrain hold` whose values are the plan's:
// hold ends by the app hook's deadline plus its drain, from prestop's --grace-period and
// --app-drain; a hand-set --deadline is removed as in prestop's (hold derives the same one).
// Every other flag of hold (--channel, --port, --prestop-wait, ...) is the user's.
var plannedHoldFlags = []string{"grace-period", "app-drain", "deadline"}

// PrestopFlag is the value of --name in the workload's meshdrain preStop (the last one given,
// as prestop reads it), and whether it is there.
func (w *Workload) PrestopFlag(name string) (string, bool) {
	items, _, _ := splitPrestopArgs(w.PrestopArgs)
	value, found := "", false
	for _, it := range items {
		if it.name == name {
			value, found = it.value, true
		}
	}
	return value, found
}

// PrestopHas says whether the workload's meshdrain preStop sets the boolean --name (the
// last of --name, --name=true and --name=false wins, as prestop reads them).
func (w *Workload) PrestopHas(name string) bool {
	items, _, _ := splitPrestopArgs(w.PrestopArgs)
	set := false
	for _, it := range items {
		for _, t := range it.tokens {
			flag, value, hasValue := strings.Cut(strings.TrimPrefix(t, "--"), "=")
			if strings.HasPrefix(t, "--") && flag == name {
				set = !hasValue || value == "true"
			}
		}
	}
	return set
}

// PrestopFlagValues are every value of the repeatable --name in the workload's meshdrain
// preStop, in order (--port=8080 --port=9090, or --port=8080,9090 as one value).
func (w *Workload) PrestopFlagValues(name string) []string {
	items, _, _ := splitPrestopArgs(w.PrestopArgs)
	var values []string
	for _, it := range items {
		if it.name == name {
			values = append(values, it.value)
		}
	}
	return values
}

// prestopMerge is the preStop command a re-plan writes, and what it changes.
type prestopMerge struct {
	args    []string // after the binary: "prestop", plan's own flags, the user's, "--" and the tail
	changes []string // the plan's flags that change, in words
	kept    []string // the user's tokens, as written
}

// mergePrestop merges the plan's preStop arguments into the workload's meshdrain preStop.
func (p Plan) mergePrestop(old []string) prestopMerge {
	owned := func(it prestopToken) bool {
		if slices.Contains(plannedFlags, it.name) {
			return true
		}
		if slices.Contains(lagFlags, it.name) {
			// The plan's only when it fits a distribution: a re-plan without --lag-from
			// keeps the hook's own.
			return p.Input.LagFrom != nil
		}
		return p.mesh().ownsFlag(p, it)
	}
	return p.mergeArgs("prestop", p.PrestopArgs()[1:], old, owned)
}

// mergeHold merges the plan's hold arguments into the workload's istio-proxy hold preStop.
func (p Plan) mergeHold(old []string) prestopMerge {
	owned := func(it prestopToken) bool { return slices.Contains(plannedHoldFlags, it.name) }
	return p.mergeArgs("hold", p.HoldArgs()[1:], old, owned)
}

// mergeArgs merges own, the plan's arguments of `meshdrain VERB`, into old, the workload's.
// The flags owned says are the plan's take own's values where they stand (and are removed
// where own has none); every other token stays as written, where it is written; a flag of
// own's that old lacks is written after the plan's flag before it, so a re-plan changes the
// lines whose values change and no other. A defaulted flag of own is left out where old has
// its own, and so is an additive value old already gives. A repeatable flag the plan owns
// (a meshless plan's --port) is matched value by value.
func (p Plan) mergeArgs(verb string, own, old []string, owned func(prestopToken) bool) prestopMerge {
	items, tail, hasTail := splitPrestopArgs(old)
	newItems, _, _ := splitPrestopArgs(own)
	key := func(it prestopToken) string {
		if slices.Contains(repeatedFlags, it.name) {
			return it.name + "=" + it.value
		}
		return it.name
	}
	hasOwn := map[string]bool{}   // defaulted flags the user set
	hasValue := map[string]bool{} // additive flags: name=value already in old
	for _, it := range items {
		if it.name != "" && !owned(it) {
			if slices.Contains(defaultedFlags, it.name) {
				hasOwn[it.name] = true
			}
			if slices.Contains(additiveFlags, it.name) {
				hasValue[it.name+"="+it.value] = true
			}
		}
	}
	want := map[string]prestopToken{} // the plan's items to write, by key
	var wantOrder []string
	for _, it := range newItems {
		if it.name == "" || hasOwn[it.name] || hasValue[it.name+"="+it.value] {
			continue // the user's own stays, among the kept flags
		}
		want[key(it)] = it
		wantOrder = append(wantOrder, key(it))
	}
	var m prestopMerge
	var out []prestopToken
	placed := map[string]int{} // key → index in out
	for _, it := range items {
		if it.name == "" || !owned(it) {
			out = append(out, it)
			m.kept = append(m.kept, it.tokens...)
			continue
		}
		k := key(it)
		nw, planned := want[k]
		if _, again := placed[k]; !planned || again {
			m.changes = append(m.changes, p.removal(verb, it))
			continue
		}
		if !sameFlagValue(it.value, nw.value) {
			m.changes = append(m.changes, fmt.Sprintf("--%s %s → %s", it.name, it.value, nw.value))
			it = nw
		}
		placed[k] = len(out)
		out = append(out, it)
	}
	at := 0 // where the next new flag goes: after the plan's flag before it
	for _, k := range wantOrder {
		if i, ok := placed[k]; ok {
			at = i + 1
			continue
		}
		it := want[k]
		out = slices.Insert(out, at, it)
		for pk, i := range placed {
			if i >= at {
				placed[pk] = i + 1
			}
		}
		placed[k] = at
		at++
		m.changes = append(m.changes, "adds --"+it.name+"="+it.value)
	}
	m.args = []string{verb}
	for _, it := range out {
		m.args = append(m.args, it.tokens...)
	}
	if hasTail {
		m.args = append(append(m.args, "--"), tail...)
		m.kept = append(append(m.kept, "--"), tail...)
	}
	return m
}

// removal says why a re-plan removes one of its own flags from a preStop.
func (p Plan) removal(verb string, it prestopToken) string {
	why := ""
	switch it.name {
	case "deadline":
		why = fmt.Sprintf(" (%s derives %s from the grace period, as the plan is sized on)", verb, fmtD(p.Deadline))
	case "min-wait", "poll":
		why = " (prestop's default)"
	case "mesh":
		why = " (an Istio plan)"
	case "drain-at", "admin":
		why = " (no sidecar: prestop --mesh=none has none to drain or read)"
	case "port":
		why = " (the ports clients use, as plan said above)"
	}
	return fmt.Sprintf("removes --%s=%s%s", it.name, it.value, why)
}

// sameFlagValue compares two values of a flag as prestop reads them: "60" and "60s" are the
// same grace period, "1s" and "1000ms" the same window.
func sameFlagValue(a, b string) bool {
	da, errA := flagDuration(a)
	db, errB := flagDuration(b)
	if errA == nil && errB == nil {
		return da == db
	}
	return a == b
}

// flagDuration reads a duration flag's value: a Go duration, or whole seconds as
// --grace-period also takes them.
func flagDuration(v string) (time.Duration, error) {
	if d, err := time.ParseDuration(v); err == nil {
		return d, nil
	}
	secs, err := strconv.ParseInt(v, 10, 64)
	return time.Duration(secs) * time.Second, err
}
