// Command meshdrain lets an app container stop only once its Envoy sidecar has stopped
// receiving new inbound requests. See the README for how it is deployed.
package main

import (
	"os"

	"github.com/meshdrain/meshdrain/pkg/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
