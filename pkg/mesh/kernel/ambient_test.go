package kernel_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/meshdrain/meshdrain/pkg/mesh"
	"github.com/meshdrain/meshdrain/pkg/mesh/kernel"
	"github.com/meshdrain/meshdrain/pkg/mesh/kernel/kerneltest"
)

// TestAmbientInnerConnectionsCountOnce: under Istio ambient, ztunnel listens inside the pod's
// namespace (15008 HBONE) and opens an inner connection to the app from the client's own
// address, so the namespace's PassiveOpens counts two accepts per client connection. A relay
// does the same here (binding the client's loopback address): every inner connection counts
// once, as the client's, and ztunnel's accept is named and not counted, so none is left for
// an unknown client.
func TestAmbientInnerConnectionsCountOnce(t *testing.T) {
	if !kerneltest.Inside(t, false) {
		return
	}
	app := kerneltest.StartServer(t)
	relay, err := net.Listen("tcp", "127.0.0.1:15008")
	if err != nil {
		t.Fatal(err)
	}
	defer relay.Close()
	go func() {
		for {
			in, err := relay.Accept()
			if err != nil {
				return
			}
			go func() {
				defer in.Close()
				from := in.RemoteAddr().(*net.TCPAddr).IP
				d := net.Dialer{LocalAddr: &net.TCPAddr{IP: from}}
				out, err := d.Dial("tcp", "127.0.0.1:"+strconv.Itoa(app.Port))
				if err != nil {
					return
				}
				defer out.Close()
				go io.Copy(out, in)
				io.Copy(in, out)
			}()
		}
	}()

	k, err := kernel.New(kernel.Options{Ports: []int{app.Port}})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	sel := mesh.Selector{Ports: []int{app.Port}}
	activity := func() float64 {
		t.Helper()
		snap, err := k.Inbound(context.Background(), sel)
		if err != nil {
			t.Fatal(err)
		}
		return *snap.Read().Arrivals
	}
	base := activity()
	const conns = 20
	for i := range conns {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(fmt.Sprintf("127.0.0.%d", 2+i%3))}}
		c, err := d.Dial("tcp", "127.0.0.1:15008")
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprint(c, "GET / HTTP/1.1\r\nHost: app\r\nConnection: close\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		c.Close()
		if i%4 == 0 {
			activity() // some reads in the middle, most connections between two reads
		}
	}
	time.Sleep(200 * time.Millisecond) // the destroy records come from a work queue
	activity()
	got := activity() - base
	sum := k.Summary()
	t.Logf("activity %v for %d client connections through the relay; unknown accepts %d", got, conns, sum.UnknownAccepts)
	if sum.UnknownAccepts != 0 {
		t.Errorf("%d accepts left unnamed: the relay's own were taken for unknown clients", sum.UnknownAccepts)
	}
	// Each inner connection is one accept; its request is data on it, counted unless the
	// read saw the connection only once it was gone (then its accept alone counts).
	if got < conns || got > 2*conns {
		t.Errorf("activity %v, want each of the %d inner connections counted once (with at most its request)", got, conns)
	}
	var news int
	for _, c := range k.Clients() {
		news += c.NewConns
	}
	if news != conns {
		t.Errorf("%d new connections named for the clients, want %d", news, conns)
	}
}
