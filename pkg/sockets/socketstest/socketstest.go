// Package socketstest opens many loopback connections for the benchmarks that read the
// socket table: the kernel is real, so the table a benchmark reads is the machine's own.
package socketstest

import (
	"fmt"
	"net"
	"sync"
	"syscall"
	"testing"

	"github.com/meshdrain/meshdrain/pkg/sim/loopback"
)

var (
	once  sync.Once
	port  uint16
	setup error
	// kept keeps both ends of every connection reachable: a net.Conn that the garbage
	// collector finds unreachable is closed by its finalizer.
	kept []net.Conn
)

// Connections opens n idle connections to one loopback listener from 100 client addresses
// (127.0.1.1-100, distinct clients), once per process, keeps them for the process's life
// (closing them would leave TIME_WAIT sockets that the next benchmark would read too), and
// returns the listener's port. It skips the benchmark when the machine cannot open them.
func Connections(tb testing.TB, n int) uint16 {
	once.Do(func() { port, setup = open(n) })
	if setup != nil {
		tb.Skipf("cannot open %d loopback connections: %v", n, setup)
	}
	if len(kept) != 2*n {
		tb.Fatalf("socketstest.Connections: %d connections already open in this process, asked for %d", len(kept)/2, n)
	}
	return port
}

// ClientEnd is the client's end of the i-th connection Connections opened: a benchmark
// writes to it to make the pod's side receive data.
func ClientEnd(i int) net.Conn { return kept[2*(i%(len(kept)/2))] }

func open(n int) (uint16, error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, err
	}
	if need := uint64(2*n + 100); lim.Cur < need {
		lim.Cur = min(need, lim.Max)
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil || lim.Cur < need {
			return 0, fmt.Errorf("need %d open files, the limit is %d (%v)", need, lim.Cur, err)
		}
	}
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	accepted := make(chan net.Conn, n)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	for i := range n {
		d := loopback.Dialer(net.IPv4(127, 0, 1, byte(i%100+1)), 0)
		c, err := d.Dial("tcp4", ln.Addr().String())
		if err != nil {
			return 0, fmt.Errorf("connection %d: %w", i, err)
		}
		kept = append(kept, c, <-accepted)
	}
	return uint16(ln.Addr().(*net.TCPAddr).Port), nil
}
