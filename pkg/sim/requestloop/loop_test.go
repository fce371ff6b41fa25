package requestloop

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"github.com/meshdrain/meshdrain/pkg/localhttp/localhttptest"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// misbehaving is a loopback server that reads each request and then does what a pod, an
// ingress or a dying app does to it.
type misbehaving struct {
	ln   net.Listener
	wg   sync.WaitGroup
	mu   sync.Mutex
	open []net.Conn
}

func serve(t *testing.T, handle func(c *net.TCPConn, r *http.Request)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &misbehaving{ln: ln}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.open = append(s.open, c)
			s.mu.Unlock()
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				br := bufio.NewReader(c)
				for {
					r, err := http.ReadRequest(br)
					if err != nil {
						c.Close()
						return
					}
					handle(c.(*net.TCPConn), r)
				}
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		s.mu.Lock()
		for _, c := range s.open {
			c.Close()
		}
		s.mu.Unlock()
		s.wg.Wait()
	})
	return "http://" + ln.Addr().String() + "/healthz"
}

// refusedURL is a loopback port nothing listens on any more: what a client routed to an app
// that closed its listener meets.
func refusedURL(t *testing.T) string {
	t.Helper()
	return localhttptest.RefusingURL(t) + "/healthz"
}

// TestRunSortsEachMisbehaviour: each way a server fails a request is counted under its own
// kind, with the first and last time seen, and a well-behaved server gives a clean report.
func TestRunSortsEachMisbehaviour(t *testing.T) {
	for _, c := range []struct {
		name string
		url  func(t *testing.T) string
		mode Mode
		want string
	}{
		{"refused", refusedURL, NewConnection, Refused},
		{"reset", func(t *testing.T) string {
			return serve(t, func(c *net.TCPConn, _ *http.Request) { _ = c.SetLinger(0); c.Close() })
		}, NewConnection, Reset},
		{"closed before answering", func(t *testing.T) string {
			return serve(t, func(c *net.TCPConn, _ *http.Request) { c.Close() })
		}, NewConnection, Closed},
		{"timeout", func(t *testing.T) string {
			// No answer, until the client gives up and closes.
			return serve(t, func(c *net.TCPConn, _ *http.Request) { _, _ = io.Copy(io.Discard, c) })
		}, KeepAlive, Timeout},
		{"502 from an ingress", func(t *testing.T) string {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusBadGateway) }))
			t.Cleanup(srv.Close)
			return srv.URL
		}, KeepAlive, "http 502"},
		{"503", func(t *testing.T) string {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusServiceUnavailable) }))
			t.Cleanup(srv.Close)
			return srv.URL
		}, NewConnection, "http 503"},
		{"a malformed answer", func(t *testing.T) string {
			return serve(t, func(c *net.TCPConn, _ *http.Request) { _, _ = c.Write([]byte("not http\r\n\r\n")) })
		}, NewConnection, Other},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := time.Now()
			// Long enough for a busy machine, except where the timeout is the subject.
			timeout := 10 * time.Second
			if c.want == Timeout {
				timeout = 100 * time.Millisecond
			}
			rep, err := Run(context.Background(), Options{URL: c.url(t), Mode: c.mode, Workers: 1, Count: 3, Timeout: timeout})
			if err != nil {
				t.Fatal(err)
			}
			if rep.Requests != 3 || rep.OK != 0 || len(rep.Kinds) != 1 {
				t.Fatalf("report %+v, want 3 requests that all failed the same way", rep)
			}
			k := rep.Kinds[0]
			if k.Kind != c.want || k.Count != 3 || k.Example == "" {
				t.Fatalf("kind %q ×%d (%s), want %q ×3", k.Kind, k.Count, k.Example, c.want)
			}
			if k.First.Before(before) || k.Last.Before(k.First) || k.Last.After(rep.Start.Add(rep.Elapsed)) {
				t.Errorf("first %s last %s outside the loop's run %s + %s", k.First, k.Last, rep.Start, rep.Elapsed)
			}
		})
	}
}

// TestRunMixedRollout: a server that answers, then answers 502, then refuses, as an ingress
// in front of a pod that stopped too early does, is reported kind by kind, in order, with
// the answered requests counted apart; the text and JSON reports say the same.
func TestRunMixedRollout(t *testing.T) {
	var mu sync.Mutex
	n := 0
	var srv *httptest.Server
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		n++
		i := n
		mu.Unlock()
		switch {
		case i <= 4:
			w.WriteHeader(http.StatusOK)
		case i <= 6:
			w.WriteHeader(http.StatusBadGateway)
		default:
			// The app's listener goes before it answers: later connections are refused.
			srv.Listener.Close()
			w.Header().Set("Connection", "close")
			w.WriteHeader(http.StatusOK)
		}
	}))
	defer srv.Close()
	rep, err := Run(context.Background(), Options{URL: srv.URL, Mode: KeepAlive, Workers: 1, Count: 12, Interval: time.Millisecond, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Requests != 12 || rep.OK != 5 || rep.Failures() != 7 {
		t.Fatalf("report %+v, want 12 requests, 5 answered", rep)
	}
	got := map[string]KindCount{}
	for _, k := range rep.Kinds {
		got[k.Kind] = k
	}
	if got["http 502"].Count != 2 || got[Refused].Count != 5 || !got["http 502"].Last.Before(got[Refused].First) {
		t.Errorf("kinds %+v, want 2 × 502 then 5 refused", rep.Kinds)
	}
	var text bytes.Buffer
	if err := WriteText(&text, rep); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"7 of 12 requests failed", "refused", "http 502"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("text lacks %q:\n%s", want, text.String())
		}
	}
	data, err := json.Marshal(rep.ToJSON())
	if err != nil {
		t.Fatal(err)
	}
	var back JSON
	if err := json.Unmarshal(data, &back); err != nil || back.Failures != 7 || len(back.Kinds) != 2 || back.Kinds[0].Kind != Refused {
		t.Errorf("JSON %s (%v)", data, err)
	}
}

// TestRunCleanAndBounded: a well-behaved server gives a clean report; the loop ends at its
// Duration, and a request cut by that end is not a failure.
func TestRunCleanAndBounded(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			<-r.Context().Done() // still in flight when the loop ends
		}
	}))
	defer srv.Close()
	rep, err := Run(context.Background(), Options{URL: srv.URL, Mode: KeepAlive, Workers: 2, Count: 10, Timeout: 10 * time.Second})
	if err != nil || rep.Requests != 10 || rep.OK != 10 || len(rep.Kinds) != 0 {
		t.Fatalf("report %+v (%v), want 10 clean requests", rep, err)
	}
	var text bytes.Buffer
	if err := WriteText(&text, rep); err != nil || !strings.Contains(text.String(), "clean: no request failed") {
		t.Errorf("text %q (%v)", text.String(), err)
	}
	rep, err = Run(context.Background(), Options{URL: srv.URL, Method: http.MethodPost, Mode: NewConnection, Workers: 1, Duration: 50 * time.Millisecond, Timeout: 5 * time.Second})
	if err != nil || rep.Failures() != 0 {
		t.Errorf("a request cut by the loop's own end counted as a failure: %+v (%v)", rep, err)
	}
}

// TestOptionsNameTheirFlag: bad options are refused, naming the flag.
func TestOptionsNameTheirFlag(t *testing.T) {
	_, err := Run(context.Background(), Options{URL: "http://127.0.0.1:1/", Mode: "sometimes", Workers: 0, Timeout: 0})
	for _, want := range []string{"--mode", "--workers", "--timeout"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not name %s", err, want)
		}
	}
}
