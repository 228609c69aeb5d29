package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"time"

	"github.com/spf13/cobra"

	"github.com/kplug/kplug/execproxy"
)

type runOptions struct {
	kubeconfig kubeconfigOptions
}

func newRunCommand(g *globals) *cobra.Command {
	o := &runOptions{}
	cmd := &cobra.Command{
		Use:   "run -- COMMAND [ARGS...]",
		Short: "Run an unmodified client (kubectl, helm) through the context's exec proxy",
		Long: `Start the context's exec proxy plugin as a client that supports exec proxies, then run
COMMAND with KUBECONFIG pointing at an ephemeral kubeconfig (0600) that reaches the API
server through the proxy: its proxy-url is a loopback HTTP CONNECT bridge to the proxy's
socket, which stock kubectl honours for REST calls, watches, exec, attach and
port-forward, and which admits only clients holding the secret in that kubeconfig. The
context's impersonation (as, as-groups, ...) is kept. Everything is removed when COMMAND exits, and COMMAND's exit code is
kplug's.`,
		Example: `  kplug run --context hsm -- kubectl get pods -w
  kplug run -- helm list -A`,
		Args: usageArgs(cobra.MinimumNArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error { return o.run(cmd.Context(), g, args) },
	}
	o.kubeconfig.AddFlags(cmd)
	return cmd
}

func (o *runOptions) run(ctx context.Context, g *globals, args []string) error {
	u, err := o.kubeconfig.load(g, "")
	if err != nil {
		return err
	}
	defer u.Close()
	if u.opts.HTTPSignature != nil {
		// Refused before the plugin runs: an unmodified client cannot sign.
		return invalidConfig(fmt.Errorf("%w: the context's user signs requests (httpSignature), which only a client that signs can do; use kplug request, or an exec proxy that signs (kplug proxy-plugin --sign rfc9421)", execproxy.ErrNotProxied))
	}
	session, err := u.connect(ctx, g)
	if err != nil {
		return err
	}
	defer session.Close()
	kubeconfig, remove, err := session.WriteKubeconfig()
	if errors.Is(err, execproxy.ErrNotProxied) {
		return invalidConfig(fmt.Errorf("%w; run the client directly", err))
	}
	if err != nil {
		return err
	}
	defer remove()
	g.log.Debug("running through the exec proxy", "command", args[0], "bridge", session.Bridge().Addr)

	cmd := exec.CommandContext(ctx, args[0], args[1:]...) //nolint:gosec // the user's own command
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = g.io.In, g.io.Out, g.io.Err
	// On SIGINT or SIGTERM, let the command stop gracefully; it usually got the signal too.
	cmd.Cancel = func() error {
		if err := cmd.Process.Signal(os.Interrupt); err != nil {
			return cmd.Process.Kill()
		}
		return nil
	}
	cmd.WaitDelay = 10 * time.Second
	err = cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		return &exitCodeError{code: ee.ExitCode()}
	case err != nil:
		return fmt.Errorf("running %s: %w", args[0], err)
	}
	return nil
}

// exitCodeError makes kplug exit with code, printing nothing: the command already spoke.
type exitCodeError struct{ code int }

func (e *exitCodeError) Error() string { return fmt.Sprintf("exit status %d", e.code) }
