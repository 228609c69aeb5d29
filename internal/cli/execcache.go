package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/kplug/kplug/execplugin"
	"github.com/kplug/kplug/internal/execcache"
)

// maxDefaultTTL bounds --default-ttl: an answer without expiry is never cached forever.
const maxDefaultTTL = 24 * time.Hour

type execCacheOptions struct {
	dir         string
	skew        time.Duration
	defaultTTL  time.Duration
	lockTimeout time.Duration
	timeout     time.Duration
	ignoreEnv   []string
	list        bool
	clear       bool
	all         bool
	output      string
	kuberc      kubercOptions
}

func (o *execCacheOptions) AddFlags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&o.dir, "cache-dir", "", "cache directory (default: <user cache dir>/kplug/exec-cache, e.g. ~/.cache/kplug/exec-cache)")
	f.DurationVar(&o.skew, "skew", execcache.DefaultSkew, "stop serving an answer this long before its expirationTimestamp (at most half its remaining lifetime)")
	f.DurationVar(&o.defaultTTL, "default-ttl", 15*time.Minute, "serve an answer without expirationTimestamp this long (0: do not cache such answers; at most 24h)")
	f.DurationVar(&o.lockTimeout, "lock-timeout", execcache.DefaultLockTimeout, "wait this long for another process running the plugin for the same entry")
	f.DurationVar(&o.timeout, "plugin-timeout", 0, "kill a non-interactive run of the wrapped plugin that takes longer (0: no limit)")
	f.StringArrayVar(&o.ignoreEnv, "ignore-env", nil, "leave this environment variable (or NAME* prefix) out of the cache key, in addition to the built-in list; repeatable")
	f.BoolVar(&o.list, "list", false, "list the cache entries (credentials redacted), of COMMAND if given")
	f.BoolVar(&o.clear, "clear", false, "remove the entries of COMMAND [ARGS...], or all entries with --all")
	f.BoolVar(&o.all, "all", false, "with --clear: remove every entry")
	f.StringVarP(&o.output, "output", "o", "text", "--list output format: text or json")
	o.kuberc.AddFlags(f)
}

func newExecCacheCommand(g *globals) *cobra.Command {
	o := &execCacheOptions{}
	cmd := &cobra.Command{
		Use:   "exec-cache [flags] -- COMMAND [ARGS...]",
		Short: "Run an exec credential plugin through a cache shared by all client processes",
		Long: `exec-cache is an exec credential plugin that wraps another one. Put it in front of the
plugin in a kubeconfig exec block; any client (kubectl, helm, k9s, client-go programs)
then gets the plugin's answer from a per-user disk cache until expirationTimestamp minus
--skew, and any number of concurrent clients cause a single run of the plugin.

On a miss the wrapped plugin runs exactly as the client would run it (same environment
and KUBERNETES_EXEC_INFO, the terminal for interactive logins, stderr passed through);
its answer is printed unchanged and stored if it is a valid ExecCredential. A failing
plugin's stdout, stderr and exit code come through as they were, and nothing is stored.

The credential plugin policy of kuberc (credentialPluginPolicy, credentialPluginAllowlist)
applies to the wrapped plugin as it applies to kplug: a plugin the policy does not allow
is neither run nor served from the cache. kuberc is found as kubectl finds it (--kuberc,
then $KUBERC, then ~/.kube/kuberc; KUBERC=off for none), but kubectl's own --kuberc flag
does not reach a plugin: with it, set KUBERC instead.

A credential the server rejected is not served again: a v1alpha1 client says so in
spec.response, and a v1beta1 or v1 client that calls again while the answer it was given
is still being served is refreshing after a 401, so the plugin runs again.

stdout carries only the ExecCredential (or, with --list and --clear, their result).`,
		Example: `  # In a kubeconfig:
  #   exec:
  #     apiVersion: client.authentication.k8s.io/v1
  #     command: kplug
  #     args: [exec-cache, --, aws-iam-authenticator, token, -i, my-cluster]
  #     interactiveMode: IfAvailable
  kplug exec-cache --list
  kplug exec-cache --clear -- aws-iam-authenticator token -i my-cluster
  kplug exec-cache --clear --all`,
		RunE: func(cmd *cobra.Command, args []string) error { return o.run(cmd.Context(), g, args) },
	}
	// Everything after the wrapped command is its own: kplug parses no flag past it.
	cmd.Flags().SetInterspersed(false)
	o.AddFlags(cmd)
	return cmd
}

func (o *execCacheOptions) run(ctx context.Context, g *globals, args []string) error {
	if err := o.validate(args); err != nil {
		return &usageError{err: err, showHelp: true}
	}
	dir, err := o.cacheDir()
	if err != nil {
		return err
	}
	switch {
	case o.list:
		return o.runList(g.io.Out, dir, args)
	case o.clear:
		return o.runClear(g.io.Out, dir, args)
	}
	// The client checked the policy against kplug; the wrapped command must pass it too.
	rc, err := o.kuberc.load(g.log.Debug) // kubectl itself shows kuberc's warnings
	if err != nil {
		return err
	}
	err = execcache.Run(ctx, execcache.Options{
		Command:     args[0],
		Args:        args[1:],
		Dir:         dir,
		Skew:        orNone(o.skew),
		DefaultTTL:  o.defaultTTL,
		LockTimeout: o.lockTimeout,
		Timeout:     o.timeout,
		IgnoreEnv:   o.ignoreEnv,
		Environ:     os.Environ(),
		Stdin:       terminal(g),
		Stdout:      g.io.Out,
		Stderr:      g.io.Err,
		Client:      execcache.ClientOf(os.Getppid()),
		Log:         g.log,
		Policy:      rc.Policy(),
		PolicyFile:  rc.Path,
	})
	var exitErr *execplugin.ExitError
	if errors.As(err, &exitErr) {
		// The plugin's stderr already passed through; its exit code becomes ours.
		return &exitCodeError{code: exitErr.Code}
	}
	return err
}

func (o *execCacheOptions) validate(args []string) error {
	switch {
	case o.list && o.clear:
		return errors.New("--list and --clear cannot be combined")
	case o.all && !o.clear:
		return errors.New("--all only goes with --clear")
	case o.clear && o.all && len(args) > 0:
		return errors.New("--clear --all takes no command; to remove one command's entries, drop --all")
	case o.clear && !o.all && len(args) == 0:
		return errors.New("--clear needs the wrapped command (--clear -- COMMAND [ARGS...]) or --all")
	case !o.list && !o.clear && len(args) == 0:
		return errors.New("no plugin to run: give it after --, e.g. kplug exec-cache -- aws-iam-authenticator token -i my-cluster")
	case o.output != "text" && o.output != "json":
		return fmt.Errorf("invalid --output %q: want text or json", o.output)
	case o.skew < 0:
		return fmt.Errorf("invalid --skew %v: must not be negative", o.skew)
	case o.defaultTTL < 0 || o.defaultTTL > maxDefaultTTL:
		return fmt.Errorf("invalid --default-ttl %v: want 0 (do not cache answers without expiry) up to %v", o.defaultTTL, maxDefaultTTL)
	case o.lockTimeout <= 0:
		return fmt.Errorf("invalid --lock-timeout %v: must be positive", o.lockTimeout)
	case o.timeout < 0:
		return fmt.Errorf("invalid --plugin-timeout %v: must not be negative", o.timeout)
	}
	for _, name := range o.ignoreEnv {
		if name == "" || name == "*" || strings.Contains(name, "=") {
			return fmt.Errorf("invalid --ignore-env %q: want a variable name or a NAME* prefix", name)
		}
	}
	return nil
}

func (o *execCacheOptions) cacheDir() (string, error) {
	if o.dir != "" {
		return o.dir, nil
	}
	base, err := os.UserCacheDir()
	if err != nil {
		return "", invalidConfig(fmt.Errorf("exec-cache: no user cache directory (%w); pass --cache-dir", err))
	}
	return filepath.Join(base, "kplug", "exec-cache"), nil
}

func (o *execCacheOptions) runList(out io.Writer, dir string, args []string) error {
	command := ""
	if len(args) > 0 {
		command = args[0]
	}
	entries, err := execcache.List(dir, time.Now(), command)
	if err != nil {
		return err
	}
	if o.output == "json" {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(entries)
	}
	return printEntries(out, entries, time.Now())
}

func printEntries(out io.Writer, entries []execcache.Listed, now time.Time) error {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "ENTRY\tCOMMAND\tAPI\tCLUSTER\tCREDENTIAL\tSERVED UNTIL\tCLIENTS")
	for _, e := range entries {
		if e.Corrupt {
			fmt.Fprintf(w, "%s\t-\t-\t-\tunreadable (replaced on next use)\t-\t-\n", e.ID[:12])
			continue
		}
		until := "expired"
		if e.Servable {
			until = e.ServeUntil.UTC().Format(time.RFC3339) + " (" + relative(e.ServeUntil, now) + ")"
		}
		cluster := e.Server
		if cluster == "" {
			cluster = "-"
		}
		command := strings.Join(append([]string{e.Command}, e.Args...), " ")
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%d\n", e.ID[:12], command, strings.TrimPrefix(e.APIVersion, "client.authentication.k8s.io/"),
			cluster, e.Credential, until, e.Clients)
	}
	return w.Flush()
}

func (o *execCacheOptions) runClear(out io.Writer, dir string, args []string) error {
	command := ""
	if !o.all {
		command, args = args[0], args[1:]
	}
	n, err := execcache.Clear(dir, command, args)
	if err != nil {
		return err
	}
	noun := "entries"
	if n == 1 {
		noun = "entry"
	}
	_, err = fmt.Fprintf(out, "removed %d %s from %s\n", n, noun, dir)
	return err
}

// orNone maps --skew 0 (no skew) to the library's "none" (negative); its zero means the
// default.
func orNone(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

// terminal returns stdin if it is a terminal, for an interactive login.
func terminal(g *globals) *os.File {
	f := stdinFile(g)
	if f == nil || !term.IsTerminal(int(f.Fd())) {
		return nil
	}
	return f
}
