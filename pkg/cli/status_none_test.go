package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// A one-shot status --mesh none, in this namespace's real kernel, shows a client that keeps
// sending on its keep-alive connection as sending, with the port's rate: it reads twice,
// --interval apart (a short one here), where one read showed it idle with activity 0.
func TestStatusMeshNoneOneShotShowsWhoSends(t *testing.T) {
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }))
	defer app.Close()
	port := app.Listener.Addr().(*net.TCPAddr).Port
	client := &http.Client{Transport: &http.Transport{MaxIdleConns: 1}, Timeout: 2 * time.Second}
	get := func() error {
		resp, err := client.Get(app.URL)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.Body.Close()
	}
	if err := get(); err != nil { // the connection is open before status's first read
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				_ = get()
			}
		}
	}()
	code, out, errOut := runMain(t, "status", "--mesh", "none", "--port", fmt.Sprint(port), "--interval", "200ms", "-o", "json")
	stop()
	<-sent
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var r struct {
		Hints   []string `json:"hints"`
		Inbound []struct {
			Rate *float64 `json:"requests_rate"`
		} `json:"inbound"`
		Clients []struct {
			Address string `json:"address"`
			State   string `json:"state"`
		} `json:"clients"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if strings.Contains(strings.Join(r.Hints, " "), "no tcp_info") {
		t.Skipf("this kernel shows no data on open connections: %v", r.Hints)
	}
	if len(r.Inbound) != 1 || r.Inbound[0].Rate == nil || *r.Inbound[0].Rate <= 0 {
		t.Errorf("port: %s", out)
	}
	if len(r.Clients) != 1 || r.Clients[0].Address != "127.0.0.1" || r.Clients[0].State != "sending" {
		t.Errorf("clients: %s", out)
	}
}
