// Command meshdrain lets an app container stop only once its sidecar (Envoy, Istio, Linkerd)
// has stopped receiving new inbound requests, or, in a pod without a sidecar, once the pod's
// own kernel shows its clients have moved away. It is what goes into pods (copied by its init
// container) and into operators' hands; the test world is meshdrain-sim. See the README.
package main

import (
	"os"

	"github.com/meshdrain/meshdrain/pkg/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
