package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/kplug/kplug/execcred/wire"
	"github.com/kplug/kplug/internal/output"
)

// Exit codes of the kplug binary.
const (
	ExitOK      = 0
	ExitFailure = 1
	ExitUsage   = 2 // bad flags or arguments, or an invalid configuration
)

// IO is where a command reads input and writes results (Out) and logs (Err).
type IO struct {
	In  io.Reader
	Out io.Writer
	Err io.Writer
}

// globals holds what every subcommand shares: the streams, the logger built from -v, and
// the arguments kplug was run with.
type globals struct {
	io        IO
	verbosity int
	log       *slog.Logger
	args      []string
}

// Run executes kplug with args (without the program name) and returns the exit code.
func Run(ctx context.Context, args []string, streams IO) int {
	g := &globals{io: streams, args: args}
	return execute(ctx, newRootCommand(g), args, streams)
}

func execute(ctx context.Context, root *cobra.Command, args []string, streams IO) int {
	root.SetArgs(args)
	root.SetIn(streams.In)
	root.SetOut(streams.Out)
	root.SetErr(streams.Err)
	cmd, err := findUnknownCommand(root, args)
	if err == nil {
		cmd, err = root.ExecuteContextC(ctx)
	}
	if err == nil {
		return ExitOK
	}
	var ec *exitCodeError
	if errors.As(err, &ec) {
		if ec.code < 0 {
			return ExitFailure // killed by a signal
		}
		return ec.code
	}
	fmt.Fprintf(streams.Err, "Error: %v\n", err)
	var ue *usageError
	if errors.As(err, &ue) {
		if ue.showHelp {
			fmt.Fprintf(streams.Err, "Run '%s --help' for usage.\n", cmd.CommandPath())
		}
		return ExitUsage
	}
	return ExitFailure
}

func newRootCommand(g *globals) *cobra.Command {
	root := &cobra.Command{
		Use:   "kplug",
		Short: "Pluggable credentials and proxies for Kubernetes",
		Long: `kplug runs Kubernetes client and node plugins the way upstream does, and better:
exec credential plugins, client exec proxies, image credential providers, the mixed
version proxy, and HTTP message signatures (KEP-6308).

Results go to stdout; logs and progress go to stderr. Exit codes: 0 success,
1 failure, 2 usage error or invalid configuration.`,
		Example: `  kplug version
  kplug credential --context prod                # what the context's exec plugin returns
  kplug exec-cache --list                        # credentials cached across kubectl runs
  kplug image-credential get registry.example/app:v1 --config providers.yaml --bin-dir /usr/libexec/kubelet-plugins
  kplug completion bash > /etc/bash_completion.d/kplug`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Args:          subcommandArgs,
		RunE:          func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			g.log = newLogger(g.io.Err, g.verbosity)
			return refuseAsExecPlugin(cmd, os.Getenv)
		},
	}
	root.PersistentFlags().IntVarP(&g.verbosity, "v", "v", 0, "log verbosity: 0 shows progress and warnings, 4 and more debug detail")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		return &usageError{err: err, showHelp: true}
	})
	// `kplug completion` is ours (with examples and usage errors); cobra's hidden
	// __complete command, which the scripts call, stays.
	root.CompletionOptions.DisableDefaultCmd = true
	root.AddCommand(newVersionCommand(g))
	root.AddCommand(newCredentialCommand(g))
	root.AddCommand(newExecCacheCommand(g))
	root.AddCommand(newRequestCommand(g))
	root.AddCommand(newProxyPluginCommand(g))
	root.AddCommand(newRunCommand(g))
	root.AddCommand(newImageCredentialCommand(g))
	root.AddCommand(newPeerproxyCommand(g))
	root.AddCommand(newSignatureProxyCommand(g))
	root.AddCommand(newSignatureResolverCommand(g))
	root.AddCommand(newKeyCommand(g))
	root.AddCommand(newCompletionCommand())
	return root
}

// subcommandArgs is the Args of a command that only groups subcommands: any positional
// argument reaching it is a mistyped subcommand.
func subcommandArgs(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	return unknownCommand(cmd, args[0])
}

// unknownCommand says that cmd has no subcommand name, and which ones are near it.
func unknownCommand(cmd *cobra.Command, name string) error {
	msg := fmt.Sprintf("unknown command %q for %q", name, cmd.CommandPath())
	if cmd.SuggestionsMinimumDistance <= 0 {
		cmd.SuggestionsMinimumDistance = 2 // cobra's default, which SuggestionsFor does not apply
	}
	if s := cmd.SuggestionsFor(name); len(s) > 0 {
		msg += "; did you mean " + strings.Join(s, " or ") + "?"
	}
	return &usageError{err: errors.New(msg), showHelp: true}
}

// findUnknownCommand reports args naming a subcommand that does not exist, with the
// command it was looked for under, before cobra parses any flag. cobra finds the deepest
// command args name and parses the rest as its flags before it looks at the arguments
// left, so `kplug exec-cahce --list` reported --list, unknown to kplug itself, instead of
// the mistyped name. (cobra's own early check, legacyArgs, runs only for a root command
// without an Args validator.)
func findUnknownCommand(root *cobra.Command, args []string) (*cobra.Command, error) {
	if len(args) > 0 && (args[0] == cobra.ShellCompRequestCmd || args[0] == cobra.ShellCompNoDescRequestCmd) {
		return nil, nil // cobra adds its completion command when it executes
	}
	root.InitDefaultHelpCmd() // as cobra does when it executes: `kplug help` is a command
	cmd, rest, err := root.Find(args)
	if err != nil || !cmd.HasSubCommands() {
		return nil, nil // cobra reports it
	}
	if name := firstArg(cmd, rest); name != "" {
		return cmd, unknownCommand(cmd, name)
	}
	return nil, nil
}

// firstArg is the first of args that is neither a flag of cmd nor a flag's value, parsed
// as cobra will parse them. An unknown flag is skipped, with the next argument when that
// does not look like a flag (it may be the flag's value), as cobra's Find skips it.
func firstArg(cmd *cobra.Command, args []string) string {
	fs := pflag.NewFlagSet(cmd.Name(), pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.ParseErrorsAllowlist.UnknownFlags = true
	cmd.InitDefaultHelpFlag()
	// Copies whose values are set nowhere: parsing cmd's own flags here would set them
	// before cobra does, twice for a repeatable flag.
	copyFlag := func(f *pflag.Flag) {
		if fs.Lookup(f.Name) == nil {
			c := *f
			c.Value = inertValue(f.Value.Type())
			fs.AddFlag(&c)
		}
	}
	cmd.Flags().VisitAll(copyFlag)
	cmd.InheritedFlags().VisitAll(copyFlag)
	if fs.Parse(args) != nil || fs.NArg() == 0 {
		return ""
	}
	return fs.Arg(0)
}

// inertValue is a flag value that accepts anything and keeps nothing.
type inertValue string

func (v inertValue) String() string   { return "" }
func (v inertValue) Set(string) error { return nil }
func (v inertValue) Type() string     { return string(v) }

// pluginCommands are the commands a kubeconfig's exec block may run: the ones made to be
// exec plugins, and the harmless ones.
var pluginCommands = []string{"exec-cache", "proxy-plugin", "version", "help", "completion", cobra.ShellCompRequestCmd, cobra.ShellCompNoDescRequestCmd}

// refuseAsExecPlugin refuses, when a client runs kplug as an exec credential plugin, every
// command that runs programs or plugins of its own configuration: with kplug on a kuberc
// allowlist, an exec block would otherwise run `kplug run -- anything`, or `kplug
// credential` with a kubeconfig, policy and environment of its choosing (issue 27).
// client-go sets KUBERNETES_EXEC_INFO for every plugin, after the exec block's env, so
// the exec block cannot hide it.
func refuseAsExecPlugin(cmd *cobra.Command, getenv func(string) string) error {
	if getenv(wire.InfoEnv) == "" {
		return nil
	}
	top := cmd
	for top.HasParent() && top.Parent().HasParent() {
		top = top.Parent()
	}
	if !top.HasParent() || slices.Contains(pluginCommands, top.Name()) {
		return nil
	}
	return &usageError{err: fmt.Errorf("%s does not run as an exec credential plugin (%s is set: a client ran it for a kubeconfig's exec block); an exec block may run kplug exec-cache or kplug proxy-plugin",
		cmd.CommandPath(), wire.InfoEnv)}
}

// newLogger logs text to w. Verbosity n enables messages logged at slog.LevelInfo-n, so
// -v=4 turns on slog.LevelDebug.
func newLogger(w io.Writer, verbosity int) *slog.Logger {
	level := slog.LevelInfo - slog.Level(verbosity)
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level}))
}

// usageError makes kplug exit with ExitUsage: bad flags or arguments, or a configuration
// that fails validation.
type usageError struct {
	err      error
	showHelp bool
}

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

// invalidConfig marks err as an invalid configuration (exit code 2).
func invalidConfig(err error) error { return &usageError{err: err} }

// usageArgs makes a positional-argument validator's errors usage errors.
func usageArgs(v cobra.PositionalArgs) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := v(cmd, args); err != nil {
			return &usageError{err: err, showHelp: true}
		}
		return nil
	}
}

// addOutputFlag adds -o/--output (text, json or yaml; default text) for a command that
// prints what, with the formats offered to shell completion.
func addOutputFlag(cmd *cobra.Command, p *string, what string) {
	cmd.Flags().StringVarP(p, "output", "o", output.Text, "output format of "+what+": text, json or yaml")
	completeOutputFlag(cmd)
}

// completeOutputFlag offers text, json and yaml to shell completion of --output.
func completeOutputFlag(cmd *cobra.Command) {
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions(
		[]string{output.Text, output.JSON, output.YAML}, cobra.ShellCompDirectiveNoFileComp))
}

// checkOutput makes an -o value other than text, json or yaml a usage error.
func checkOutput(format string) error {
	if err := output.Check(format, output.Text, output.JSON, output.YAML); err != nil {
		return &usageError{err: err, showHelp: true}
	}
	return nil
}
