package cli

import (
	"fmt"
	"runtime"

	"github.com/spf13/cobra"
)

// Version is set at build time with -ldflags "-X github.com/meshdrain/meshdrain/pkg/cli.Version=...".
var Version = "dev"

func newVersionCommand(s streams) *cobra.Command {
	return &cobra.Command{
		Use:     "version",
		Short:   "Print meshdrain's version",
		Example: "  meshdrain version",
		Args:    cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			_, err := fmt.Fprintf(s.out, "meshdrain %s (%s, %s/%s)\n", Version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
			return err
		},
	}
}
