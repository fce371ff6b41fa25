package main

import (
	"net/http/httptest"
	"testing"
	"time"
)

// A request that stays open after the clients have stopped (a stream, a WebSocket) does not
// hold the app to the deadline: prestop exits 0 with reason quiet-streams and the count of
// open streams, unless --strict-active.
func TestPrestopQuietStreams(t *testing.T) {
	admin := &traceAdmin{script: func(since time.Duration) (float64, float64, bool) {
		return 100 + float64(min(since, 300*time.Millisecond)/time.Millisecond), 2, true
	}}
	srv := httptest.NewServer(admin)
	defer srv.Close()

	res := runBinary(t, nil, append(fastFlags(srv.URL), "--streams-wait", "300ms", "--deadline", "5s")...)
	final := res.final(t)
	if res.code != 0 || final["reason"] != "quiet-streams" || final["open_streams"] != 2.0 {
		t.Fatalf("exit %d, final %v", res.code, final)
	}
	// Well before the 5 s deadline, allowing the time a busy machine kept the hook off the CPU.
	late := res.exited.Sub(admin.lastChangeAt())
	if late < quiet+300*time.Millisecond || late > quiet+300*time.Millisecond+time.Second+res.allowance() {
		t.Errorf("exited %v after the last arrival (%v waiting for a CPU), want quiet %v + streams wait 300ms", late, res.runDelay, quiet)
	}

	res = runBinary(t, nil, append(fastFlags(srv.URL), "--strict-active", "--deadline", "1500ms")...)
	if res.code != 3 || res.final(t)["reason"] != "deadline" {
		t.Errorf("--strict-active: exit %d, final %v; want the deadline", res.code, res.final(t))
	}
}
