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
// counters moved: someone sent), and the destroy records, the worst case of a poll; "dense":
// before each poll a client sends a byte on one of the connections (a different one each
// time), so the counters move at every poll and the table is read every DenseReadPolls polls,
// what a poll costs while clients send densely (the sends' own CPU measured apart and taken
// off); "holders": the same sends past the lag bound on connections open when the watch
// began, what a poll costs while clients that never learn send.
func BenchmarkPoll(b *testing.B) {
	// In a namespace of its own, the counters stand still unless the benchmark moves them.
	if !kerneltest.Inside(b, false) {
		return
	}
	port := int(socketstest.Connections(b, benchConns))
	for _, mode := range []string{"still", "read", "dense", "holders"} {
		b.Run(mode, func(b *testing.B) {
			opts := Options{Ports: []int{port}, Reader: sockets.NewReader()}
			if mode == "holders" {
				opts.Start, opts.LagBound = time.Now().Add(-time.Minute), time.Second
			}
			k, err := New(opts)
			if err != nil {
				b.Fatal(err)
			}
			defer k.Close()
			sel := mesh.Selector{Ports: []int{port}}
			if _, err := k.Inbound(context.Background(), sel); err != nil {
				b.Skipf("the kernel cannot be read here: %v", err)
			}
			b.ReportAllocs()
			sent := 0
			reads := k.reads
			cpu := cpuTime()
			for b.Loop() {
				if mode == "dense" || mode == "holders" {
					if _, err := socketstest.ClientEnd(sent).Write([]byte{'x'}); err != nil {
						b.Fatal(err)
					}
					sent++
				}
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
			spent := cpuTime() - cpu
			if sent > 0 {
				// The sends' own CPU (a loopback send runs the receiving side's TCP in the
				// sender's system time) is the clients', not the hook's: measured alone, the
				// same number of sends, and taken off.
				start := cpuTime()
				for i := range sent {
					if _, err := socketstest.ClientEnd(i).Write([]byte{'x'}); err != nil {
						b.Fatal(err)
					}
				}
				sends := cpuTime() - start
				b.ReportMetric(float64(sends)/float64(sent)/1e3, "send-cpu-µs")
				spent -= sends
			}
			b.ReportMetric(float64(spent)/float64(b.N)/1e3, "cpu-µs/poll")
			b.ReportMetric(float64(k.conns.Len()), "conns")
			b.ReportMetric(float64(k.reads-reads)/float64(b.N), "reads/poll")
		})
	}
}
