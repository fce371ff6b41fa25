package cli

import (
	"strings"

	"github.com/meshdrain/meshdrain/pkg/mesh"
	"github.com/meshdrain/meshdrain/pkg/operator/output"
	"github.com/meshdrain/meshdrain/pkg/operator/status"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// enumFlags are the flags that take one of a few values, by command and flag name: the
// shell completes them (RegisterEnumCompletions), and TestEveryEnumFlagCompletes fails when
// a string flag is neither here nor declared free-form.
func enumFlags() map[string]map[string][]string {
	logFormats := []string{"json", "console"}
	return map[string]map[string][]string{
		"prestop": {
			"drain-mode":      {string(mesh.DrainGraceful), string(mesh.DrainImmediate), string(mesh.DrainNone)},
			"signal":          {"TERM", "INT", "QUIT", "HUP", "USR1", "USR2"},
			"log-format":      logFormats,
			"mesh":            mesh.Names(mesh.Choices...),
			"client-evidence": {clientEvidenceAuto, clientEvidenceOff},
			"drain-at":        {drainAtStart, drainAtEnd},
		},
		"hold":   {"log-format": logFormats},
		"status": {"output": output.Formats, "mesh": mesh.Names(mesh.Choices...), "drain-at": {drainAtStart, drainAtEnd}},
		"check": {
			"output":     output.Formats,
			"mesh":       mesh.Names(mesh.Choices...),
			"min-signal": {string(status.MinRequests), string(status.MinCompletions), string(status.MinConnections)},
			"drain-at":   {drainAtStart, drainAtEnd},
		},
		"plan":    {"output": output.Formats, "sidecar": sidecarCompletions(), "mesh": meshCompletions()},
		"version": {"output": output.Formats},
	}
}

// RegisterEnumCompletions registers the completion of every flag of enumFlags that has none
// yet, so that no enum flag is left to the file completion a shell falls back to.
func RegisterEnumCompletions(root *cobra.Command, table map[string]map[string][]string) {
	for _, cmd := range root.Commands() {
		if cmd.DisableFlagParsing && cmd.ValidArgsFunction == nil {
			// cobra hands such a command its whole command line and completes no flag itself.
			// The registrations below still document which flags are enums.
			cmd.ValidArgsFunction = unparsedFlagCompletion(table[cmd.Name()])
		}
		for name, values := range table[cmd.Name()] {
			if cmd.Flags().Lookup(name) == nil {
				continue
			}
			if _, ok := cmd.GetFlagCompletionFunc(name); ok {
				continue
			}
			_ = cmd.RegisterFlagCompletionFunc(name, cobra.FixedCompletions(values, cobra.ShellCompDirectiveNoFileComp))
		}
	}
}

// unparsedFlagCompletion completes a command that parses its own flags (prestop, so that a bad
// flag still reaches its fail-safe path): the values of its enum flags, in both the
// "--flag value" and "--flag=value" forms. cobra lists the flag names itself.
func unparsedFlagCompletion(values map[string][]string) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if name, prefix, ok := strings.Cut(toComplete, "="); ok && strings.HasPrefix(name, "--") {
			var out []cobra.Completion
			for _, v := range values[strings.TrimPrefix(name, "--")] {
				if strings.HasPrefix(v, prefix) {
					out = append(out, name+"="+v)
				}
			}
			return out, cobra.ShellCompDirectiveNoFileComp
		}
		if n := len(args); n > 0 && strings.HasPrefix(args[n-1], "--") && !strings.Contains(args[n-1], "=") {
			if flag := cmd.Flags().Lookup(strings.TrimPrefix(args[n-1], "--")); flag != nil && flag.NoOptDefVal == "" {
				if vals, ok := values[flag.Name]; ok {
					return cobra.FixedCompletions(vals, cobra.ShellCompDirectiveNoFileComp)(cmd, args, toComplete)
				}
				return nil, cobra.ShellCompDirectiveDefault // a free value: a path, a URL, a number
			}
		}
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
}

// stringFlags lists cmd's flags that take a free string (not bool, int or duration).
func stringFlags(cmd *cobra.Command) []*pflag.Flag {
	var out []*pflag.Flag
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		switch f.Value.Type() {
		case "string", "stringSlice", "stringArray":
			out = append(out, f)
		}
	})
	return out
}

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
