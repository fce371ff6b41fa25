package httpwire

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"testing"
	"time"
)

// With DrainCloseTimeout a handler's Connection: close leaves the connection open for the
// client to close first, still serves what arrives, and closes it at the timeout; a client
// that asked to close is closed at once.
func TestDrainCloseWaitsForTheClient(t *testing.T) {
	const timeout = 300 * time.Millisecond
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &Server{DrainCloseTimeout: timeout, Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Connection", "close")
		_, _ = io.WriteString(w, "draining")
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close(); srv.Wait() })

	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	br := bufio.NewReader(conn)
	roundTrip := func(close bool) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, "http://pod/", nil)
		req.Close = close
		if err := req.Write(conn); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(br, req)
		if err != nil || !resp.Close {
			t.Fatalf("response %v, %v; want one with Connection: close", resp, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
	}
	// stillOpen reports whether the server has kept the connection: a short read times out
	// instead of meeting the server's FIN.
	stillOpen := func(wait time.Duration) bool {
		_ = conn.SetReadDeadline(time.Now().Add(wait))
		_, err := br.Peek(1)
		_ = conn.SetReadDeadline(time.Time{})
		return errors.Is(err, os.ErrDeadlineExceeded)
	}

	start := time.Now()
	roundTrip(false)
	if !stillOpen(timeout / 3) {
		t.Fatal("the server closed right after its Connection: close")
	}
	roundTrip(false) // a client that ignores the header is still served
	if stillOpen(timeout * 2) {
		t.Fatal("the server kept the connection past its drain close timeout")
	}
	if elapsed := time.Since(start); elapsed < timeout {
		t.Errorf("closed after %v, before the %v timeout", elapsed, timeout)
	}

	conn2, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn2.Close()
	conn, br = conn2, bufio.NewReader(conn2)
	roundTrip(true)
	if stillOpen(timeout / 3) {
		t.Error("a client that asked to close was kept waiting")
	}
}
