package cli

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/kplug/kplug/execplugin"
	"github.com/kplug/kplug/internal/execcache"
)

// newExecCacheCommand is `kplug exec-cache`; cmd/kplug-exec-cache runs the same Command
// as a program of its own.
func newExecCacheCommand(g *globals) *cobra.Command {
	c := &execcache.Command{}
	cmd := &cobra.Command{
		Use:     "exec-cache [flags] -- COMMAND [ARGS...]",
		Short:   execcache.Short,
		Long:    execcache.Long,
		Example: execcache.Example,
		RunE:    func(cmd *cobra.Command, args []string) error { return runExecCache(cmd.Context(), g, c, args) },
	}
	c.AddFlags(cmd.Flags())
	completeOutputFlag(cmd)
	return cmd
}

// callerOf reads the client; tests, which run kplug in process, make themselves the client.
var callerOf = execcache.CallerOf

func runExecCache(ctx context.Context, g *globals, c *execcache.Command, args []string) error {
	err := c.Run(ctx, args, execcache.Process{
		Environ:     os.Environ(),
		Stdin:       stdinFile(g),
		Stdout:      g.io.Out,
		Stderr:      g.io.Err,
		Client:      execcache.ClientOf(os.Getppid()),
		Caller:      callerOf(os.Getppid()),
		Log:         g.log,
		AccountHome: execcache.AccountHome(),
	})
	var exitErr *execplugin.ExitError
	var usage *execcache.UsageError
	var recent *execcache.RecentFailureError
	var agentErr *execcache.AgentError
	switch {
	case errors.As(err, &agentErr):
		fmt.Fprintf(g.io.Err, "Error: %v\n", err)
		return &exitCodeError{code: agentErr.Code}
	case errors.As(err, &recent):
		fmt.Fprintf(g.io.Err, "Error: %v\n", err)
		return &exitCodeError{code: recent.ExitCode()}
	case errors.As(err, &exitErr):
		// The plugin's stderr already passed through; its exit code becomes ours.
		return &exitCodeError{code: exitErr.Code}
	case errors.As(err, &usage):
		return &usageError{err: usage.Err, showHelp: usage.ShowHelp}
	}
	return err
}
