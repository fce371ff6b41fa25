package sockets

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"
)

const benchConns = 2000

var (
	benchOnce  sync.Once
	benchPort  uint16
	benchSetup error
	// benchKept keeps both ends of every connection reachable: a net.Conn that the
	// garbage collector finds unreachable is closed by its finalizer.
	benchKept []net.Conn
)

// benchServer opens benchConns connections to one loopback listener from 100 client
// addresses, once per process, and keeps them for the process's life: closing them would
// leave TIME_WAIT sockets behind that the next benchmark would read too.
func benchServer(b *testing.B) uint16 {
	benchOnce.Do(func() {
		var lim syscall.Rlimit
		if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
			benchSetup = err
			return
		}
		if need := uint64(2*benchConns + 100); lim.Cur < need {
			lim.Cur = min(need, lim.Max)
			if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil || lim.Cur < need {
				benchSetup = fmt.Errorf("need %d open files, the limit is %d (%v)", need, lim.Cur, err)
				return
			}
		}
		ln, err := net.Listen("tcp4", "127.0.0.1:0")
		if err != nil {
			benchSetup = err
			return
		}
		benchPort = uint16(ln.Addr().(*net.TCPAddr).Port)
		accepted := make(chan net.Conn, benchConns)
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				accepted <- c
			}
		}()
		for i := range benchConns {
			d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 1, byte(i%100+1))}}
			c, err := d.Dial("tcp4", ln.Addr().String())
			if err != nil {
				benchSetup = fmt.Errorf("connection %d: %w", i, err)
				return
			}
			benchKept = append(benchKept, c, <-accepted)
		}
	})
	if benchSetup != nil {
		b.Skipf("cannot open %d loopback connections: %v", benchConns, benchSetup)
	}
	return benchPort
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		panic(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkRead reports, besides wall time, the process's CPU time (user and system: most of
// a read's work is the kernel's) per read of a table with benchConns watched sockets, and per
// read of a port that nothing uses: the fixed cost of walking the node's hash table and
// looking at every TCP socket on it, which host-sockets counts.
func BenchmarkRead(b *testing.B) {
	for _, r := range []struct {
		name   string
		reader Reader
	}{{"diag", DiagReader{}}, {"proc", ProcReader{}}} {
		for _, watched := range []string{"2000", "none"} {
			b.Run(r.name+"/"+watched, func(b *testing.B) {
				port := benchServer(b)
				ports := []uint16{port}
				if watched == "none" {
					ports = []uint16{1}
				}
				socks, err := r.reader.Read(ports)
				if err != nil {
					b.Skipf("reader unavailable: %v", err)
				}
				b.ReportAllocs()
				cpu := cpuTime()
				for b.Loop() {
					socks, _ = r.reader.Read(ports)
				}
				b.ReportMetric(float64(cpuTime()-cpu)/float64(b.N)/1e3, "cpu-µs/read")
				b.ReportMetric(float64(len(socks)), "sockets")
				b.ReportMetric(float64(hostSockets()), "host-sockets")
			})
		}
	}
}

// hostSockets counts the TCP sockets that the kernel walks through for any read.
func hostSockets() int {
	n := 0
	for _, name := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		if content, err := os.ReadFile(name); err == nil {
			n += bytes.Count(content, []byte("\n")) - 1
		}
	}
	return n
}

func BenchmarkTrackerObserve(b *testing.B) {
	var socks []Socket
	for i := range benchConns {
		socks = append(socks, withInfo(sock(fmt.Sprintf("10.1.%d.%d", i/250, i%250+1), uint16(40000+i), Established, uint64(i+1)), 100, time.Second))
	}
	tr := Begin(at(0), socks)
	b.ReportAllocs()
	for b.Loop() {
		tr.Observe(at(1), socks)
	}
}
