package cli

import (
	"fmt"

	"github.com/meshdrain/meshdrain/pkg/hook/install"
	"github.com/spf13/cobra"
)

// installOptions are `meshdrain install`'s inputs.
type installOptions struct {
	source string
}

// newInstallCommand builds `meshdrain install DEST`: the init container's whole job, since
// the meshdrain image is `scratch` and has no cp.
func newInstallCommand(s streams) *cobra.Command {
	opts := installOptions{}
	cmd := &cobra.Command{
		Use:   "install DEST",
		Short: "Copy this meshdrain binary into DEST (a file, or a directory → DEST/meshdrain), atomically",
		Long: `install copies the running meshdrain executable to DEST with mode 0755, through a
temporary file in the same directory and a rename, so DEST is either the whole new binary or
what it was before, never a partial file that the preStop hook would later fail to exec.

It is what the meshdrain image's init container runs to put meshdrain into an emptyDir that
the app container mounts: the image is built FROM scratch and has no shell or cp.`,
		Example: `  # init container: put meshdrain into the shared emptyDir mounted at /meshdrain
  meshdrain install /meshdrain

  # the same, naming the file
  meshdrain install /meshdrain/meshdrain`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			res, err := install.Install(install.Options{Source: opts.source, Dest: args[0]})
			if err != nil {
				return &ExitError{Code: ExitFailure, Err: fmt.Errorf("install: %w", err)}
			}
			_, err = fmt.Fprintf(s.out, "installed %s (%d bytes, sha256 %s)\n", res.Path, res.Bytes, res.SHA256)
			return err
		},
	}
	cmd.Flags().StringVar(&opts.source, "source", "", "file to copy instead of the running executable")
	_ = cmd.Flags().MarkHidden("source")
	return cmd
}
