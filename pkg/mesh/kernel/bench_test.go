package kernel

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/meshdrain/meshdrain/pkg/mesh"
	"github.com/meshdrain/meshdrain/pkg/mesh/kernel/kerneltest"
	"github.com/meshdrain/meshdrain/pkg/sockets"
	"github.com/meshdrain/meshdrain/pkg/sockets/socketstest"
)

const benchConns = 2000

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		panic(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkPoll is the CPU (user and system: most of a read's work is the kernel's) of one
// poll of --mesh none with benchConns open connections on the watched port. "still": the
// counters did not move, so the poll reads /proc/net/snmp only, what a poll costs while the
// clients hold idle connections or have left; "read": the poll reads the table as well (the
// counters moved: someone sent), and the destroy records, the worst case of a poll.
func BenchmarkPoll(b *testing.B) {
	// In a namespace of its own, the counters stand still unless the benchmark moves them.
	if !kerneltest.Inside(b, false) {
		return
	}
	port := int(socketstest.Connections(b, benchConns))
	for _, mode := range []string{"still", "read"} {
		b.Run(mode, func(b *testing.B) {
			k, err := New(Options{Ports: []int{port}, Reader: sockets.NewReader()})
			if err != nil {
				b.Fatal(err)
			}
			defer k.Close()
			sel := mesh.Selector{Ports: []int{port}}
			if _, err := k.Inbound(context.Background(), sel); err != nil {
				b.Skipf("the kernel cannot be read here: %v", err)
			}
			b.ReportAllocs()
			cpu := cpuTime()
			for b.Loop() {
				if mode == "read" {
					k.mu.Lock()
					err = k.read(time.Now())
					k.mu.Unlock()
				} else {
					_, err = k.Inbound(context.Background(), sel)
				}
				if err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(cpuTime()-cpu)/float64(b.N)/1e3, "cpu-µs/poll")
			b.ReportMetric(float64(len(k.conns)), "conns")
		})
	}
}
