package envoysim

import (
	"context"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/meshdrain/meshdrain/pkg/hook/drain"
	"github.com/meshdrain/meshdrain/pkg/mesh"
	"github.com/meshdrain/meshdrain/pkg/mesh/envoy"
)

// meshdrain watches with usedonly polls, but a stat whose used flag Envoy clears after it
// moved is left out of them: with every stat left out of them, traffic that never
// stops still never ends the wait, because the poll that would end it is followed by a
// complete read. Once the traffic stops, the wait ends quiet.
func TestUsedOnlyPollsNeverDecideAlone(t *testing.T) {
	app := startApp(t, nil)
	s := startSidecar(t, Config{Profile: ProfileIstio}, appAddr(app))
	client, err := envoy.New(s.AdminURL(), envoy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// Any ending but the deadline needs the answers shown fresh: without Envoy's admin
	// request counter (Istio's default stats) that is /server_info's uptime stepping, which
	// takes up to a second.
	cfg := drain.Config{DrainMode: mesh.DrainNone, Deadline: 3 * time.Second, Quiet: 150 * time.Millisecond, Poll: 20 * time.Millisecond}

	// Nothing cleared: the watch runs on usedonly polls, and one complete read confirms.
	if res := drain.Run(context.Background(), cfg, client); res.Reason != drain.ReasonQuiet || res.CompleteReads != 1 {
		t.Errorf("idle: reason %s, complete reads %d: want quiet, confirmed by one complete read", res.Reason, res.CompleteReads)
	}

	s.HideFromUsedOnly(true)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		httpClient := &http.Client{Timeout: time.Second}
		for {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			if resp, err := httpClient.Get("http://" + s.InboundAddr(8080) + "/"); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}
	}()
	// The traffic never stops, so this run ends at its deadline: long enough for a usedonly
	// poll to propose quiet and /server_info to step on a loaded machine under the race
	// detector (3 s was not, once, with make test-loaded).
	traffic := cfg
	traffic.Deadline = 6 * time.Second
	res := drain.Run(context.Background(), traffic, client)
	close(stop)
	wg.Wait()
	if res.Reason != drain.ReasonDeadline {
		t.Errorf("traffic throughout, usedonly answers empty: reason %s, want deadline", res.Reason)
	}
	if res.CompleteReads == 0 {
		t.Error("no complete read: the usedonly polls never proposed quiet, so this test tested nothing")
	}

	if res := drain.Run(context.Background(), cfg, client); res.Reason != drain.ReasonQuiet {
		t.Errorf("after the traffic, usedonly answers still empty: reason %s, want quiet", res.Reason)
	}
}
