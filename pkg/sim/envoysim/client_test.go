package envoysim

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meshdrain/meshdrain/pkg/clock/clocktest"
	"github.com/meshdrain/meshdrain/pkg/localhttp/localhttptest"
	"github.com/meshdrain/meshdrain/pkg/mesh"
	"github.com/meshdrain/meshdrain/pkg/mesh/envoy"
)

// TestMeshdrainClientAgainstEmulator runs meshdrain's own admin client and normaliser against
// the emulator in every naming profile and inclusion setting.
func TestMeshdrainClientAgainstEmulator(t *testing.T) {
	release := make(chan struct{})
	var slowStarted atomic.Int32
	app := startApp(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			slowStarted.Add(1)
			<-release
		}
		_, _ = io.WriteString(w, "ok")
	})
	defer close(release)

	cases := []struct {
		name      string
		cfg       Config
		sel       mesh.Selector
		naming    mesh.Naming
		inclusion bool // istio-default: only the completed-requests signal
	}{
		{"envoy", Config{Profile: ProfileEnvoy}, mesh.Selector{Clusters: []string{"service_a"}, HTTPPrefixes: []string{"ingress_http"}}, mesh.NamingEnvoy, false},
		{"istio", Config{Profile: ProfileIstio}, mesh.Selector{Ports: []int{8080}}, mesh.NamingIstio, false},
		{"istio-legacy", Config{Profile: ProfileIstioLegacy}, mesh.Selector{Ports: []int{8080}}, mesh.NamingIstioLegacy, false},
		{"istio-pod-ip", Config{Profile: ProfileIstio, BindAddress: "10.38.36.249"}, mesh.Selector{Ports: []int{8080}}, mesh.NamingIstio, false},
		{"istio-default-inclusion", Config{Profile: ProfileIstio, Inclusion: InclusionIstioDefault}, mesh.Selector{Ports: []int{8080}, Completions: true}, "", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := startSidecar(t, tc.cfg, appAddr(app))
			base := "http://" + s.InboundAddr(8080)
			for i := 0; i < 3; i++ {
				resp, err := http.Get(base + "/fast")
				if err != nil {
					t.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			before := slowStarted.Load()
			go func() {
				if resp, err := http.Get(base + "/slow"); err == nil {
					resp.Body.Close()
				}
			}()
			clocktest.Eventually(t, "slow request in flight", func() bool { return slowStarted.Load() == before+1 })

			client, err := envoy.New(s.AdminURL(), envoy.Options{RequestTimeout: time.Second, RetryInitial: 5 * time.Millisecond, RetryMax: 10 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			snap, err := client.Inbound(ctx, tc.sel)
			if err != nil {
				t.Fatalf("Inbound: %v", err)
			}
			if snap.ServerState == nil || *snap.ServerState != 0 {
				t.Errorf("server state = %v", snap.ServerState)
			}
			var rqTotal, rqActive, clusterTotal float64
			var sawHTTP bool
			for _, ep := range snap.Endpoints {
				if ep.HTTPRequestsTotal != nil {
					sawHTTP = true
					rqTotal += *ep.HTTPRequestsTotal
				}
				if ep.HTTPRequestsActive != nil {
					rqActive += *ep.HTTPRequestsActive
				}
				if ep.ClusterRequestsTotal != nil {
					clusterTotal += *ep.ClusterRequestsTotal
				}
			}
			if tc.inclusion {
				if sawHTTP {
					t.Error("inbound HTTP stats visible under istio-default inclusion")
				}
				if snap.CompletedRequestsTotal == nil || *snap.CompletedRequestsTotal != 3 {
					t.Errorf("completed requests = %v, want 3 (the slow one has not completed)", snap.CompletedRequestsTotal)
				}
			} else {
				if snap.Naming != tc.naming {
					t.Errorf("naming = %s, want %s", snap.Naming, tc.naming)
				}
				if rqTotal != 4 || rqActive != 1 || clusterTotal != 4 {
					t.Errorf("downstream_rq_total=%v active=%v upstream_rq_total=%v, want 4 1 4 (%+v)", rqTotal, rqActive, clusterTotal, snap.Endpoints)
				}
			}

			info, err := client.ServerInfo(ctx)
			if err != nil || info.State != "LIVE" || info.CommandLineOptions.DrainStrategy != "Immediate" {
				t.Errorf("ServerInfo = %+v, %v", info, err)
			}
			if err := client.DrainListeners(ctx, mesh.DrainGraceful); err != nil {
				t.Errorf("DrainListeners: %v", err)
			}
			if !s.draining() {
				t.Error("client drain did not start a drain")
			}

			// The client retries failures until its context ends; a short one keeps this fast.
			_ = s.Faults().AdminError()
			short, cancelShort := context.WithTimeout(ctx, 100*time.Millisecond)
			_, err = client.Stats(short, "^server\\.state$")
			cancelShort()
			var statusErr *envoy.StatusError
			if err == nil || !(errors.As(err, &statusErr) && statusErr.Code == 500 || strings.Contains(err.Error(), "status 500")) {
				t.Logf("admin 500 seen by the client as: %v", err)
			}
			_ = s.Faults().Clear()

			s.Kill()
			<-s.Done()
			short, cancelShort = context.WithTimeout(ctx, 100*time.Millisecond)
			_, err = client.ServerInfo(short)
			cancelShort()
			if err == nil {
				t.Error("admin answered after Envoy exited")
			} else if !envoy.IsRefused(err) && !strings.Contains(err.Error(), "refused") {
				t.Logf("exited sidecar seen by the client as: %v", err)
			}
		})
	}
}

// TestFailureStatsAsMeshdrainReadsThem answers meshdrain's failures filter in every naming
// profile after requests the app refused (503 UF), and checks the Prometheus names against
// what Envoy and Istio's bootstraps produce: plain Envoy keeps the class digit and "_xx"
// (envoyproxy/envoy integration_admin_test.cc), Istio cuts "_5xx" and labels "5xx"
// (istio/istio tools/packaging/common/envoy_bootstrap.json).
func TestFailureStatsAsMeshdrainReadsThem(t *testing.T) {
	dead := localhttptest.RefusingAddr(t)
	cases := []struct {
		profile Profile
		sel     mesh.Selector
		lines   []string
	}{
		{ProfileEnvoy, mesh.Selector{Clusters: []string{"service_a"}, HTTPPrefixes: []string{"ingress_http"}}, []string{
			`envoy_http_downstream_rq_xx{envoy_http_conn_manager_prefix="ingress_http",envoy_response_code_class="5"} 2`,
			`envoy_cluster_upstream_cx_connect_fail{envoy_cluster_name="service_a"} 2`,
		}},
		{ProfileIstio, mesh.Selector{Ports: []int{8080}}, []string{
			`envoy_http_downstream_rq{http_conn_manager_prefix="inbound_0.0.0.0_8080",response_code_class="5xx"} 2`,
			`envoy_cluster_upstream_rq{cluster_name="inbound|8080||",response_code_class="5xx"} 2`,
			`envoy_cluster_upstream_cx_connect_fail{cluster_name="inbound|8080||"} 2`,
		}},
		{ProfileIstioLegacy, mesh.Selector{}, []string{
			`envoy_http_inbound_0_0_0_0_8080_downstream_rq{response_code_class="5xx"} 2`,
			`envoy_cluster_upstream_cx_connect_fail{cluster_name="inbound|8080||"} 2`,
		}},
	}
	for _, c := range cases {
		t.Run(string(c.profile), func(t *testing.T) {
			s := startSidecar(t, Config{Profile: c.profile}, dead)
			for i := 0; i < 2; i++ {
				resp, err := http.Get("http://" + s.InboundAddr(8080) + "/")
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
			}
			clocktest.Eventually(t, "both requests logged", func() bool { return len(s.AccessLog()) == 2 })
			_, body := adminDo(t, s, "GET", "/stats/prometheus?filter="+url.QueryEscape(envoy.FailuresFilter(c.sel)))
			for _, line := range c.lines {
				if !hasLine(body, line) {
					t.Errorf("answer lacks %q:\n%s", line, body)
				}
			}
			snap, err := envoy.Parse(strings.NewReader(body), c.sel)
			if err != nil {
				t.Fatal(err)
			}
			if len(snap.Endpoints) != 1 {
				t.Fatalf("endpoints %+v", snap.Endpoints)
			}
			e := snap.Endpoints[0]
			if e.HTTPServerErrorsTotal == nil || *e.HTTPServerErrorsTotal != 2 || e.ConnectFailuresTotal == nil || *e.ConnectFailuresTotal != 2 {
				t.Errorf("endpoint %+v: want 2 5xx and 2 UF", e)
			}
		})
	}
}
