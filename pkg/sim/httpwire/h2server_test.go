package httpwire

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// h2Peer is a raw HTTP/2 client: it sees every frame the server sends, in order.
type h2Peer struct {
	t    *testing.T
	conn net.Conn
	fr   *http2.Framer
	enc  *hpack.Encoder
	hbuf bytes.Buffer
}

func dialH2(t *testing.T, addr string) *h2Peer {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if _, err := io.WriteString(conn, h2Preface); err != nil {
		t.Fatal(err)
	}
	p := &h2Peer{t: t, conn: conn, fr: http2.NewFramer(conn, conn)}
	p.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	p.enc = hpack.NewEncoder(&p.hbuf)
	if err := p.fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	return p
}

// request opens stream id with a GET of path.
func (p *h2Peer) request(id uint32, path string) {
	p.t.Helper()
	p.hbuf.Reset()
	for _, f := range []hpack.HeaderField{{Name: ":method", Value: "GET"}, {Name: ":scheme", Value: "http"}, {Name: ":authority", Value: "pod"}, {Name: ":path", Value: path}} {
		_ = p.enc.WriteField(f)
	}
	if err := p.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: p.hbuf.Bytes(), EndStream: true, EndHeaders: true}); err != nil {
		p.t.Fatal(err)
	}
}

// next is the next frame other than SETTINGS, WINDOW_UPDATE and PING, or nil at the end of
// the connection.
func (p *h2Peer) next() http2.Frame {
	p.t.Helper()
	_ = p.conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		f, err := p.fr.ReadFrame()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				p.t.Fatal("no frame within 10s")
			}
			return nil
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				_ = p.fr.WriteSettingsAck()
			}
		case *http2.WindowUpdateFrame, *http2.PingFrame:
		default:
			return f
		}
	}
}

// wantResponse reads stream id's response: HEADERS then DATA with END_STREAM.
func (p *h2Peer) wantResponse(id uint32) {
	p.t.Helper()
	if h, ok := p.next().(*http2.MetaHeadersFrame); !ok || h.StreamID != id || h.PseudoValue("status") != "200" {
		p.t.Fatalf("want the HEADERS of stream %d, got %v", id, h)
	}
	if d, ok := p.next().(*http2.DataFrame); !ok || d.StreamID != id || !d.StreamEnded() {
		p.t.Fatalf("want the last DATA of stream %d, got %v", id, d)
	}
}

// wantGoAway reads a GOAWAY naming last.
func (p *h2Peer) wantGoAway(last uint32) {
	p.t.Helper()
	g, ok := p.next().(*http2.GoAwayFrame)
	if !ok || g.LastStreamID != last || g.ErrCode != http2.ErrCodeNo {
		p.t.Fatalf("want GOAWAY with last stream %d, got %v", last, g)
	}
}

// TestH2ServerDrainSequence: the GOAWAY goes out with the next response only, names every
// stream (2^31-1), and the second GOAWAY and the close come a drain timeout later, once no
// stream is open; a connection without a request is sent nothing.
func TestH2ServerDrainSequence(t *testing.T) {
	const drainTimeout = 100 * time.Millisecond
	release := make(chan struct{})
	srv := &H2Server{
		DrainTimeout: drainTimeout,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch r.URL.Path {
			case "/drain":
				w.(H2Drainer).StartDrain()
			case "/held":
				<-release
			}
			_, _ = io.WriteString(w, "ok")
		}),
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	busy, idle := dialH2(t, ln.Addr().String()), dialH2(t, ln.Addr().String())

	busy.request(1, "/")
	busy.wantResponse(1)
	busy.request(3, "/held")
	// Before the request: the server may start its drain timer before this goroutine runs
	// again after sending it (a loaded machine measured 99.4 ms to the second GOAWAY).
	drainAt := time.Now()
	busy.request(5, "/drain")
	busy.wantGoAway(h2MaxStreamID)
	busy.wantResponse(5)
	// Stream 3 is still open: the second GOAWAY comes, the close waits for the stream.
	busy.wantGoAway(5)
	if waited := time.Since(drainAt); waited < drainTimeout {
		t.Errorf("second GOAWAY after %v, before the drain timeout %v", waited, drainTimeout)
	}
	busy.request(7, "/")
	if r, ok := busy.next().(*http2.RSTStreamFrame); !ok || r.StreamID != 7 || r.ErrCode != http2.ErrCodeRefusedStream {
		t.Fatalf("a stream after the second GOAWAY: want RST_STREAM REFUSED_STREAM on 7, got %v", r)
	}
	close(release)
	busy.wantResponse(3)
	if f := busy.next(); f != nil {
		t.Fatalf("want the connection closed once its last stream ended, got %v", f)
	}

	// The idle connection was told nothing: a request on it is still served without GOAWAY.
	idle.request(1, "/")
	idle.wantResponse(1)
}

// TestH2ServerStartDrainOnce: only the first StartDrain of a connection starts its drain.
func TestH2ServerStartDrainOnce(t *testing.T) {
	started := make(chan bool, 2)
	srv := &H2Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		started <- w.(H2Drainer).StartDrain()
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	p := dialH2(t, ln.Addr().String())
	p.request(1, "/")
	p.wantGoAway(h2MaxStreamID)
	if h, ok := p.next().(*http2.MetaHeadersFrame); !ok || h.StreamID != 1 {
		t.Fatalf("want stream 1's HEADERS, got %v", h)
	}
	p.request(3, "/")
	if h, ok := p.next().(*http2.MetaHeadersFrame); !ok || h.StreamID != 3 {
		t.Fatalf("want stream 3's HEADERS and no second shutdown notice, got %v", h)
	}
	if first, second := <-started, <-started; !first || second {
		t.Errorf("StartDrain = %v, %v; want true, false", first, second)
	}
}
