package simcli

import (
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestLoopCommand: meshdrain-sim loop exits 0 with a clean report against a server that
// answers, and 1 with the failures by kind against one that answers 502 or refuses; its
// flags are checked before any request goes out.
func TestLoopCommand(t *testing.T) {
	ok := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer ok.Close()
	code, out, errOut := runMain(t, "loop", ok.URL, "--count", "5", "--interval", "0s")
	if code != ExitOK || !strings.Contains(out, "5 requests") || !strings.Contains(out, "clean: no request failed") {
		t.Errorf("clean: exit %d, stdout %q, stderr %q", code, out, errOut)
	}

	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusBadGateway) }))
	defer bad.Close()
	code, out, errOut = runMain(t, "loop", bad.URL, "--count", "3", "--interval", "0s", "--mode", "new-connection", "-o", "json")
	var rep struct {
		Failures int `json:"failures"`
		Kinds    []struct {
			Kind  string `json:"kind"`
			Count int    `json:"count"`
		} `json:"kinds"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil || code != ExitFailure || rep.Failures != 3 || len(rep.Kinds) != 1 || rep.Kinds[0].Kind != "http 502" {
		t.Errorf("502: exit %d, report %+v (%v), stderr %q", code, rep, err, errOut)
	}
	if !strings.Contains(errOut, "3 of 3 requests failed") {
		t.Errorf("502: stderr %q does not say how many failed", errOut)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := "http://" + ln.Addr().String() + "/"
	ln.Close()
	code, out, _ = runMain(t, "loop", refused, "--count", "2", "--interval", "0s")
	if code != ExitFailure || !strings.Contains(out, "refused") {
		t.Errorf("refused: exit %d, stdout %q", code, out)
	}

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"loop", ok.URL, "--mode", "sometimes"}, "--mode"},
		{[]string{"loop", ok.URL, "--workers", "0"}, "--workers"},
		{[]string{"loop", ok.URL, "-o", "yaml"}, "-o"},
		{[]string{"loop"}, "accepts 1 arg"},
	} {
		if code, _, errOut := runMain(t, c.args...); code != ExitUsage || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d, stderr %q, want usage naming %s", c.args, code, errOut, c.want)
		}
	}
}
