package proxyplugin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/spf13/pflag"

	"github.com/kplug/kplug/internal/execcache"
	"github.com/kplug/kplug/internal/version"
)

// The help of `kplug proxy-plugin` and of kplug-proxy-plugin.
const (
	Short = "Reference exec proxy plugin (KEP-2718): forward a client's API traffic, adding headers, signatures or a client certificate"
	Long  = `An exec credential plugin that answers with an exec proxy (docs/exec-proxy.md): it starts
a proxy on a private unix socket, which forwards the client's requests to the API server
and can add headers (--header), sign each request (--sign sigv4 or rfc9421) and
authenticate with a TLS client certificate whose key is a file or stays on a PKCS#11
token (--client-cert, --client-key). A replaced certificate file is used for new
connections without a restart. It is meant to be named in a kubeconfig's exec block, with
provideClusterInfo: true, and run by a client that supports exec proxies (kplug request,
kplug run, the execproxy package). The proxy exits when its client exits.

The proxy that keeps serving is kplug-proxy-plugin, the same command built without the
rest of kplug, when make install or a release archive put it beside kplug (about half
the memory); else kplug itself.`
	Example = `users:
- name: proxied
  user:
    exec:
      apiVersion: client.authentication.k8s.io/v1
      command: kplug
      args: [proxy-plugin, --client-cert, /etc/kplug/me.crt, --client-key, /etc/kplug/me.key]
      provideClusterInfo: true
      interactiveMode: Never`
)

// Main is cmd/kplug-proxy-plugin, proxy-plugin as a program of its own (name): the
// daemon kplug starts, and a plugin a kubeconfig may name itself. It returns the exit
// code: 0, 1 failure, 2 bad flags or an invalid configuration.
func Main(ctx context.Context, name string, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	o := &Options{}
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	verbosity := fs.IntP("v", "v", 0, "log verbosity: 0 shows progress and warnings, 4 and more debug detail")
	showVersion := fs.Bool("version", false, "print the version (that of the kplug it came with) and exit")
	o.AddFlags(fs)
	logger := func() *slog.Logger {
		return slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo - slog.Level(*verbosity)}))
	}
	err := fs.Parse(args)
	switch {
	case errors.Is(err, pflag.ErrHelp):
		fmt.Fprintf(stdout, "%s\n\nUsage:\n  %s [flags]\n\nExamples:\n%s\n\nFlags:\n%s", Long, name, Example, fs.FlagUsages())
		return 0
	case err == nil && *showVersion:
		fmt.Fprintf(stdout, "%s %s\n", name, version.Get().Kplug)
		return 0
	case err == nil && fs.NArg() > 0 && !o.daemon:
		err = fmt.Errorf("unexpected argument %q: %s takes only flags", fs.Arg(0), name)
	}
	if err == nil {
		log := logger()
		err = Run(ctx, o, Process{
			Args:       args,
			DaemonArgs: []string{"--daemon"},
			Stdin:      stdin,
			Stdout:     stdout,
			Log:        log,
			Reparse: func(args []string) (*slog.Logger, error) {
				if err := fs.Parse(args); err != nil {
					return nil, err
				}
				return logger(), nil
			},
			NewGuard: func() (*execcache.Guard, error) { return NewGuard(log, execcache.CallerOf(os.Getppid())) },
		})
	} else {
		err = usage(err)
	}
	if err == nil {
		return 0
	}
	fmt.Fprintf(stderr, "Error: %v\n", err)
	var ue *UsageError
	if errors.As(err, &ue) {
		if ue.ShowHelp {
			fmt.Fprintf(stderr, "Run '%s --help' for usage.\n", name)
		}
		return 2
	}
	return 1
}
