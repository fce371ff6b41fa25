package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshdrain/meshdrain/pkg/localhttp/localhttptest"
	"github.com/meshdrain/meshdrain/pkg/sim/linkerdsim"
)

// The fault matrix's Linkerd cases: where a Linkerd proxy's admin port differs from Envoy's.
// Its /metrics cannot be filtered by the proxy, so an endless or huge answer is read and
// dropped line by line; a frozen answer is caught by the admin port's own request counter;
// the loopback guard is the same; and a classic proxy's SIGTERM is the other
// sidecar-gone-busy.

func linkerdFM(admin string) []string { return append(fmFlags(admin), "--mesh", "linkerd") }

// metricsLine is one valid sample that the client's filter drops (outbound).
const metricsLine = `request_total{direction="outbound",authority="svc.ns.svc.cluster.local:80",target_port="80",tls="true"} 1` + "\n"

// frozenMetrics is one answer replayed forever, as a cache in front of the admin port would:
// the admin port's request counter, which every real poll moves, stands still.
const frozenMetrics = "# TYPE request_total counter\n" +
	`request_total{direction="inbound",target_port="8080",route_name="default"} 500` + "\n" +
	`request_total{direction="inbound",target_port="4191",route_name="default"} 77` + "\n" +
	"# TYPE response_total counter\n" +
	`response_total{direction="inbound",target_port="8080",route_name="default",status_code="200"} 500` + "\n" +
	"# TYPE proxy_build_info gauge\nproxy_build_info{version=\"v2.340.0\"} 1\n"

// linkerdEmulation is the Linkerd emulator in front of an app, with a client that sends a
// request every 5 ms while its case runs (emulation), as for Envoy.
func linkerdEmulation(t *testing.T, cfg linkerdsim.Config) (*linkerdsim.Sidecar, *emulation) {
	t.Helper()
	cfg.Inbound = []linkerdsim.InboundPort{{Port: 8080, AppAddr: testApp(t)}}
	proxy, err := linkerdsim.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	return proxy, newEmulation(t, proxy.InboundAddr(8080))
}

// staticAdmin answers every request with body, as a cache in front of the admin port would.
func staticAdmin(t *testing.T, body string) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, body) }))
	t.Cleanup(srv.Close)
	return srv.URL
}

func linkerdFaultCases() []faultCase {
	return []faultCase{
		{name: "linkerd-metrics-endless-fast-body", item: "1, 2", bound: fmCapDeadline, reason: "deadline", code: 3,
			setup: func(t *testing.T) faultSetup {
				return faultSetup{args: withCapDeadline(linkerdFM(rawServer(t, func(conn net.Conn, _ *http.Request) {
					io.WriteString(conn, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
					writeForever(conn, chunk(strings.Repeat(metricsLine, 64)), 0)
				})))}
			},
			check: contains("response body exceeds")},
		{name: "linkerd-metrics-chunked-never-ends", item: "1", bound: fmDeadline, reason: "deadline", code: 3,
			setup: func(t *testing.T) faultSetup {
				return faultSetup{args: linkerdFM(rawServer(t, func(conn net.Conn, _ *http.Request) {
					io.WriteString(conn, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
					writeForever(conn, chunk(metricsLine), 20*time.Millisecond)
				}))}
			}},
		{name: "linkerd-metrics-endless-inbound", item: "2", bound: fmDeadline, reason: "deadline", code: 3,
			setup: func(t *testing.T) faultSetup {
				// Series the filter keeps, without end: the 1 MiB kept bound ends each read.
				return faultSetup{args: linkerdFM(rawServer(t, func(conn net.Conn, _ *http.Request) {
					io.WriteString(conn, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
					var b strings.Builder
					for i := 0; i < 64; i++ {
						fmt.Fprintf(&b, "request_total{direction=\"inbound\",target_port=\"8080\",client_id=\"c%d\"} 1\n", i)
					}
					writeForever(conn, chunk(b.String()), 0)
				}))}
			},
			check: contains("the inbound part of /metrics exceeds")},
		{name: "linkerd-metrics-valid-just-under-the-cap", item: "2", bound: fmCapDeadline, reason: "quiet", code: 0,
			setup: func(t *testing.T) faultSetup {
				// The most the client parses (1 MiB of inbound series, ~13,000 of them: a
				// port with thousands of callers), behind 6 MiB of outbound series it drops.
				var b strings.Builder
				b.WriteString(strings.Repeat(metricsLine, 6<<20/len(metricsLine)))
				kept := 0
				for i := 0; kept < 1<<20-300; i++ {
					for _, family := range []string{"request_total", "response_total"} {
						line := fmt.Sprintf("%s{direction=\"inbound\",target_port=\"8080\",client_id=\"c%d\"} %d\n", family, i, i)
						kept += len(line)
						b.WriteString(line)
					}
				}
				return faultSetup{args: withCapDeadline(linkerdFM(staticAdmin(t, b.String())))}
			}},
		{name: "linkerd-metrics-endless-line", item: "2", bound: fmDeadline, reason: "deadline", code: 3,
			setup: func(t *testing.T) faultSetup {
				return faultSetup{args: linkerdFM(rawServer(t, func(conn net.Conn, _ *http.Request) {
					io.WriteString(conn, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
					writeForever(conn, chunk(strings.Repeat("x", 32<<10)), 0)
				}))}
			},
			check: contains("longer than 64 KiB")},
		{name: "linkerd-metrics-frozen", item: "7", bound: fmDeadline, reason: "deadline", code: 3,
			setup: func(t *testing.T) faultSetup {
				// The replayed counter names 4191, the proxy's admin port, not the server's.
				return faultSetup{args: linkerdFM(staticAdmin(t, frozenMetrics))}
			},
			check: func(t *testing.T, r faultRun) {
				frozenSeen(t, r)
				if !strings.Contains(r.stderr, `the admin port's request_total{direction=\"inbound\"} stayed at 77`) {
					t.Error("the frozen error does not name the Linkerd admin counter")
				}
			}},
		{name: "linkerd-emulator-live", item: "7 (control)", bound: fmDeadline, reason: "quiet", code: 0,
			setup: func(t *testing.T) faultSetup {
				proxy, e := linkerdEmulation(t, linkerdsim.Config{})
				// --port: should the port have no series yet, it reads as zero, not as no signal.
				return e.servedBefore(append(linkerdFM(proxy.AdminURL()), "--port", "8080"), nil)
			},
			check: func(t *testing.T, r faultRun) {
				if f := r.final(); f["frozen_answers"] != 0.0 || f["drain_called"] != false || f["naming"] != "linkerd" {
					t.Errorf("final %v", f)
				}
			}},
		{name: "linkerd-classic-sigterm-under-traffic", item: "6", bound: fmDeadline, reason: "sidecar-gone-busy", code: 5,
			setup: func(t *testing.T) faultSetup {
				proxy, e := linkerdEmulation(t, linkerdsim.Config{Injection: linkerdsim.InjectionClassic})
				setup := e.setup(append(linkerdFM(proxy.AdminURL()), "--port", "8080"), 0, nil)
				// SIGTERM 0.3 s into the hook's watch, right after a request was answered: the
				// proxy goes away under traffic, however a busy machine spaced the requests.
				var once sync.Once
				setup.onLog = func(line string) {
					if strings.Contains(line, `"phase":"watch"`) {
						once.Do(func() { time.AfterFunc(300*time.Millisecond, func() { e.onNextAnswer(proxy.Terminate) }) })
					}
				}
				return setup
			},
			check: func(t *testing.T, r faultRun) {
				if !strings.Contains(r.stderr, "proxy-wait-before-exit-seconds") || strings.Contains(r.stderr, "terminationDrainDuration") {
					t.Error("the fix is not Linkerd's")
				}
			}},
		{name: "linkerd-remote-admin", item: "8", bound: fmHold, minEnd: fmHold, reason: "config-error", code: 2,
			setup: func(t *testing.T) faultSetup { return faultSetup{args: linkerdFM("http://10.0.0.1:4191")} },
			check: contains("not a loopback address")},
		{name: "auto-remote-admin", item: "8", bound: fmHold, minEnd: fmHold, reason: "config-error", code: 2,
			setup: func(t *testing.T) faultSetup {
				return faultSetup{args: append(fmFlags("http://169.254.169.254:4191"), "--mesh", "auto")}
			},
			check: contains("not a loopback address")},
		{name: "auto-not-a-sidecar", item: "4", bound: fmHold, minEnd: fmHold, reason: "config-error", code: 2,
			setup: func(t *testing.T) faultSetup {
				return faultSetup{args: append(fmFlags(staticAdmin(t, "<html>hello</html>")), "--mesh", "auto")}
			},
			check: contains("cannot tell which sidecar")},
		{name: "auto-nothing-listens", item: "5", bound: 500 * time.Millisecond, reason: "no-sidecar", code: 0,
			setup: func(t *testing.T) faultSetup {
				return faultSetup{args: append(fmFlags(localhttptest.RefusingURL(t)), "--mesh", "auto")}
			}},
	}
}
