// Command meshdrain-sim is meshdrain's test world on one machine: a simulated pod termination
// under each preStop strategy (simulate) and Envoy/Linkerd sidecar emulators (emulate). It
// runs the real meshdrain binary as the preStop and is never put into a pod.
package main

import (
	"os"

	"github.com/meshdrain/meshdrain/pkg/sim/simcli"
)

func main() {
	simcli.OwnNetnsReexec = true
	os.Exit(simcli.Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
