package cli

import (
	"context"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/meshdrain/meshdrain/pkg/hook/drain"
	"github.com/meshdrain/meshdrain/pkg/mesh"
	"github.com/meshdrain/meshdrain/pkg/mesh/envoy"
)

// fuzzUnsafe are the flags the fuzz target leaves out: they open paths for writing
// (--log-file under --validate) or read arbitrary ones (--pidfile); their handling is tested
// with fixed inputs.
var fuzzUnsafe = []string{"log-file", "validate", "pidfile"}

func fuzzSafe(s string) bool {
	s = strings.ToLower(strings.ReplaceAll(s, "_", "-"))
	for _, bad := range fuzzUnsafe {
		if strings.Contains(s, bad) {
			return false
		}
	}
	return true
}

// FuzzPrestopConfig feeds arbitrary command lines and MESHDRAIN_* environments to prestop's
// start (parse, variables, every check), one argument or variable per line. Whatever comes in,
// it must not panic; the fail-safe hold must never be negative; and a configuration accepted
// without problems must be one the drain can run: a positive deadline within the grace
// period, polls of at least 20ms, a quiet window of two polls or more that fits the deadline,
// --min-wait within it, a selection whose filter is a valid regex, a sidecar to drain (or, for
// --mesh auto, candidates to ask), no drain call for Linkerd, and no
// URL password in the settings it logs. Seeds: testdata/fuzz/FuzzPrestopConfig.
func FuzzPrestopConfig(f *testing.F) {
	f.Add("--grace-period\n30s\n--app-drain\n5s", "")
	f.Add("--quiet=40s\n--min-wait=60s", "MESHDRAIN_POLL=1ns")
	f.Add("--admin\nhttp://u:secret@[::1]\n--port\n8080,9090", "MESHDRAIN_GRACEPERIOD=45s")
	f.Add("--mesh=linkerd\n--port=4191\n--drain-mode=graceful", "MESHDRAIN_ADMIN=http://127.0.0.1:4191")
	f.Add("--mesh\nauto\n--cluster\nlocal_app", "MESHDRAIN_MESH=linkerd")
	f.Fuzz(func(t *testing.T, argLines, envLines string) {
		var args, env []string
		for _, a := range strings.Split(argLines, "\n") {
			if a != "" && fuzzSafe(a) {
				args = append(args, a)
			}
		}
		for _, kv := range strings.Split(envLines, "\n") {
			if kv == "" || !fuzzSafe(kv) {
				continue
			}
			if !strings.HasPrefix(kv, "MESHDRAIN_") {
				kv = "MESHDRAIN_" + kv
			}
			env = append(env, kv)
		}
		setup := loadPrestop(context.Background(), args, env)
		if setup.hold < 0 {
			t.Fatalf("negative hold %v", setup.hold)
		}
		if setup.opts.help || len(setup.problems) > 0 {
			return
		}
		cfg := setup.cfg
		switch {
		case cfg.Deadline <= 0 || cfg.Deadline > setup.opts.gracePeriod:
			t.Fatalf("deadline %v with grace %v", cfg.Deadline, setup.opts.gracePeriod)
		case cfg.Poll < drain.MinPoll || cfg.Quiet < 2*cfg.Poll || cfg.Quiet >= cfg.Deadline:
			t.Fatalf("poll %v quiet %v deadline %v", cfg.Poll, cfg.Quiet, cfg.Deadline)
		case cfg.MinWait < 0 || cfg.MinWait > cfg.Deadline:
			t.Fatalf("min-wait %v deadline %v", cfg.MinWait, cfg.Deadline)
		case setup.sidecar == nil && (setup.opts.mesh != mesh.Auto || len(setup.candidates) == 0):
			t.Fatal("no sidecar to drain and nothing to detect")
		case setup.opts.mesh == mesh.Linkerd && cfg.DrainMode != mesh.DrainNone:
			t.Fatalf("a Linkerd drain with drain mode %s", cfg.DrainMode)
		}
		if _, err := regexp.Compile(envoy.StatsFilter(cfg.Selector)); err != nil {
			t.Fatalf("filter for %+v: %v", cfg.Selector, err)
		}
		for _, s := range cfg.Settings {
			if s.Name != "admin" && s.Name != "shutdown-url" {
				continue
			}
			if u, err := url.Parse(s.Value); err == nil && u.User != nil {
				if pw, ok := u.User.Password(); ok && pw != "xxxxx" {
					t.Fatalf("setting %s logs a password: %s", s.Name, s.Value)
				}
			}
		}
	})
}
