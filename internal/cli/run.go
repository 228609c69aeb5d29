package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
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
		Use:   "run [flags] -- COMMAND [ARGS...]",
		Short: "Run an unmodified client (kubectl, helm) through the context's exec proxy",
		Long: `Start the context's exec proxy plugin as a client that supports exec proxies, then run
COMMAND with KUBECONFIG pointing at an ephemeral kubeconfig (0600) that reaches the API
server through the proxy: its proxy-url is a loopback HTTP CONNECT bridge to the proxy's
socket, which stock kubectl honours for REST calls, watches, exec, attach and
port-forward, and which admits only clients holding the secret in that kubeconfig. The
context's impersonation (as, as-groups, ...) is kept. Everything is removed when COMMAND exits, and COMMAND's exit code is
kplug's.

kplug run chooses the cluster and user: give --kubeconfig and --context before --.
COMMAND's own --kubeconfig or --context (before any -- of its own) is refused, with the
command line that works: it would make COMMAND skip the kubeconfig kplug gives it, or
look for a context that kubeconfig does not have.`,
		Example: `  kplug run --context hsm -- kubectl get pods -w
  kplug run -- helm list -A`,
		Args: usageArgs(cobra.MinimumNArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := refuseClientKubeconfig(g.args, args, cmd.ArgsLenAtDash()); err != nil {
				return err
			}
			return o.run(cmd.Context(), g, args)
		},
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

// refuseClientKubeconfig refuses a command line that gives COMMAND (args[0]) its own
// --kubeconfig or --context, as in `kplug run -- kubectl get pods --kubeconfig X`, which
// reads as if X chose the cluster. kplug cannot honour it for COMMAND: the kubeconfig
// COMMAND must read is the one kplug writes, with one context. Moving the flags to kplug
// would mean knowing every client's flags (helm has --kube-context, and a value may
// follow kubectl exec's --), so kplug refuses and prints the command line that works.
// kplugArgs is kplug's whole command line; dash is cobra's ArgsLenAtDash: the client's
// arguments after a -- of its own are not looked at.
func refuseClientKubeconfig(kplugArgs, args []string, dash int) error {
	scan := args[1:]
	if dash > 0 {
		scan = args[1:dash] // `kplug run kubectl exec pod -- ...`: cobra took that --
	}
	var moved, kept []string
	for i := 0; i < len(scan); i++ {
		name, _, hasValue := strings.Cut(scan[i], "=")
		switch {
		case scan[i] == "--":
			kept = append(kept, scan[i:]...)
			i = len(scan)
		case name != "--kubeconfig" && name != "--context" || !hasValue && i+1 == len(scan):
			kept = append(kept, scan[i])
		case hasValue:
			moved = append(moved, scan[i])
		default:
			moved = append(moved, scan[i], scan[i+1])
			i++
		}
	}
	if len(moved) == 0 {
		return nil
	}
	kept = append(kept, args[1+len(scan):]...)
	// kplug's part of the line as given: what precedes "--" COMMAND.
	head := []string{"run"}
	if n := len(kplugArgs) - len(args) - 1; dash == 0 && n >= 0 && kplugArgs[n] == "--" {
		head = kplugArgs[:n]
	}
	line := append(append(append(append([]string{"kplug"}, head...), moved...), "--", args[0]), kept...)
	return invalidConfig(fmt.Errorf("%s after -- goes to %s, which kplug run gives a kubeconfig of its own (through the exec proxy); give it to kplug run: %s",
		strings.Join(moved, " "), args[0], shellJoin(line)))
}

// shellJoin joins args as a POSIX shell reads them back.
func shellJoin(args []string) string {
	quoted := make([]string, len(args))
	for i, a := range args {
		quoted[i] = a
		if a == "" || strings.ContainsFunc(a, func(r rune) bool { return !strings.ContainsRune(shellSafe, r) }) {
			quoted[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
	}
	return strings.Join(quoted, " ")
}

const shellSafe = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_@%+=:,./-~"

// exitCodeError makes kplug exit with code, printing nothing: the command already spoke.
type exitCodeError struct{ code int }

func (e *exitCodeError) Error() string { return fmt.Sprintf("exit status %d", e.code) }
