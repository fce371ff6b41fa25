package evidence

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/meshdrain/meshdrain/pkg/hook/drain"
	"github.com/meshdrain/meshdrain/pkg/mesh"
	"github.com/meshdrain/meshdrain/pkg/sockets"
	"github.com/meshdrain/meshdrain/pkg/sockets/socketstest"
)

// benchClients is issue 21's figure: 2,000 client connections on the inbound listener.
const benchClients = 2000

// BenchmarkTablePoll is what the evidence costs the hook per 200 ms poll, in CPU (user and
// system: a read's work is mostly the kernel's), with benchClients connections on the
// machine's own kernel. One iteration is one poll; the table is read when Table.due says so:
//   - holding: the clients keep their idle connections and nothing arrives (the stats do not
//     move): no read after the drain's start;
//   - leaving: a connection closes at every poll: a read every BusyReads read intervals;
//   - requests: requests arrive at every poll: likewise.
func BenchmarkTablePoll(b *testing.B) {
	port := socketstest.Connections(b, benchClients)
	for _, c := range []struct {
		name    string
		traffic func(poll int) drain.Traffic
	}{
		{"holding", func(int) drain.Traffic {
			return drain.Traffic{Arrivals: num(0), Opened: num(benchClients), Open: num(benchClients)}
		}},
		{"leaving", func(p int) drain.Traffic {
			return drain.Traffic{Arrivals: num(0), Opened: num(benchClients), Open: num(float64(benchClients - p))}
		}},
		{"requests", func(p int) drain.Traffic {
			return drain.Traffic{Arrivals: num(float64(p)), Opened: num(benchClients), Open: num(benchClients)}
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			now := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
			table := &Table{Reader: sockets.DiagReader{}, Ports: []int{int(port)}, Now: func() time.Time { return now }, Every: ReadEvery}
			snap := mesh.Snapshot{
				Endpoints: []mesh.Endpoint{{Name: "inbound_8080", HTTPRequestsTotal: num(0), HTTPRequestsActive: num(0)}},
				Listener:  &mesh.Listener{Address: "0.0.0.0_15006", ConnectionsTotal: num(benchClients), ConnectionsActive: num(benchClients)},
			}
			if err := table.Begin(context.Background(), time.Time{}, snap); err != nil {
				b.Skipf("socket table unreadable here: %v", err)
			}
			cpu := cpuTime()
			poll := 0
			for b.Loop() {
				poll++
				now = now.Add(drain.DefaultPoll)
				if _, err := table.Counts(context.Background(), c.traffic(poll)); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(cpuTime()-cpu)/float64(b.N)/1e3, "cpu-µs/poll")
		})
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		panic(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
