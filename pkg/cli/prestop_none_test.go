package cli

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/meshdrain/meshdrain/pkg/hook/evidence"
	"github.com/meshdrain/meshdrain/pkg/mesh"
	"github.com/meshdrain/meshdrain/pkg/mesh/kernel"
)

// A misconfigured --mesh none fails safe at start, each problem naming its flag.
func TestPrestopMeshNoneProblems(t *testing.T) {
	for _, c := range []struct {
		args []string
		env  []string
		want string
	}{
		{[]string{"--mesh", "none"}, nil, "--port"},
		{[]string{"--mesh", "none", "--port", "8080", "--admin", "http://127.0.0.1:15000"}, nil, "--admin"},
		{[]string{"--mesh", "none", "--port", "8080", "--cluster", "local_app"}, nil, "--cluster"},
		{[]string{"--mesh", "none", "--port", "8080", "--drain-at", "end"}, nil, "--drain-at"},
		{[]string{"--mesh", "none", "--port", "8080", "--ignore-source", "$(HOST_IP)"}, nil, "--ignore-source $(HOST_IP): the variable HOST_IP is not set"},
		{[]string{"--mesh", "none", "--port", "8080", "--ignore-source", "nonsense"}, nil, "--ignore-source"},
	} {
		_, problems := CheckPrestopConfig(context.Background(), c.args, c.env)
		text := fmt.Sprint(problems)
		if !strings.Contains(text, c.want) {
			t.Errorf("%v: problems %s, want one naming %q", c.args, text, c.want)
		}
	}
}

// With the app listening, --validate passes and the drain reads the kernel, with its
// clients as the evidence and no drain call; $(NAME) is read from the environment.
func TestPrestopMeshNoneConfig(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := fmt.Sprint(ln.Addr().(*net.TCPAddr).Port)
	setup := loadPrestop(context.Background(), []string{"--mesh", "none", "--port", port, "--ignore-source", "$(HOST_IP)", "--validate"}, []string{"HOST_IP=192.0.2.7"})
	if len(setup.problems) > 0 {
		if strings.Contains(fmt.Sprint(setup.problems), "hostNetwork") {
			t.Skipf("this machine's namespace is a node's: %v", setup.problems)
		}
		t.Fatalf("problems: %v", setup.problems)
	}
	if _, ok := setup.sidecar.(*kernel.Kernel); !ok {
		t.Fatalf("sidecar %T, want the kernel", setup.sidecar)
	}
	if _, ok := setup.cfg.Clients.(evidence.Kernel); !ok {
		t.Fatalf("evidence %T, want the kernel's", setup.cfg.Clients)
	}
	if setup.cfg.DrainMode != mesh.DrainNone {
		t.Fatalf("drain mode %s", setup.cfg.DrainMode)
	}
	// A port nobody listens on: --validate says so.
	ln2, _ := net.Listen("tcp", "127.0.0.1:0")
	free := fmt.Sprint(ln2.Addr().(*net.TCPAddr).Port)
	ln2.Close()
	_, problems := CheckPrestopConfig(context.Background(), []string{"--mesh", "none", "--port", free}, nil)
	if !strings.Contains(fmt.Sprint(problems), "--port ["+free+"]: nothing listens on it") {
		t.Fatalf("problems %v", problems)
	}
}

// plan checks the hooks it writes away from the pod: $(HOST_IP) is the pod's variable, and
// the pod's kernel is not this machine's.
func TestPrestopMeshNoneOffline(t *testing.T) {
	hook := []string{"--mesh=none", "--port=8080", "--ignore-source=$(HOST_IP)", "--eds-lag-bound=10s", "--grace-period=52s", "--app-drain=5s", "--log-file=/proc/1/fd/1"}
	if problems := prestopOffline(hook); len(problems) > 0 {
		t.Fatalf("problems: %v", problems)
	}
	// A flag the user adds to plan's hook, which a re-plan keeps as it is.
	if problems := prestopOffline(append(hook, "--wait-past-bound-openers")); len(problems) > 0 {
		t.Fatalf("--wait-past-bound-openers: problems: %v", problems)
	}
	if problems := prestopOffline([]string{"--mesh=none"}); !strings.Contains(fmt.Sprint(problems), "--port") {
		t.Fatalf("problems %v, want --port named", problems)
	}
}

// --app-metrics is checked at start: only with --mesh none, on the loopback, answering, and
// naming a count; each problem names its flag, and a counter with no series yet, or one that
// seems to count the reads themselves, is a warning.
func TestPrestopAppMetricsChecks(t *testing.T) {
	port := fmt.Sprint(appListener(t))
	var reads atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// An app that counts every path, its metrics' own included, as most middleware does.
		n := reads.Add(1) - 1
		fmt.Fprintf(w, "# TYPE http_requests_total counter\nhttp_requests_total{path=\"/\"} 40\nhttp_requests_total{path=\"/metrics\"} %d\n", n)
		fmt.Fprintf(w, "# TYPE inflight gauge\ninflight 2\n")
	}))
	defer srv.Close()
	none := []string{"--mesh", "none", "--port", port}
	for _, c := range []struct {
		args []string
		want string // a problem with this text; "" for none
		warn string // a warning with this text
	}{
		{[]string{"--app-metrics", srv.URL + "/metrics"}, "--app-metrics reads the app's own request counter beside the kernel, with --mesh none", ""},
		{append(none, "--app-requests", "http_requests_total"), "--app-requests names the counter --app-metrics reads: give --app-metrics too", ""},
		{append(none, "--app-metrics", "http://192.0.2.1:9090/metrics"), "--app-metrics: \"http://192.0.2.1:9090/metrics\": host \"192.0.2.1\" is not a loopback address", ""},
		{append(none, "--app-metrics", srv.URL+"/metrics", "--app-requests", `http_requests_total{path=/}`), "--app-requests: ", ""},
		{append(none, "--app-metrics", srv.URL+"/metrics", "--app-requests", "inflight"), "inflight is a gauge: not a request counter", ""},
		{append(none, "--app-metrics", "http://127.0.0.1:"+port+"/nothing-answers-http-here", "--connect-timeout", "200ms"), "--app-metrics: GET http://127.0.0.1:" + port + "/nothing-answers-http-here", ""},
		{append(none, "--app-metrics", srv.URL+"/metrics", "--app-requests", "requests_total"), "", "/metrics has no such series yet"},
		{append(none, "--app-metrics", srv.URL+"/metrics", "--app-requests", `http_requests_total{path="/nope"}`), "", "none of the 2 series of http_requests_total match the labels"},
		{append(none, "--app-metrics", srv.URL+"/metrics"), "", `the series {path="/metrics"} grew by one at each of three reads`},
		{append(none, "--app-metrics", srv.URL+"/metrics", "--app-requests", `http_requests_total{path!="/metrics"}`), "", ""},
	} {
		setup := loadPrestop(context.Background(), append(c.args, "--validate"), nil)
		problems := fmt.Sprint(setup.problems)
		if strings.Contains(problems, "hostNetwork") {
			t.Skipf("this machine's namespace is a node's: %v", setup.problems)
		}
		switch {
		case c.want == "" && len(setup.problems) > 0:
			t.Errorf("%v: problems %s, want none", c.args, problems)
		case c.want != "" && !strings.Contains(problems, c.want):
			t.Errorf("%v: problems %s, want one with %q", c.args, problems, c.want)
		}
		warnings := strings.Join(setup.warnings, "\n")
		if (c.warn != "" && !strings.Contains(warnings, c.warn)) || (c.warn == "" && strings.Contains(warnings, "--app-requests")) {
			t.Errorf("%v: warnings %q, want %q", c.args, warnings, c.warn)
		}
	}
}
