package cli

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/meshdrain/meshdrain/pkg/hook/drain"
	"github.com/meshdrain/meshdrain/pkg/localhttp/localhttptest"
	"github.com/meshdrain/meshdrain/pkg/mesh"
	"github.com/meshdrain/meshdrain/pkg/mesh/backends"
	"github.com/meshdrain/meshdrain/pkg/mesh/envoy"
	"github.com/meshdrain/meshdrain/pkg/mesh/linkerd"
	"github.com/meshdrain/meshdrain/pkg/sim/envoysim"
	"github.com/meshdrain/meshdrain/pkg/sim/linkerdsim"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

func problemsText(setup *prestopSetup) string {
	var b strings.Builder
	for _, p := range setup.problems {
		b.WriteString(p.Error() + "\n")
	}
	return b.String()
}

// --mesh takes status's values; the default keeps today's Envoy hook; linkerd builds the
// Linkerd client with no drain call; every mistake is a start problem (the fail-safe path).
func TestPrestopMesh(t *testing.T) {
	load := func(args ...string) *prestopSetup { return loadPrestop(context.Background(), args, nil) }

	setup := load()
	if _, ok := setup.sidecar.(*envoy.Client); !ok || setup.opts.mesh != mesh.Istio || setup.adminURL != envoy.DefaultURL ||
		setup.cfg.DrainMode != mesh.DrainGraceful || len(setup.problems) > 0 {
		t.Errorf("default: %T mesh %s admin %s drain %s %v", setup.sidecar, setup.opts.mesh, setup.adminURL, setup.cfg.DrainMode, setup.problems)
	}
	for _, sidecarMesh := range []mesh.Mesh{mesh.Istio, mesh.Envoy} {
		if setup := load("--mesh", string(sidecarMesh), "--admin", "http://127.0.0.1:19000"); len(setup.problems) > 0 || setup.adminURL != "http://127.0.0.1:19000" {
			t.Errorf("--mesh %s: %v", sidecarMesh, setup.problems)
		}
	}

	setup = load("--mesh=linkerd", "--port", "8080")
	hook, ok := setup.sidecar.(*linkerd.HookSidecar)
	if !ok || len(setup.problems) > 0 || setup.adminURL != linkerd.DefaultAdminURL || setup.cfg.DrainMode != mesh.DrainNone {
		t.Fatalf("linkerd: %T admin %s drain %s %v", setup.sidecar, setup.adminURL, setup.cfg.DrainMode, setup.problems)
	}
	h := hook.Hints()
	if !strings.Contains(h.SidecarGone, `proxy-wait-before-exit-seconds: "29"`) || strings.Contains(h.MissingStats, "istio") || h.NoDrainCall == "" ||
		h.AdminCounter != linkerd.AdminCounter {
		t.Errorf("hints %+v (deadline 24s + app drain 5s = 29)", h)
	}
	if len(setup.warnings) != 0 {
		t.Errorf("warnings %v with the default --drain-mode", setup.warnings)
	}
	if setup := load("--mesh=linkerd", "--drain-mode", "graceful"); len(setup.problems) > 0 || len(setup.warnings) != 1 ||
		!strings.Contains(setup.warnings[0], "no effect on a Linkerd proxy") {
		t.Errorf("explicit --drain-mode: problems %v warnings %v", setup.problems, setup.warnings)
	}

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--mesh", "consul"}, `--mesh "consul": want auto, istio, envoy, linkerd`},
		{[]string{"--mesh", "linkerd", "--cluster", "local_app"}, "a Linkerd proxy counts per target port"},
		{[]string{"--mesh", "linkerd", "--port", "8080,4191"}, "admin port"},
		{[]string{"--mesh", "linkerd", "--admin", "http://127.0.0.1:14191", "--port", "14191"}, "admin port"},
		{[]string{"--mesh", "linkerd", "--admin", "http://10.0.0.7:4191"}, "not a loopback address"},
		{[]string{"--mesh", "auto", "--admin", "http://metadata.google.internal:4191"}, "not a loopback address"},
	} {
		setup := load(c.args...)
		if !strings.Contains(problemsText(setup), c.want) {
			t.Errorf("%v: problems %q, want %q", c.args, problemsText(setup), c.want)
		}
	}
	if setup := load("--mesh", "linkerd", "--admin", "http://10.0.0.7:4191", "--allow-remote"); len(setup.problems) > 0 {
		t.Errorf("--allow-remote: %v", setup.problems)
	}

	setup = load("--mesh", "auto")
	if setup.sidecar != nil || strings.Join(setup.candidates, " ") != linkerd.DefaultAdminURL+" "+envoy.DefaultURL || len(setup.problems) > 0 {
		t.Errorf("auto: %T candidates %v %v", setup.sidecar, setup.candidates, setup.problems)
	}
	if setup := load("--mesh", "auto", "--admin", "http://[::1]:4191"); strings.Join(setup.candidates, " ") != "http://[::1]:4191" {
		t.Errorf("auto with --admin: candidates %v", setup.candidates)
	}
	// The setting logged says which admin URL the default means, and that Linkerd ignores
	// --drain-mode.
	settings := map[string]drain.Setting{}
	for _, s := range load("--mesh=linkerd").cfg.Settings {
		settings[s.Name] = s
	}
	if settings["admin"].Value != linkerd.DefaultAdminURL || settings["admin"].Source != sourceDefault ||
		!strings.Contains(settings["drain-mode"].Value, "not used") {
		t.Errorf("settings admin %+v drain-mode %+v", settings["admin"], settings["drain-mode"])
	}
}

func TestPrestopValidateMesh(t *testing.T) {
	code, out, errOut := runMain(t, "prestop", "--validate", "--mesh", "linkerd")
	if code != ExitOK || !strings.Contains(out, "mesh      linkerd: reads /metrics, no drain call") || !strings.Contains(out, "admin     http://127.0.0.1:4191") {
		t.Errorf("exit %d\n%s%s", code, out, errOut)
	}
	code, out, _ = runMain(t, "prestop", "--validate", "--mesh", "auto")
	if code != ExitOK || !strings.Contains(out, "asks http://127.0.0.1:4191, then http://127.0.0.1:15000 at start") {
		t.Errorf("auto: exit %d\n%s", code, out)
	}
	code, _, errOut = runMain(t, "prestop", "--validate", "--mesh", "linkerd", "--port", "4191", "--http-prefix", "public_listener")
	if code != ExitUsage || !strings.Contains(errOut, "admin port") || !strings.Contains(errOut, "counts per target port") {
		t.Errorf("bad linkerd hook: exit %d\n%s", code, errOut)
	}
	if _, problems := CheckPrestopConfig(context.Background(), []string{"--mesh", "envoyy"}, nil); len(problems) != 1 {
		t.Errorf("CheckPrestopConfig: %v", problems)
	}
}

// notASidecar answers /ready like neither sidecar.
func notASidecar(t *testing.T) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("<html>hi</html>")) }))
	t.Cleanup(srv.Close)
	return srv.URL
}

// --mesh auto at start: the first candidate that answers as a sidecar, within
// --connect-timeout; something that answers as neither ends the detection at once.
func TestDetectSidecar(t *testing.T) {
	proxy, err := linkerdsim.Start(linkerdsim.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	envoy, err := envoysim.Start(envoysim.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { envoy.Close() })
	o := defaultPrestopOptions()
	o.connectTimeout, o.poll = 300*time.Millisecond, 20*time.Millisecond
	closed := localhttptest.RefusingURL(t)

	for _, c := range []struct {
		name        string
		candidates  []string
		mesh        mesh.Mesh
		url         string
		unreachable bool
		atOnce      bool
	}{
		{"linkerd first", []string{closed, proxy.AdminURL(), envoy.AdminURL()}, mesh.Linkerd, proxy.AdminURL(), false, true},
		{"envoy", []string{closed, envoy.AdminURL()}, mesh.Envoy, envoy.AdminURL(), false, true},
		{"nothing listens", []string{closed}, "", "", true, false},
		{"something else", []string{notASidecar(t), envoy.AdminURL()}, "", "", false, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			// "At once" is asserted against a limit far off, not a wall-clock figure a busy
			// machine could break: a detection that waited for its limit would end a minute
			// on, past the guard below.
			limit := o.connectTimeout
			if c.atOnce {
				limit = time.Minute
			}
			start := time.Now()
			found := backends.DetectUntil(context.Background(), c.candidates, backends.Options{RequestTimeout: o.connectTimeout}, o.poll, start, start.Add(limit))
			if found.Mesh != c.mesh || found.URL != c.url || found.Unreachable != c.unreachable {
				t.Errorf("found %+v", found)
			}
			if c.mesh == "" && found.Err == nil {
				t.Error("no error")
			}
			if took := time.Since(start); took > 20*time.Second || (!c.atOnce && took < limit) {
				t.Errorf("took %v (limit %v, at once %v)", took, limit, c.atOnce)
			}
		})
	}
	// The hook's deadline bounds detection too: a limit before the connect timeout ends it,
	// which nothing else would (the candidate refuses at once, every poll).
	start := time.Now()
	if found := backends.DetectUntil(context.Background(), []string{closed}, backends.Options{RequestTimeout: time.Minute}, o.poll, start, start.Add(50*time.Millisecond)); !found.Unreachable || time.Since(start) < 50*time.Millisecond || time.Since(start) > 20*time.Second {
		t.Errorf("deadline 50ms: %+v after %v", found, time.Since(start))
	}
}

// The Linkerd hook warns once when a --port has no series (read as quiet by the lead's rule)
// and names the ports that do have series.
func TestLinkerdHookWarnsAboutSilentPorts(t *testing.T) {
	sim := startLinkerdSim(t, 2)
	client, err := linkerd.New(sim.AdminURL(), linkerd.Options{})
	if err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zap.DebugLevel)
	hook := &linkerd.HookSidecar{Client: client, Log: zap.New(core)}
	for i := 0; i < 3; i++ {
		snap, err := hook.Inbound(context.Background(), mesh.Selector{Ports: []int{9090}})
		if err != nil {
			t.Fatal(err)
		}
		if r := snap.Read(); r.Signal != mesh.SignalHTTPRequests || *r.Arrivals != 0 || *r.Active != 0 || snap.AdminRequestsTotal == nil {
			t.Fatalf("reading %+v", r)
		}
	}
	warned := logs.FilterMessageSnippet("no series for").All()
	if len(warned) != 1 || warned[0].ContextMap()["ports_with_series"] == nil {
		t.Errorf("warnings %v", warned)
	}
}

// status and check call the loopback only, for both meshes, unless --allow-remote; nothing
// is dialled here.
func TestStatusCheckAllowRemote(t *testing.T) {
	for _, args := range [][]string{
		{"status", "--admin", "http://10.0.0.7:15000"},
		{"status", "--mesh", "linkerd", "--admin", "http://10.0.0.7:4191"},
		{"check", "--mesh", "istio", "--admin", "http://169.254.169.254:15000"},
		{"check", "--admin", "http://metadata.google.internal:4191"},
	} {
		code, _, errOut := runMain(t, args...)
		if code != ExitUsage || !strings.Contains(errOut, "not a loopback address") || !strings.Contains(errOut, "--allow-remote") {
			t.Errorf("%v: exit %d %s", args, code, errOut)
		}
	}
	for _, sidecarMesh := range []mesh.Mesh{mesh.Auto, mesh.Istio, mesh.Linkerd} {
		flags := defaultSidecarFlags()
		flags.mesh, flags.admin, flags.allowRemote = sidecarMesh, "http://10.0.0.7:4191", true
		if _, _, _, err := flags.sidecar(); err != nil {
			t.Errorf("--mesh %s --allow-remote: %v", sidecarMesh, err)
		}
	}
}
