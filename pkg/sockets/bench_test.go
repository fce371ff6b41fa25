package sockets

import (
	"bytes"
	"fmt"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/meshdrain/meshdrain/pkg/sockets/socketstest"
)

const benchConns = 2000

// benchServer opens benchConns idle loopback connections, once per process.
func benchServer(b *testing.B) uint16 { return socketstest.Connections(b, benchConns) }

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
