package cli

import (
	"fmt"
	"runtime"

	"github.com/meshdrain/meshdrain/pkg/operator/output"
	"github.com/meshdrain/meshdrain/pkg/operator/plan"
	"github.com/spf13/cobra"
)

// Version is set at build time with -ldflags "-X github.com/meshdrain/meshdrain/pkg/cli.Version=...".
var Version = "dev"

// versionInfo is what `meshdrain version -o json|yaml` prints: enough to match a binary in a
// pod with a release and an image.
type versionInfo struct {
	Version   string `json:"version"`
	Release   string `json:"release"`
	Image     string `json:"image"`
	GoVersion string `json:"go_version"`
	Platform  string `json:"platform"`
}

func newVersionCommand(s streams) *cobra.Command {
	format := output.Text
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print meshdrain's version",
		Long: `version prints the binary's version (set at build time), the release this source tree
builds and its image, the Go version and the platform.`,
		Example: "  meshdrain version\n  kubectl exec deploy/web -c web -- /meshdrain/meshdrain version -o json",
		Args:    cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			if _, err := output.Parse(format); err != nil {
				return usageError("-o: %v", err)
			}
			info := versionInfo{Version: Version, Release: plan.Release, Image: plan.DefaultImage, GoVersion: runtime.Version(),
				Platform: runtime.GOOS + "/" + runtime.GOARCH}
			if format != output.Text {
				return output.Write(s.out, format, info)
			}
			_, err := fmt.Fprintf(s.out, "meshdrain %s (%s, %s)\n", info.Version, info.GoVersion, info.Platform)
			return err
		},
	}
	cmd.Flags().StringVarP(&format, "output", "o", format, "output format: text, json or yaml")
	return cmd
}
