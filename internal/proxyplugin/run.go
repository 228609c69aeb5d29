package proxyplugin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/kplug/kplug/execcred"
	"github.com/kplug/kplug/execproxy/server"
	"github.com/kplug/kplug/internal/execcache"
)

// Process is what Run needs of the program it runs in.
type Process struct {
	// Args are the plugin's arguments as its client gave them; a launcher hands them to
	// its daemon on stdin, never on a command line others can read.
	Args []string
	// DaemonPath and DaemonArgs start the daemon (server.Process); an empty DaemonPath is
	// this executable.
	DaemonPath string
	DaemonArgs []string
	Stdin      io.Reader
	Stdout     io.Writer
	// Log is the launcher's logger.
	Log *slog.Logger
	// Reparse applies a daemon's launcher's Args to the flags, and returns the logger
	// they ask for (-v).
	Reparse func(args []string) (*slog.Logger, error)
	// NewGuard is the client's credential plugin policy (NewGuard, or a test's).
	NewGuard func() (*execcache.Guard, error)
}

// Run is proxy-plugin with the flags in o: a launcher checks them, starts the daemon and
// relays its answer; a daemon (--daemon) takes its launcher's arguments and serves.
func Run(ctx context.Context, o *Options, p Process) error {
	log := p.Log
	f := func(ctx context.Context, req *server.Request) (*server.Options, func(), error) {
		if o.daemon {
			var err error
			if log, err = p.Reparse(req.Args); err != nil {
				return nil, nil, invalidConfig(err)
			}
		}
		return o.ServerOptions(ctx, log, p.NewGuard, req)
	}
	err := server.Run(ctx, f, server.Process{
		Args:       p.Args,
		ExecInfo:   os.Getenv(execcred.InfoEnv),
		DaemonArgs: p.DaemonArgs,
		DaemonPath: p.DaemonPath,
		Daemon:     o.daemon,
		Stdin:      p.Stdin,
		Stdout:     p.Stdout,
	})
	var ce *server.ConfigError
	if errors.As(err, &ce) {
		return invalidConfig(err)
	}
	return err
}

// NewGuard is the credential plugin policy of the client that runs the plugin, over code
// that its arguments and environment (the exec block's) name besides the plugin itself: a
// PKCS#11 module is loaded, an AWS credential_process is run. The client checked only the
// plugin (issue 27, N1 review). Run by a person, nothing is guarded. caller is the
// client's process (execcache.CallerOf).
func NewGuard(log *slog.Logger, caller execcache.Caller) (*execcache.Guard, error) {
	guard, err := execcache.NewGuard(execcache.Process{
		Environ:     os.Environ(),
		Caller:      caller,
		Log:         log,
		AccountHome: execcache.AccountHome(),
	})
	if err != nil {
		var usage *execcache.UsageError
		if errors.As(err, &usage) {
			err = usage.Err
		}
		return nil, invalidConfig(fmt.Errorf("proxy-plugin: %w", err))
	}
	return guard, nil
}
