package cli

import (
	"fmt"

	"github.com/spf13/cobra"
)

// completionShells are the shells `kplug completion` writes scripts for, with the cobra
// generator of each.
var completionShells = map[string]func(root *cobra.Command, cmd *cobra.Command) error{
	"bash": func(root, cmd *cobra.Command) error { return root.GenBashCompletionV2(cmd.OutOrStdout(), true) },
	"zsh":  func(root, cmd *cobra.Command) error { return root.GenZshCompletion(cmd.OutOrStdout()) },
	"fish": func(root, cmd *cobra.Command) error { return root.GenFishCompletion(cmd.OutOrStdout(), true) },
	"powershell": func(root, cmd *cobra.Command) error {
		return root.GenPowerShellCompletionWithDesc(cmd.OutOrStdout())
	},
}

func newCompletionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "completion bash|zsh|fish|powershell",
		Short: "Print a shell completion script for kplug",
		Long: `completion prints a script that makes the shell complete kplug's commands, flags and
arguments. Load it in the current shell, or install it where the shell looks for
completions (see the examples).`,
		Example: `  source <(kplug completion bash)                     # bash, this shell
  kplug completion bash > /etc/bash_completion.d/kplug  # bash, every shell (bash-completion)
  kplug completion zsh > "${fpath[1]}/_kplug"           # zsh (compinit)
  kplug completion fish > ~/.config/fish/completions/kplug.fish
  kplug completion powershell | Out-String | Invoke-Expression`,
		ValidArgs: []string{"bash", "zsh", "fish", "powershell"},
		Args: func(_ *cobra.Command, args []string) error {
			switch {
			case len(args) != 1:
				return &usageError{err: fmt.Errorf("want one shell, got %d arguments: bash, zsh, fish or powershell", len(args)), showHelp: true}
			case completionShells[args[0]] == nil:
				return &usageError{err: fmt.Errorf("unknown shell %q: want bash, zsh, fish or powershell", args[0]), showHelp: true}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			return completionShells[args[0]](cmd.Root(), cmd)
		},
	}
}
