package envoy

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"regexp/syntax"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/meshdrain/meshdrain/pkg/mesh"
)

// The filter is one leading ^ over one alternation (docs/facts.md §2), so that an engine without
// RE2's DFA tries it at one position only, and every alternative starts with a literal.
func TestStatsFilterIsOneAnchoredAlternation(t *testing.T) {
	for _, sel := range []mesh.Selector{{}, {Completions: true}, {Ports: []int{8080, 9090}}, {Clusters: []string{"local_app"}, HTTPPrefixes: []string{"public_listener"}}} {
		filter := StatsFilter(sel)
		if !strings.HasPrefix(filter, "^(?:") || strings.Count(filter, "^") != 1 {
			t.Errorf("%+v: filter %q is not one ^ over one group", sel, filter)
		}
		re, err := syntax.Parse(filter, syntax.Perl)
		if err != nil {
			t.Fatalf("%q: %v", filter, err)
		}
		re = re.Simplify()
		if re.Op != syntax.OpConcat || re.Sub[0].Op != syntax.OpBeginText {
			t.Errorf("%+v: %q does not begin with ^", sel, filter)
		}
		for _, alt := range filterAlternatives(sel) {
			sub, err := syntax.Parse(alt, syntax.Perl)
			if err != nil {
				t.Fatal(err)
			}
			if first := sub.Simplify(); first.Op != syntax.OpConcat && first.Op != syntax.OpLiteral ||
				first.Op == syntax.OpConcat && first.Sub[0].Op != syntax.OpLiteral && first.Sub[0].Op != syntax.OpQuest {
				t.Errorf("alternative %q does not start with a literal", alt)
			}
		}
	}
}

// Real text names of an Istio 1.7 sidecar (telemetry v2 stats: the metric last): the
// completions filter takes the destination reporter's requests and nothing else.
func TestStatsFilterMatchesIstio17TelemetryV2Names(t *testing.T) {
	re := regexp.MustCompile(StatsFilter(mesh.Selector{Completions: true}))
	file, err := os.Open(filepath.Join("testdata", "istio-1.7-stats.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	scanner := bufio.NewScanner(file)
	scanner.Buffer(nil, 1<<20)
	lines := 0
	for scanner.Scan() {
		line := scanner.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		lines++
		want, name := line[0] == '+', line[1:]
		if re.MatchString(name) != want {
			t.Errorf("filter matches %q: %v, want %v", name[:min(len(name), 80)], !want, want)
		}
	}
	if lines < 5 {
		t.Fatalf("fixture has %d names", lines)
	}
	if regexp.MustCompile(StatsFilter(mesh.Selector{})).MatchString("reporter=.=destination;.;source_workload=.=x;.;_istio_requests_total") {
		t.Error("completions asked for without Completions")
	}
}

// bigMeshNames are the stat names of a sidecar in a mesh of clusters outbound clusters (22
// stats each, as the emulator's --extra-clusters and a real Istio sidecar have), with ten
// inbound ports among them: 110k names for 5000 clusters.
func bigMeshNames(clusters int) []string {
	stats := []string{"assignment_stale", "assignment_timeout_received", "bind_errors", "lb_healthy_panic", "max_host_weight",
		"membership_change", "membership_degraded", "membership_excluded", "membership_healthy", "membership_total",
		"retry_or_shadow_abandoned", "update_attempt", "update_empty", "update_failure", "update_no_rebuild", "update_success",
		"upstream_cx_active", "upstream_cx_connect_fail", "upstream_cx_total", "upstream_rq_active", "upstream_rq_total", "version"}
	names := make([]string, 0, clusters*len(stats)+100)
	for i := 0; i < clusters; i++ {
		for _, stat := range stats {
			names = append(names, fmt.Sprintf("cluster.outbound|8080||svc-%05d.ns-%03d.svc.cluster.local;.%s", i, i%200, stat))
		}
	}
	for p := 8080; p < 8090; p++ {
		names = append(names,
			fmt.Sprintf("cluster.inbound|%d||;.upstream_rq_total", p),
			fmt.Sprintf("http.inbound_0.0.0.0_%d;.downstream_rq_total", p),
			fmt.Sprintf("http.inbound_0.0.0.0_%d;.downstream_rq_time", p))
	}
	return append(names, "listener.0.0.0.0_15006.downstream_cx_active", "listener.0.0.0.0_15006.worker_0.downstream_cx_active",
		"server.state", "server.uptime", "http.admin.downstream_rq_total", "http.admin.downstream_rq_active")
}

// Envoy applies the filter to every stat name of the sidecar on its main thread, once per
// poll: on Go's regexp (RE2's semantics without its DFA) a name must cost well under 1µs.
// The cost is the matching thread's CPU time, which a busy machine does not add its
// scheduling delay to as it does to the wall clock (BenchmarkStatsFilterPerName has the
// wall-clock figure).
func TestStatsFilterMatchCostPerName(t *testing.T) {
	names := bigMeshNames(5000)
	re := regexp.MustCompile(StatsFilter(mesh.Selector{}))
	matched := 0
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	start := threadCPUTime(t)
	for _, name := range names {
		if re.MatchString(name) {
			matched++
		}
	}
	perName := (threadCPUTime(t) - start) / time.Duration(len(names))
	if matched != 10+10+1+2+1 {
		t.Errorf("matched %d of %d names", matched, len(names))
	}
	t.Logf("%d names: %v of CPU per name", len(names), perName)
	if !raceEnabled && perName > time.Microsecond {
		t.Errorf("%v of CPU per name, want < 1µs", perName)
	}
}

// threadCPUTime is the time the calling thread has spent on a CPU: the first field of
// /proc/thread-self/schedstat, in nanoseconds (Documentation/scheduler/sched-stats.rst).
func threadCPUTime(t *testing.T) time.Duration {
	t.Helper()
	raw, err := os.ReadFile("/proc/thread-self/schedstat")
	if err != nil {
		t.Fatal(err)
	}
	fields := strings.Fields(string(raw))
	if len(fields) < 1 {
		t.Fatalf("schedstat %q", raw)
	}
	ns, err := strconv.ParseInt(fields[0], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return time.Duration(ns)
}

func BenchmarkStatsFilterPerName(b *testing.B) {
	names := bigMeshNames(5000)
	re := regexp.MustCompile(StatsFilter(mesh.Selector{}))
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		re.MatchString(names[i%len(names)])
	}
}

// A TCP proxy port is never quiet while its connections are open, whichever of its stats
// the sidecar includes: the inbound cluster counts one request per proxied connection; the
// tcp.<prefix> stats count connections but have no gauge, for which the inbound listener's
// open connections stand in; with neither, what is open is unknown.
func TestTCPPortEveryInclusion(t *testing.T) {
	all := loadFamilies(t, "istio-tcp.prom")
	keep := func(names ...string) mesh.Snapshot {
		kept := map[string]bool{"envoy_server_state": true, "envoy_server_uptime": true}
		for _, n := range names {
			kept[n] = true
		}
		fams := map[string]*dtoFamily{}
		for name, f := range all {
			if kept[name] {
				fams[name] = f
			}
		}
		return Normalise(fams, mesh.Selector{Ports: []int{5432}})
	}
	tests := []struct {
		name string
		snap mesh.Snapshot
		want mesh.Reading
	}{
		{"cluster.inbound| included", keep("envoy_cluster_upstream_rq_total", "envoy_cluster_upstream_rq_active", "envoy_tcp_downstream_cx_total", "envoy_listener_downstream_cx_active", "envoy_listener_downstream_cx_total"),
			mesh.Reading{Signal: mesh.SignalClusterRequests, Arrivals: f(17), Active: f(2), Connections: f(5)}},
		{"tcp. and the listener", keep("envoy_tcp_downstream_cx_total", "envoy_listener_downstream_cx_active", "envoy_listener_downstream_cx_total"),
			mesh.Reading{Signal: mesh.SignalTCPConnections, Arrivals: f(17), Active: f(5), Connections: f(5)}},
		{"tcp. only", keep("envoy_tcp_downstream_cx_total"),
			mesh.Reading{Signal: mesh.SignalTCPConnections, Arrivals: f(17)}},
		{"listener only", keep("envoy_listener_downstream_cx_active", "envoy_listener_downstream_cx_total"),
			mesh.Reading{Signal: mesh.SignalConnections, Arrivals: f(120), Active: f(5), Connections: f(5)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.snap.Read()
			if got.Signal != tc.want.Signal || !eqPtr(got.Arrivals, tc.want.Arrivals) || !eqPtr(got.Active, tc.want.Active) || !eqPtr(got.Connections, tc.want.Connections) {
				t.Errorf("reading {%s arrivals=%s active=%s conns=%s}, want {%s arrivals=%s active=%s conns=%s}",
					got.Signal, show(got.Arrivals), show(got.Active), show(got.Connections),
					tc.want.Signal, show(tc.want.Arrivals), show(tc.want.Active), show(tc.want.Connections))
			}
		})
	}
	// Every port: the HTTP port keeps its HTTP signal, the TCP one its cluster's; outbound
	// TCP proxies are not inbound.
	snap := loadSnapshot(t, "istio-tcp.prom", mesh.Selector{})
	if len(snap.Endpoints) != 2 || *snap.Endpoints[0].Port != 5432 || *snap.Endpoints[0].TCPConnectionsTotal != 17 {
		t.Errorf("endpoints %+v", snap.Endpoints)
	}
	if r := snap.Read(); r.Signal != mesh.SignalClusterRequests || *r.Arrivals != 917 || *r.Active != 2 {
		t.Errorf("reading %+v", r)
	}
}

// Istio <= 1.16 (telemetry v2): istio_requests_total in Prometheus form, reporter label
// among the others; only the destination reporter counts.
func TestIstio116Completions(t *testing.T) {
	snap := loadSnapshot(t, "istio-1.16.prom", mesh.Selector{Completions: true})
	if r := snap.Read(); r.Signal != mesh.SignalCompletedRequests || !eqPtr(r.Arrivals, f(88)) {
		t.Errorf("reading %+v", r)
	}
	if snap.ServerUptime == nil || *snap.ServerUptime != 513410 {
		t.Errorf("uptime %v", snap.ServerUptime)
	}
}

func TestPortNameParsing(t *testing.T) {
	for in, want := range map[string]int{"inbound_0.0.0.0_8080": 8080, "inbound_10.38.36.249_9090": 9090, "inbound_[__]_80": 80,
		"inbound_8080": 0, "outbound_0.0.0.0_80": 0, "inbound_0.0.0.0_99999": 0, "inbound_0.0.0.0_80a": 0} {
		if got, ok := istioHTTPPort(in); ok != (want != 0) || ok && got != want {
			t.Errorf("istioHTTPPort(%q) = %d, %v; want %d", in, got, ok, want)
		}
	}
	for in, want := range map[string]int{"inbound|8080||": 8080, "inbound|9080|http|reviews.default.svc.cluster.local": 9080,
		"inbound|x||": 0, "outbound|80||a": 0, "inbound|8080": 0} {
		if got, ok := istioClusterPort(in); ok != (want != 0) || ok && got != want {
			t.Errorf("istioClusterPort(%q) = %d, %v; want %d", in, got, ok, want)
		}
	}
}

func TestDigitTrie(t *testing.T) {
	for in, want := range map[string]string{
		"8080":           "8080",
		"80,8080":        "80(?:80)?",
		"8080,9090,8081": "(?:808(?:0|1)|9090)",
		"9090,80,9090":   "(?:80|9090)",
		"1,12,123":       "1(?:2(?:3)?)?",
	} {
		got := digitTrie(strings.Split(in, ","))
		if got != want {
			t.Errorf("digitTrie(%s) = %q, want %q", in, got, want)
		}
		re := regexp.MustCompile("^" + got + "$")
		for _, n := range strings.Split(in, ",") {
			if !re.MatchString(n) {
				t.Errorf("%q does not match %s", got, n)
			}
		}
		if re.MatchString("808") || re.MatchString("8") {
			t.Errorf("%q matches a prefix", got)
		}
	}
	ported := regexp.MustCompile(StatsFilter(mesh.Selector{Ports: []int{8080, 80}}))
	for name, want := range map[string]bool{
		"http.inbound_0.0.0.0_80.downstream_rq_total":    true,
		"http.inbound_0.0.0.0_8080;.downstream_rq_total": true,
		"http.inbound_0.0.0.0_808.downstream_rq_total":   false,
		"cluster.inbound|80||.upstream_rq_active":        true,
		"cluster.inbound|8081||.upstream_rq_active":      false,
		"http.inbound_[__]_80.downstream_rq_total":       true,
		"listener.[__]_15006.downstream_cx_active":       true,
	} {
		if ported.MatchString(name) != want {
			t.Errorf("ports 80,8080: match %q = %v, want %v", name, !want, want)
		}
	}
}
