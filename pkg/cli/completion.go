package cli

import (
	"github.com/spf13/cobra"
)

// newCompletionCommand replaces cobra's default `completion` command with one that has an
// example and writes to the injected streams (so it is testable); the scripts are cobra's.
func newCompletionCommand(s streams) *cobra.Command {
	return &cobra.Command{
		Use:   "completion bash|zsh|fish|powershell",
		Short: "Print the shell completion script for meshdrain",
		Long: `completion prints a script that makes your shell complete meshdrain's commands, flags and
flag values (e.g. plan --sidecar classic|exit-on-zero|native). Load it once per session, or
install it where your shell looks for completions.`,
		Example: `  # bash, this session
  source <(meshdrain completion bash)

  # bash, every session (needs the bash-completion package)
  meshdrain completion bash > /etc/bash_completion.d/meshdrain

  # zsh
  meshdrain completion zsh > "${fpath[1]}/_meshdrain"

  # fish
  meshdrain completion fish > ~/.config/fish/completions/meshdrain.fish

  # PowerShell
  meshdrain completion powershell | Out-String | Invoke-Expression`,
		ValidArgs:             []string{"bash", "zsh", "fish", "powershell"},
		Args:                  cobra.MatchAll(cobra.ExactArgs(1), cobra.OnlyValidArgs),
		DisableFlagsInUseLine: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			root := cmd.Root()
			switch args[0] {
			case "bash":
				return root.GenBashCompletionV2(s.out, true)
			case "zsh":
				return root.GenZshCompletion(s.out)
			case "fish":
				return root.GenFishCompletion(s.out, true)
			default:
				return root.GenPowerShellCompletionWithDesc(s.out)
			}
		},
	}
}
