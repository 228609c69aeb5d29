package cli

import (
	"errors"
	"log/slog"
	"os"

	"github.com/spf13/cobra"

	"github.com/kplug/kplug/internal/execcache"
	"github.com/kplug/kplug/internal/proxyplugin"
)

func newProxyPluginCommand(g *globals) *cobra.Command {
	o := &proxyplugin.Options{}
	cmd := &cobra.Command{
		Use:     "proxy-plugin",
		Short:   proxyplugin.Short,
		Long:    proxyplugin.Long,
		Example: proxyplugin.Example,
		Args:    usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			// The daemon's command line is only "--daemon", because any local user can read
			// a process's command line (ps, /proc/PID/cmdline), and --header values are
			// often secrets: server.Run hands it kplug's arguments on stdin.
			p := proxyplugin.Process{
				Args:       g.args,
				DaemonArgs: []string{"proxy-plugin", "--daemon"},
				Stdin:      g.io.In,
				Stdout:     cmd.OutOrStdout(),
				Log:        g.log,
				Reparse: func(args []string) (*slog.Logger, error) {
					if err := cmd.Flags().Parse(args); err != nil {
						return nil, err
					}
					g.log = newLogger(g.io.Err, g.verbosity)
					return g.log, nil
				},
				NewGuard: func() (*execcache.Guard, error) { return proxyplugin.NewGuard(g.log, callerOf(os.Getppid())) },
			}
			if !o.Daemon() {
				if path, args, ok := proxyplugin.SmallDaemon(cmd.Context(), g.log); ok {
					p.DaemonPath, p.DaemonArgs = path, args
				}
			}
			err := proxyplugin.Run(cmd.Context(), o, p)
			var ue *proxyplugin.UsageError
			if errors.As(err, &ue) {
				return &usageError{err: ue.Err, showHelp: ue.ShowHelp}
			}
			return err
		},
	}
	o.AddFlags(cmd.Flags())
	return cmd
}
