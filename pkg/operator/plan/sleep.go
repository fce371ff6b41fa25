package plan

import (
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/meshdrain/meshdrain/pkg/operator/yamlnode"
	yaml "go.yaml.in/yaml/v3"
)

// A preStop that only sleeps is the usual way a mesh's pods were kept serving while clients
// learned of their deletion: a fixed guess at what meshdrain measures. Replacing it loses
// nothing, so plan does it without --replace-prestop. Any other hook does something the app
// may rely on (flushes, deregisters, calls /shutdown) and stays the operator's decision.

// shells run `-c SCRIPT`; a script that is one sleep command is a sleep.
var shells = []string{"sh", "bash", "ash", "dash", "ksh", "zsh"}

// sleepArg is an argument of sleep(1) as GNU coreutils and busybox read it: a number of
// seconds, with a fraction and an s, m, h or d suffix allowed ("15", "15s", "0.5", "1m").
var sleepArg = regexp.MustCompile(`^([0-9]+(?:\.[0-9]*)?|\.[0-9]+)([smhd]?)$`)

// preStopSleep is how long a preStop handler sleeps when sleeping is all it does: the
// Kubernetes sleep action, or an exec of sleep(1) directly or as a shell's whole script.
func preStopSleep(h *yaml.Node) (time.Duration, bool) {
	h = yamlnode.Resolve(h)
	if h == nil || h.Kind != yaml.MappingNode || len(h.Content) != 2 {
		return 0, false // no handler, or several (which Kubernetes refuses)
	}
	v := yamlnode.Resolve(h.Content[1])
	switch h.Content[0].Value {
	case "sleep":
		secs, err := strconv.ParseInt(yamlnode.Scalar(yamlnode.Lookup(v, "seconds")), 10, 64)
		if err != nil || secs < 0 {
			return 0, false
		}
		return time.Duration(secs) * time.Second, true
	case "exec":
		if cmd := yamlnode.Resolve(yamlnode.Lookup(v, "command")); cmd != nil && cmd.Kind == yaml.SequenceNode {
			return execSleep(yamlnode.Strings(cmd))
		}
	}
	return 0, false
}

// execSleep reads an exec command: ["sleep", "15"], ["/bin/sleep", "15"], or
// ["sh", "-c", "sleep 15"] with any shell of shells and a script that is that one command,
// trailing semicolons and white space allowed. A script that does anything else is not a
// sleep: "sleep 15 && kill 1", "sleep $T", "sleep 15; nginx -s quit".
func execSleep(cmd []string) (time.Duration, bool) {
	switch {
	case len(cmd) == 2 && filepath.Base(cmd[0]) == "sleep":
		return sleepDuration(cmd[1])
	case len(cmd) == 3 && slices.Contains(shells, filepath.Base(cmd[0])) && cmd[1] == "-c":
		script := strings.TrimSpace(strings.TrimRight(cmd[2], " \t\r\n;"))
		words := strings.Fields(script)
		if len(words) != 2 || filepath.Base(words[0]) != "sleep" || strings.ContainsAny(script, "\n;") {
			return 0, false
		}
		return sleepDuration(words[1])
	}
	return 0, false
}

// sleepDuration parses one argument of sleep(1); "infinity" and variables are not a sleep
// plan can stand in for.
func sleepDuration(arg string) (time.Duration, bool) {
	m := sleepArg.FindStringSubmatch(arg)
	if m == nil {
		return 0, false
	}
	n, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		return 0, false
	}
	unit := map[string]time.Duration{"": time.Second, "s": time.Second, "m": time.Minute, "h": time.Hour, "d": 24 * time.Hour}[m[2]]
	return time.Duration(n * float64(unit)), true
}
