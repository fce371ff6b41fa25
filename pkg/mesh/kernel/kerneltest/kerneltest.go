// Package kerneltest runs tests of --mesh none on real sockets, in a network namespace of the
// test's own: a test re-executes its binary under unshare(1), where an HTTP server and
// clients from distinct loopback addresses (127.0.0.0/8 is all loopback) make the traffic
// shapes of a pod without a sidecar (docs/facts.md §7). Nothing here touches the machine's
// own namespace.
package kerneltest

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

const envInside = "KERNELTEST_NETNS"

// Inside says whether the test (or benchmark) runs in its own network namespace. Outside, it
// runs it again there (unshare -rn, or unshare -n when asRoot, which needs the real root) and
// returns false: the caller returns, the child's result is the test's. Where unshare cannot
// make a namespace, it is skipped with a message.
func Inside(tb testing.TB, asRoot bool) bool {
	tb.Helper()
	if os.Getenv(envInside) == tb.Name() {
		return true
	}
	if strings.Contains(tb.Name(), "/") {
		tb.Fatal("kerneltest.Inside is for top-level tests")
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		tb.Skip("unshare(1) is not installed: no network namespace of the test's own")
	}
	ip, err := exec.LookPath("ip")
	if err != nil {
		tb.Skip("ip(8) is not installed: the namespace's loopback cannot be brought up")
	}
	flags := "-rn"
	if asRoot {
		if os.Geteuid() != 0 {
			tb.Skip("needs root (a namespace where uid 65532 exists to setpriv to)")
		}
		flags = "-n"
	}
	if out, err := exec.Command(unshare, flags, "true").CombinedOutput(); err != nil {
		tb.Skipf("unshare %s does not work here (%v: %s): no network namespace of the test's own", flags, err, strings.TrimSpace(string(out)))
	}
	run := []string{"-test.run=^" + tb.Name() + "$", "-test.count=1", "-test.v"}
	if _, bench := tb.(*testing.B); bench {
		run = []string{"-test.run=^$", "-test.bench=^" + tb.Name() + "$", "-test.count=1", "-test.benchtime=" + flag.Lookup("test.benchtime").Value.String()}
	}
	args := append([]string{flags, "sh", "-c", ip + ` link set lo up && exec "$@"`, "sh", os.Args[0]}, run...)
	cmd := exec.Command(unshare, args...)
	cmd.Env = append(os.Environ(), envInside+"="+tb.Name())
	out, err := cmd.CombinedOutput()
	tb.Logf("in a network namespace of its own:\n%s", out)
	if err != nil {
		tb.Fatalf("failed in its namespace: %v", err)
	}
	return false
}

// Accept is one connection the server accepted.
type Accept struct {
	At   time.Time
	From netip.Addr
}

// Server is an HTTP/1.1 app on 127.0.0.1 that records every connection it accepts.
type Server struct {
	Port int
	srv  *http.Server

	mu      sync.Mutex
	accepts []Accept
}

// StartServer starts the app; it stops with the test.
func StartServer(t *testing.T) *Server {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{Port: ln.Addr().(*net.TCPAddr).Port}
	s.srv = &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			fmt.Fprint(w, "ok\n")
		}),
		ConnState: func(c net.Conn, st http.ConnState) {
			if st != http.StateNew {
				return
			}
			from := c.RemoteAddr().(*net.TCPAddr).AddrPort().Addr().Unmap()
			s.mu.Lock()
			s.accepts = append(s.accepts, Accept{At: time.Now(), From: from})
			s.mu.Unlock()
		},
	}
	go s.srv.Serve(ln)
	t.Cleanup(func() { s.srv.Close() })
	return s
}

// AcceptsAfter are the connections accepted after at from sources other than ignore.
func (s *Server) AcceptsAfter(at time.Time, ignore ...netip.Addr) []Accept {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Accept
	for _, a := range s.accepts {
		if a.At.After(at) && !slices.Contains(ignore, a.From) {
			out = append(out, a)
		}
	}
	return out
}

// Client sends from one loopback address; LastSend is when it last sent a request.
type Client struct {
	From   netip.Addr
	Server *Server

	mu    sync.Mutex
	sends []time.Time
	errs  int
}

// NewClient is a client from addr (127.0.0.2 and up).
func NewClient(s *Server, addr string) *Client {
	return &Client{From: netip.MustParseAddr(addr), Server: s}
}

// LastSend is when the client last sent a request.
func (c *Client) LastSend() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.sends) == 0 {
		return time.Time{}
	}
	return c.sends[len(c.sends)-1]
}

// Sends are when the client sent each request.
func (c *Client) Sends() []time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.sends)
}

func (c *Client) dial() (net.Conn, error) {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: c.From.AsSlice()}, Timeout: time.Second}
	return d.Dial("tcp", "127.0.0.1:"+strconv.Itoa(c.Server.Port))
}

// request sends one GET on conn and reads its answer; podFirst asks the app to close the
// connection after it (Connection: close: the pod's side closes first).
func (c *Client) request(conn net.Conn, br *bufio.Reader, podFirst bool) error {
	c.mu.Lock()
	c.sends = append(c.sends, time.Now())
	c.mu.Unlock()
	closeHeader := ""
	if podFirst {
		closeHeader = "Connection: close\r\n"
	}
	if _, err := fmt.Fprintf(conn, "GET / HTTP/1.1\r\nHost: app\r\n%s\r\n", closeHeader); err != nil {
		return err
	}
	conn.SetReadDeadline(time.Now().Add(2 * time.Second))
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return err
}

// PerRequest opens a connection per request, every period, until until (or ctx ends):
// podFirst, the app closes each one (Connection: close); else the client closes it after
// the answer.
func (c *Client) PerRequest(ctx context.Context, period time.Duration, until time.Time, podFirst bool) {
	go func() {
		for ctx.Err() == nil && (until.IsZero() || time.Now().Before(until)) {
			if conn, err := c.dial(); err == nil {
				if c.request(conn, bufio.NewReader(conn), podFirst) != nil {
					c.failed()
				}
				if podFirst {
					// Wait for the app's close, so that the pod's side closes first.
					conn.SetReadDeadline(time.Now().Add(time.Second))
					conn.Read(make([]byte, 1))
				}
				conn.Close()
			} else {
				c.failed()
			}
			sleep(ctx, period)
		}
	}()
}

// KeepAlive opens one connection now and sends on it every period until until (zero: until
// ctx ends), then keeps it open, idle, until ctx ends: a holder routed per connection (until
// zero) or a pool that learns at until and goes idle.
func (c *Client) KeepAlive(ctx context.Context, t *testing.T, period time.Duration, until time.Time) {
	conn, err := c.dial()
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	if err := c.request(conn, br, false); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer conn.Close()
		for ctx.Err() == nil && (until.IsZero() || time.Now().Before(until)) {
			sleep(ctx, period)
			if ctx.Err() == nil && (until.IsZero() || time.Now().Before(until)) {
				if c.request(conn, br, false) != nil {
					c.failed()
					return
				}
			}
		}
		<-ctx.Done()
	}()
}

func (c *Client) failed() {
	c.mu.Lock()
	c.errs++
	c.mu.Unlock()
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// RunQueueWait is the time this process's threads have spent runnable but not running,
// summed (/proc/self/task/*/schedstat, second field): what a busy machine adds to any
// wall-clock figure. Summed over threads it can count one stall more than once, which errs on
// the machine's side.
func RunQueueWait() time.Duration { return runQueueWait("self") }

// RunQueueWaitOf is RunQueueWait for another process.
func RunQueueWaitOf(pid int) time.Duration { return runQueueWait(strconv.Itoa(pid)) }

func runQueueWait(pid string) time.Duration {
	tasks, _ := filepath.Glob("/proc/" + pid + "/task/*/schedstat")
	var wait time.Duration
	for _, path := range tasks {
		raw, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		if f := strings.Fields(string(raw)); len(f) >= 2 {
			ns, _ := strconv.ParseInt(f[1], 10, 64)
			wait += time.Duration(ns)
		}
	}
	return wait
}
