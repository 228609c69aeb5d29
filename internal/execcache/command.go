package execcache

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/user"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/pflag"
	"golang.org/x/term"

	"github.com/kplug/kplug/execcred/kuberc"
	"github.com/kplug/kplug/execcred/wire"
	"github.com/kplug/kplug/execplugin"
	"github.com/kplug/kplug/internal/output"
)

// maxDefaultTTL bounds --default-ttl: an answer without expiry is never cached forever.
const maxDefaultTTL = 24 * time.Hour

// maxWindow bounds --failure-window and --wait-for-login.
const maxWindow = 10 * time.Minute

// Short and Long describe the command in help output.
const (
	Short = "Run an exec credential plugin through a cache shared by all client processes"
	Long  = `exec-cache is an exec credential plugin that wraps another one. Put it in front of the
plugin in a kubeconfig exec block; any client (kubectl, helm, k9s, client-go programs)
then gets the plugin's answer from a per-user disk cache until expirationTimestamp minus
--skew, and any number of concurrent clients cause a single run of the plugin.

On a miss the wrapped plugin runs exactly as the client would run it (same environment
and KUBERNETES_EXEC_INFO, the terminal for interactive logins, stderr passed through);
its answer is printed unchanged and stored if it is a valid ExecCredential. A failing
plugin's stdout, stderr and exit code come through as they were, and nothing is stored.
With --storage keyring the answers rest in the OS keyring (Keychain, Credential Manager,
the Secret Service or the kernel keyring on Linux) and no credential is written to disk.

The credential plugin policy of kuberc (credentialPluginPolicy, credentialPluginAllowlist)
applies to the wrapped plugin as it applies to kplug: a plugin the policy does not allow is
neither run nor served from the cache. The wrapped command is found as the client finds an
exec block's command (a name in the client's own PATH, not one the exec block sets), and
the file the policy approved is the file that runs. The policies add up, so that the exec
block cannot remove one: the kuberc the client applies (from its own environment and its
--kuberc flag), the kuberc of this environment, the file --kuberc names, and always the
account's own ~/.kube/kuberc.

A credential the server rejected is not served again: a v1alpha1 client says so in
spec.response, and a v1beta1 or v1 client that calls again while the answer it was given
is still being served is refreshing after a 401, so the plugin runs again.

With --serve it is the agent of your dev containers and SSH sessions: it listens on a
socket in a private directory and answers the calls they forward to it with this machine's
logins, for the exec plugins this machine's kubeconfig names, to processes of your uid only.
There, --agent SOCKET or $KPLUG_EXEC_CACHE_AGENT sends each call to the agent instead of
running the plugin, and nothing is written to disk.

kplug-exec-cache is the same command as a program of its own, which links nothing but
the cache: a warm hit through it costs a third of one through kplug. Name it in
kubeconfigs where the cost of every kubectl command matters.

stdout carries only the ExecCredential (or, with --list and --clear, their result).`
	Example = `  # In a kubeconfig:
  #   exec:
  #     apiVersion: client.authentication.k8s.io/v1
  #     command: kplug-exec-cache        # or: command: kplug, args: [exec-cache, --, ...]
  #     args: [--, aws-iam-authenticator, token, -i, my-cluster]
  #     interactiveMode: IfAvailable
  kplug exec-cache --list
  kplug exec-cache --list -o yaml
  kplug exec-cache --clear -- aws-iam-authenticator token -i my-cluster
  kplug exec-cache --clear --all

  # On the workstation: the agent; in an SSH session or a dev container, the same exec
  # block then asks it (forwarded with ssh -R, or a bind mount of its directory).
  kplug exec-cache --serve
  export KPLUG_EXEC_CACHE_AGENT=$HOME/.kplug-agent.sock`
)

// Command is exec-cache's command line: `kplug exec-cache` and `kplug-exec-cache` parse
// the same flags into it and run it.
type Command struct {
	dir         string
	storage     string
	skew        time.Duration
	defaultTTL  time.Duration
	lockTimeout time.Duration
	timeout     time.Duration
	ignoreEnv   []string
	keyEnv      []string
	failures    time.Duration
	waitLogin   time.Duration
	kuberc      string
	list        bool
	clear       bool
	all         bool
	output      string
	serve       bool
	agent       string
}

// AddFlags registers the command's flags on f.
func (c *Command) AddFlags(f *pflag.FlagSet) {
	f.StringVar(&c.dir, "cache-dir", "", "cache directory (default: $KUBECACHEDIR/kplug/exec-cache if KUBECACHEDIR is set, else <user cache dir>/kplug/exec-cache, e.g. ~/.cache/kplug/exec-cache)")
	f.StringVar(&c.storage, "storage", StorageFile, "where answers rest: file (0600 files in the cache directory), keyring (the OS keyring; only the index and locks stay in the cache directory), secret-service or kernel-keyring (Linux, by name), or none (no cache)")
	f.DurationVar(&c.skew, "skew", DefaultSkew, "stop serving an answer this long before its expirationTimestamp (at most half its remaining lifetime)")
	f.DurationVar(&c.defaultTTL, "default-ttl", 15*time.Minute, "serve an answer without expirationTimestamp this long (0: do not cache such answers; at most 24h)")
	f.DurationVar(&c.lockTimeout, "lock-timeout", DefaultLockTimeout, "wait this long for another process running the plugin for the same entry")
	f.DurationVar(&c.timeout, "plugin-timeout", 0, "kill a non-interactive run of the wrapped plugin that takes longer (0: no limit)")
	f.StringArrayVar(&c.ignoreEnv, "ignore-env", nil, "leave this environment variable (or NAME* prefix) out of the cache key, in addition to the built-in list; repeatable")
	f.StringArrayVar(&c.keyEnv, "key-env", nil, "this environment variable (or NAME* prefix) chooses the plugin's identity: the key then holds only such variables (and a known plugin's own), so terminal and desktop share entries; repeatable")
	f.DurationVar(&c.failures, "failure-window", DefaultFailureWindow, "after the wrapped plugin fails or its login is cancelled, answer callers for this entry with that failure for this long instead of running it again (0: off; at most 10m)")
	f.DurationVar(&c.waitLogin, "wait-for-login", 0, "a caller without a terminal whose plugin fails waits this long for a login done in a terminal to land in the cache (0: fail at once; at most 10m)")
	f.StringVar(&c.kuberc, "kuberc", "", "one more kuberc file whose credential plugin policy the wrapped plugin must pass, beside the client's kuberc, $KUBERC (else ~/.kube/kuberc) and the account's own ~/.kube/kuberc")
	f.BoolVar(&c.list, "list", false, "list the cache entries (credentials redacted), of COMMAND if given")
	f.BoolVar(&c.clear, "clear", false, "remove the entries of COMMAND [ARGS...], or all entries with --all")
	f.BoolVar(&c.all, "all", false, "with --clear: remove every entry")
	f.StringVarP(&c.output, "output", "o", "text", "--list output format: text, json or yaml")
	f.BoolVar(&c.serve, "serve", false, "run as the agent of dev containers and SSH sessions: answer the calls they forward to the --agent socket with this machine's logins, for the exec plugins this machine's kubeconfig names")
	f.StringVar(&c.agent, "agent", "", "the agent's socket: where to ask for the answer instead of running COMMAND here (default $"+AgentEnv+"); with --serve, where to listen (default <cache dir>/../agent/exec-cache.sock)")
	// Everything after the wrapped command is its own: no flag is parsed past it.
	f.SetInterspersed(false)
}

// Process is what a run takes from the process it runs in.
type Process struct {
	Environ []string
	// Stdin is the process's stdin; the wrapped plugin gets it for an interactive login
	// when it is a terminal.
	Stdin  *os.File
	Stdout io.Writer
	Stderr io.Writer
	// Client is the calling process, ClientOf(os.Getppid()).
	Client Client
	Log    *slog.Logger
	// Caller is how the client started, CallerOf(os.Getppid()): its own PATH, KUBERC,
	// KUBECTL_KUBERC, HOME and --kuberc flag, which the exec block cannot change. It is used
	// only when a client ran exec-cache (KUBERNETES_EXEC_INFO is set); run by a person or a
	// script, exec-cache follows its own environment.
	Caller Caller
	// AccountHome is the home directory of the user running exec-cache from the user
	// database (os/user), not from $HOME, which the kubeconfig can set: the kuberc there
	// always applies. Empty leaves it out.
	AccountHome string
}

// UsageError says the flags, the arguments or the configuration are wrong: nothing ran.
// Programs exit 2 with it.
type UsageError struct {
	Err error
	// ShowHelp: point the user at --help.
	ShowHelp bool
}

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

// Run runs the command with its arguments (after the flags). A failing wrapped plugin
// gives its *execplugin.ExitError, whose code the program exits with (its stdout and
// stderr have passed through).
func (c *Command) Run(ctx context.Context, args []string, p Process) error {
	if err := c.validate(args); err != nil {
		return &UsageError{Err: err, ShowHelp: true}
	}
	forClient := lookupEnv(p.Environ, wire.InfoEnv) != ""
	if c.serve && forClient {
		return &UsageError{Err: errors.New("--serve is for you to run on your workstation, not for an exec block: " + wire.InfoEnv + " is set")}
	}
	if agent := c.agentSocket(p.Environ); agent != "" && !c.serve && !c.list && !c.clear {
		// The remote side: nothing of the cache here, no file written.
		return askAgent(ctx, agent, args, p.Environ, p.Client, p.Stdout)
	}
	if c.clear && forClient {
		// A kubeconfig's exec block must not wipe the user's cache (and their logins).
		return &UsageError{Err: errors.New("--clear is for you to run, not for an exec block: " + wire.InfoEnv + " is set, so a client ran this as its credential plugin")}
	}
	if err := p.Caller.chainError(); forClient && err != nil {
		return &UsageError{Err: fmt.Errorf("exec-cache: %w", err)}
	}
	if !forClient {
		// Run by you (a shell, a script): no exec block added to this environment, which is
		// the one to follow, also where a shell's exec made its parent someone else.
		p.Caller = Caller{Environ: p.Environ}
	}
	dir, err := c.cacheDir(p)
	if err != nil {
		return err
	}
	switch {
	case c.serve:
		socket := c.agent
		if socket == "" {
			socket = DefaultAgentSocket(dir)
		}
		return c.runAgent(ctx, dir, socket, p)
	case c.list:
		return c.runList(p.Stdout, dir, args)
	case c.clear:
		return c.runClear(ctx, p.Stdout, dir, p.Environ, args)
	}
	// The client checked its policy against kplug; the wrapped command must pass it too.
	policies, err := c.loadKuberc(p)
	if err != nil {
		return err
	}
	var stdin *os.File
	if p.Stdin != nil && term.IsTerminal(int(p.Stdin.Fd())) {
		stdin = p.Stdin
	}
	return Run(ctx, Options{
		Command:     args[0],
		Args:        args[1:],
		Dir:         dir,
		Storage:     c.storage,
		Skew:        orNone(c.skew),
		DefaultTTL:  c.defaultTTL,
		LockTimeout: c.lockTimeout,
		Timeout:     c.timeout,
		KeyEnv:      KeyEnv{Ignore: c.ignoreEnv, Declare: c.keyEnv},
		Failures:    orNone(c.failures),
		WaitLogin:   c.waitLogin,
		Environ:     p.Environ,
		Stdin:       stdin,
		Stdout:      p.Stdout,
		Stderr:      p.Stderr,
		Client:      p.Client,
		Caller:      p.Caller,
		Log:         p.Log,
		Policies:    policies,
	})
}

// loadKuberc returns every credential plugin policy the wrapped command must pass. The
// exec block that runs exec-cache comes from the kubeconfig the policy guards against:
// its args can pass --kuberc, and its env can set KUBERC, KUBECTL_KUBERC and HOME after
// the user's own values. So the policies add up, and none of those can remove one:
//
//   - the kuberc the client applies: the one kubectl finds from the client's own
//     environment and its --kuberc flag (Process.Caller), which the exec block cannot
//     change and which a plugin otherwise never sees;
//   - the kuberc kubectl would read from this environment (KUBERC, KUBECTL_KUBERC, HOME);
//   - the file --kuberc names, if any;
//   - the account's own ~/.kube/kuberc, its home taken from the user database
//     (Process.AccountHome), not from HOME.
//
// A named file that is missing or unusable, or an invalid policy, is a usage error; what
// kubectl warns about is logged at debug level, as kubectl shows it.
func (c *Command) loadKuberc(p Process) ([]FilePolicy, error) {
	var sources []kuberc.Options
	if p.Caller.Known() {
		sources = append(sources, kuberc.FromEnv(p.Caller.kubercFlag(), func(name string) string { return lookupEnv(p.Caller.Environ, name) }))
	} else if p.Log != nil {
		p.Log.Debug("exec-cache: the client's own kuberc is not known: " + p.Caller.unknown().Error())
	}
	sources = append(sources, kuberc.FromEnv("", func(name string) string { return lookupEnv(p.Environ, name) }))
	if c.kuberc != "" {
		sources = append(sources, kuberc.Options{Path: c.kuberc})
	}
	if p.AccountHome != "" {
		sources = append(sources, kuberc.Options{Home: p.AccountHome})
	}
	var policies []FilePolicy
	// Each file is read once (the account's is usually kubectl's too), unless it is named
	// explicitly after being read as a default file, which makes its errors count.
	read := map[string]bool{} // path: read as named explicitly
	for _, o := range sources {
		if path, explicit, err := kuberc.Locate(o); err == nil && path != "" {
			if was, ok := read[path]; ok && (was || !explicit) {
				continue
			}
			read[path] = explicit
		}
		l, err := kuberc.Load(o)
		if l != nil && p.Log != nil {
			for _, w := range l.Warnings {
				p.Log.Debug(w)
			}
		}
		if err != nil {
			return nil, &UsageError{Err: err}
		}
		if l.Preference == nil {
			continue
		}
		policies = append(policies, FilePolicy{Policy: l.Policy(), File: l.Path})
	}
	return policies, nil
}

// AccountHome returns the home directory of the user running the process from the user
// database, or "" when it cannot be read: the value for Process.AccountHome.
func AccountHome() string {
	u, err := user.Current()
	if err != nil {
		return ""
	}
	return u.HomeDir
}

// lookupEnv returns the value of name in env (NAME=VALUE entries; the last one wins, as
// for exec), or "".
func lookupEnv(env []string, name string) string {
	value := ""
	for _, kv := range env {
		if n, v, ok := strings.Cut(kv, "="); ok && envName(n) == envName(name) {
			value = v
		}
	}
	return value
}

func (c *Command) validate(args []string) error {
	outputErr := output.Check(c.output, output.Text, output.JSON, output.YAML)
	switch {
	case c.list && c.clear:
		return errors.New("--list and --clear cannot be combined")
	case c.serve && (c.list || c.clear):
		return errors.New("--serve cannot be combined with --list or --clear")
	case c.serve && len(args) > 0:
		return errors.New("--serve takes no command: the agent serves what the exec blocks of this machine's kubeconfig name")
	case c.agent != "" && (c.list || c.clear):
		return errors.New("--agent cannot be combined with --list or --clear: the agent's cache is listed and cleared on the machine it runs on")
	case c.all && !c.clear:
		return errors.New("--all only goes with --clear")
	case c.clear && c.all && len(args) > 0:
		return errors.New("--clear --all takes no command; to remove one command's entries, drop --all")
	case c.clear && !c.all && len(args) == 0:
		return errors.New("--clear needs the wrapped command (--clear -- COMMAND [ARGS...]) or --all")
	case !c.list && !c.clear && !c.serve && len(args) == 0:
		return errors.New("no plugin to run: give it after --, e.g. kplug exec-cache -- aws-iam-authenticator token -i my-cluster")
	case !slices.Contains(Storages, c.storage):
		return fmt.Errorf("invalid --storage %q: want one of %s", c.storage, strings.Join(Storages, ", "))
	case outputErr != nil:
		return outputErr
	case c.skew < 0:
		return fmt.Errorf("invalid --skew %v: must not be negative", c.skew)
	case c.defaultTTL < 0 || c.defaultTTL > maxDefaultTTL:
		return fmt.Errorf("invalid --default-ttl %v: want 0 (do not cache answers without expiry) up to %v", c.defaultTTL, maxDefaultTTL)
	case c.lockTimeout <= 0:
		return fmt.Errorf("invalid --lock-timeout %v: must be positive", c.lockTimeout)
	case c.timeout < 0:
		return fmt.Errorf("invalid --plugin-timeout %v: must not be negative", c.timeout)
	case c.failures < 0 || c.failures > maxWindow:
		return fmt.Errorf("invalid --failure-window %v: want 0 (off) up to %v", c.failures, maxWindow)
	case c.waitLogin < 0 || c.waitLogin > maxWindow:
		return fmt.Errorf("invalid --wait-for-login %v: want 0 (off) up to %v", c.waitLogin, maxWindow)
	}
	for _, f := range []struct {
		flag  string
		names []string
	}{{"--ignore-env", c.ignoreEnv}, {"--key-env", c.keyEnv}} {
		for _, name := range f.names {
			if name == "" || name == "*" || strings.Contains(name, "=") {
				return fmt.Errorf("invalid %s %q: want a variable name or a NAME* prefix", f.flag, name)
			}
		}
	}
	return nil
}

// cacheDir is --cache-dir; by default a directory of kplug's under KUBECACHEDIR (where
// kubectl keeps its http and discovery caches), else under the user cache dir, both taken
// from the client's environment when it is known: the exec block's env must not move the
// user's credentials into a directory of its choosing.
func (c *Command) cacheDir(p Process) (string, error) {
	if c.dir != "" {
		return c.dir, nil
	}
	environ := p.Environ
	if p.Caller.Known() {
		environ = p.Caller.Environ
	}
	getenv := func(name string) string { return lookupEnv(environ, name) }
	if kcd := getenv("KUBECACHEDIR"); kcd != "" {
		return filepath.Join(kcd, "kplug", "exec-cache"), nil
	}
	base, err := userCacheDir(getenv)
	if err != nil {
		return "", &UsageError{Err: fmt.Errorf("exec-cache: no user cache directory (%w); pass --cache-dir", err)}
	}
	return filepath.Join(base, "kplug", "exec-cache"), nil
}

// userCacheDir is os.UserCacheDir with the environment read by getenv.
func userCacheDir(getenv func(string) string) (string, error) {
	var dir string
	switch runtime.GOOS {
	case "windows":
		if dir = getenv("LocalAppData"); dir == "" {
			return "", errors.New("%LocalAppData% is not defined")
		}
	case "darwin", "ios":
		if dir = getenv("HOME"); dir == "" {
			return "", errors.New("$HOME is not defined")
		}
		dir += "/Library/Caches"
	case "plan9":
		if dir = getenv("home"); dir == "" {
			return "", errors.New("$home is not defined")
		}
		dir += "/lib/cache"
	default:
		if dir = getenv("XDG_CACHE_HOME"); dir == "" {
			if dir = getenv("HOME"); dir == "" {
				return "", errors.New("neither $XDG_CACHE_HOME nor $HOME are defined")
			}
			dir += "/.cache"
		} else if !filepath.IsAbs(dir) {
			return "", errors.New("path in $XDG_CACHE_HOME is relative")
		}
	}
	return dir, nil
}

func (c *Command) runList(out io.Writer, dir string, args []string) error {
	command := ""
	if len(args) > 0 {
		command = args[0]
	}
	entries, err := List(dir, time.Now(), command)
	if err != nil {
		return err
	}
	if output.IsStructured(c.output) {
		return output.Write(out, c.output, entries)
	}
	return printEntries(out, entries, time.Now())
}

func printEntries(out io.Writer, entries []Listed, now time.Time) error {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "ENTRY\tCOMMAND\tAPI\tCLUSTER\tCREDENTIAL\tSTORAGE\tSERVED UNTIL\tCLIENTS")
	for _, e := range entries {
		if e.Corrupt {
			fmt.Fprintf(w, "%s\t-\t-\t-\tunreadable (replaced on next use)\t-\t-\t-\n", e.ID[:12])
			continue
		}
		storage := e.Storage
		if storage == "" {
			storage = "-"
		}
		until := "expired"
		if e.Servable {
			until = e.ServeUntil.UTC().Format(time.RFC3339) + " (" + Relative(e.ServeUntil, now) + ")"
		}
		cluster := e.Server
		if cluster == "" {
			cluster = "-"
		}
		command := strings.Join(append([]string{e.Command}, e.Args...), " ")
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\n", e.ID[:12], command, strings.TrimPrefix(e.APIVersion, "client.authentication.k8s.io/"),
			cluster, e.Credential, storage, until, e.Clients)
	}
	return w.Flush()
}

func (c *Command) runClear(ctx context.Context, out io.Writer, dir string, environ []string, args []string) error {
	command := ""
	if !c.all {
		command, args = args[0], args[1:]
	}
	n, err := Clear(ctx, dir, environ, command, args)
	noun := "entries"
	if n == 1 {
		noun = "entry"
	}
	if n > 0 || err == nil {
		if _, werr := fmt.Fprintf(out, "removed %d %s from %s\n", n, noun, dir); werr != nil {
			return errors.Join(err, werr)
		}
	}
	return err
}

// agentSocket is the agent to ask: --agent, else $KPLUG_EXEC_CACHE_AGENT (the client's
// environment or the exec block's env, whichever client-go gave last).
func (c *Command) agentSocket(environ []string) string {
	if c.agent != "" {
		return c.agent
	}
	return lookupEnv(environ, AgentEnv)
}

// orNone maps a flag's 0 (none) to Options' "none" (negative); its zero means the
// default.
func orNone(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

// Relative says how far t is from now, for people: "in 14m0s", "in 3 days", "expired
// 2m0s ago".
func Relative(t, now time.Time) string {
	d := t.Sub(now).Round(time.Second)
	format := func(d time.Duration) string {
		if d >= 48*time.Hour {
			return fmt.Sprintf("%d days", d/(24*time.Hour))
		}
		return d.String()
	}
	if d < 0 {
		return "expired " + format(-d) + " ago"
	}
	return "in " + format(d)
}

// Main is the whole kplug-exec-cache program: flags, one run, and the exit code (the
// wrapped plugin's when it fails; 2 for a usage error; 1 for any other failure).
func Main(ctx context.Context, name string, args []string, p Process) int {
	c := &Command{}
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	fs.SetOutput(p.Stderr)
	verbosity := fs.IntP("v", "v", 0, "log verbosity: 0 shows warnings, 4 and more debug detail")
	c.AddFlags(fs)
	fs.Usage = func() {
		fmt.Fprintf(p.Stderr, "%s\n\nUsage:\n  %s [flags] -- COMMAND [ARGS...]\n\nExamples:\n%s\n\nFlags:\n%s", Long, name, Example, fs.FlagUsages())
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(p.Stderr, "Error: %v\nRun '%s --help' for usage.\n", err, name)
		return 2
	}
	if p.Log == nil {
		level := slog.LevelInfo - slog.Level(*verbosity)
		p.Log = slog.New(slog.NewTextHandler(p.Stderr, &slog.HandlerOptions{Level: level}))
	}
	err := c.Run(ctx, fs.Args(), p)
	var exitErr *execplugin.ExitError
	var usage *UsageError
	var recent *RecentFailureError
	var agentErr *AgentError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &recent):
		fmt.Fprintf(p.Stderr, "Error: %v\n", err)
		return recent.ExitCode()
	case errors.As(err, &agentErr):
		fmt.Fprintf(p.Stderr, "Error: %v\n", err)
		return agentErr.Code
	case errors.As(err, &exitErr):
		if exitErr.Code < 0 {
			return 1 // killed by a signal
		}
		return exitErr.Code
	case errors.As(err, &usage):
		fmt.Fprintf(p.Stderr, "Error: %v\n", err)
		if usage.ShowHelp {
			fmt.Fprintf(p.Stderr, "Run '%s --help' for usage.\n", name)
		}
		return 2
	}
	fmt.Fprintf(p.Stderr, "Error: %v\n", err)
	return 1
}
