package envoysim

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/meshdrain/meshdrain/pkg/mesh"
	"github.com/meshdrain/meshdrain/pkg/mesh/envoy"
)

// A pod with ten inbound ports in a mesh large enough that an unfiltered /stats is big:
// meshdrain's filtered poll must stay small whatever else the Envoy holds.
func tenPortSidecar(tb testing.TB, extraClusters int) *Sidecar {
	tb.Helper()
	cfg := Config{Profile: ProfileIstio, ExtraClusters: extraClusters}
	for p := 0; p < 10; p++ {
		cfg.Inbound = append(cfg.Inbound, InboundPort{Port: 8080 + p, AppAddr: "127.0.0.1:9"})
	}
	s, err := Start(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = s.Close() })
	return s
}

func bodySize(tb testing.TB, u string) int {
	tb.Helper()
	resp, err := http.Get(u)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	n, _ := io.Copy(io.Discard, resp.Body)
	return int(n)
}

func TestFilteredPollIsSmallInALargeMesh(t *testing.T) {
	clusters := 2000
	if raceEnabled {
		clusters = 300 // still 100 times the filtered size; the figure in the README is from 2000
	}
	s := tenPortSidecar(t, clusters)
	filtered := bodySize(t, s.AdminURL()+"/stats/prometheus?filter="+url.QueryEscape(envoy.StatsFilter(mesh.Selector{})))
	unfiltered := bodySize(t, s.AdminURL()+"/stats/prometheus")
	t.Logf("10 inbound ports, %d outbound clusters: filtered poll %d bytes, unfiltered %d bytes", clusters, filtered, unfiltered)
	if filtered > 64<<10 {
		t.Errorf("filtered poll is %d bytes, over 64 KiB", filtered)
	}
	if unfiltered < 100*filtered {
		t.Errorf("unfiltered %d bytes is not much larger than filtered %d: the mesh is not large", unfiltered, filtered)
	}
	// Filtering walks every stat on the emulated main thread: slow under the race detector,
	// so this test (about bytes, not latency) gives the request time.
	client, err := envoy.New(s.AdminURL(), envoy.Options{RequestTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	snap, err := client.Inbound(ctx, mesh.Selector{})
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Endpoints) != 10 || snap.Read().Signal != mesh.SignalHTTPRequests {
		t.Errorf("endpoints %d, signal %s", len(snap.Endpoints), snap.Read().Signal)
	}
}

// BenchmarkPollAgainstEmulator is one whole poll as prestop makes it: HTTP round trip on a
// kept-alive connection, Envoy-side filtering, parse and normalise.
func BenchmarkPollAgainstEmulator(b *testing.B) {
	s := tenPortSidecar(b, 2000)
	client, err := envoy.New(s.AdminURL(), envoy.Options{})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	for b.Loop() {
		if _, err := client.Inbound(ctx, mesh.Selector{}); err != nil {
			b.Fatal(err)
		}
	}
}
