package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"syscall"

	"k8s.io/client-go/rest"

	"github.com/kplug/kplug/execcred"
	"github.com/kplug/kplug/execcred/plugin"
)

// Func is a proxy plugin: it builds the options to serve a client's request with (what to
// do to each request, which client certificate to present upstream). Run calls it once per
// process: in a launcher only to check what the plugin was given, so that a bad argument
// fails the client's run of the plugin with its own message; in the process that serves,
// to serve. Nil options forward requests unchanged.
//
// Run fills in what the request decides: Upstream (from the client's spec.cluster, unless
// the Func set one), LockFilePath, IdentityFile (beside the lock file, unless set),
// SocketDir (the lock file's directory, unless set) and Ready (which prints the answer).
//
// ctx ends, and then release (if not nil) is called, once Run is done with the options:
// in a launcher before it starts the daemon, in the process that serves once Serve has
// returned. A Func that fails releases what it opened itself.
type Func func(ctx context.Context, req *Request) (opts *Options, release func(), err error)

// Request is what the client asked of the plugin, and in what process the plugin runs.
type Request struct {
	// Info is the client's KUBERNETES_EXEC_INFO: the version to answer in, the cluster to
	// forward to, and Info.LockFilePath, the file the client holds locked for as long as it
	// lives. That is empty when the client does not support exec proxies; Run then refuses
	// the request once the Func has checked the plugin's arguments.
	Info *plugin.Info
	// Args are the plugin's arguments. In a daemon they are its launcher's, read from
	// stdin, never from the daemon's own command line; read them from here, not os.Args.
	Args []string
	// Serving is true when the options will be served in this process (a daemon, or a
	// plugin that is its own proxy). It is false in a launcher, which builds them only to
	// check them, and for a request without a lock file, which Run refuses: start nothing
	// then that listens or runs on (a metrics endpoint, a certificate watch).
	Serving bool
}

// Process is the plugin process Run works in: what it was given, and how it may start a
// daemon. Main fills it from the operating system.
type Process struct {
	// Args are the plugin's arguments (os.Args[1:]). A launcher hands them to its daemon
	// on stdin, since every local user can read a process's command line and arguments
	// may hold secrets (an API key).
	Args []string
	// ExecInfo is the value of KUBERNETES_EXEC_INFO (execcred.InfoEnv).
	ExecInfo string
	// DaemonArgs, if not nil, make this process a launcher: it checks the options, starts
	// DaemonPath (or os.Executable()) with DaemonArgs in a session of its own (its stderr going to
	// <lockFilePath>.log), hands it Args, relays its answer and exits, leaving it serving.
	// DaemonArgs are all the daemon's command line shows: never a secret. Without
	// DaemonArgs the plugin is its own proxy: it answers, closes Stdout and serves.
	DaemonArgs []string
	// DaemonPath is the program started as the daemon; empty is os.Executable(). The
	// caller has checked it is the program it means (kplug starts a smaller build of its
	// proxy-plugin found beside it, once its build matches kplug's own).
	DaemonPath string
	// Daemon says this process is a daemon that a launcher started with DaemonArgs: it
	// reads Args from Stdin, then serves.
	Daemon bool
	// Stdin is read only by a daemon, for its launcher's Args.
	Stdin io.Reader
	// Stdout receives the answer, an ExecCredential; the process that serves closes it
	// afterwards (if it is an io.Closer), which is how its reader knows the answer is
	// complete.
	Stdout io.Writer
}

// ConfigError says that the client's request cannot be served as the kubeconfig stands:
// it sent no usable spec.cluster, so the proxy does not know where to forward. The
// kubeconfig's exec block needs provideClusterInfo: true (or a valid proxy-url).
type ConfigError struct{ Err error }

func (e *ConfigError) Error() string { return e.Err.Error() }
func (e *ConfigError) Unwrap() error { return e.Err }

// errNoLock refuses a client that does not know exec proxies, before anything starts.
var errNoLock = errors.New("exec proxy: no lock file: the client did not send spec.lockFilePath, so it does not support exec proxies (KEP-2718); run it through `kplug run -- <client>` or use `kplug request`")

// Run is a proxy plugin from the client's request to the answer: it reads
// KUBERNETES_EXEC_INFO (once), has f build the options, and then launches a daemon and
// relays its answer (p.DaemonArgs), or serves here until the client exits: it prints the
// answer once the proxy listens, and returns when Serve does. Errors of f are returned
// as they are.
func Run(ctx context.Context, f Func, p Process) error {
	if p.Daemon {
		args, err := readArgs(p.Stdin)
		if err != nil {
			return err
		}
		p.Args = args
	}
	req, upstream, err := readRequest(p.ExecInfo)
	if err != nil {
		return err
	}
	req.Args = p.Args
	req.Serving = (p.Daemon || p.DaemonArgs == nil) && req.Info.LockFilePath != ""

	optsCtx, cancel := context.WithCancel(ctx)
	o, release, err := f(optsCtx, req)
	if err != nil {
		cancel()
		return err
	}
	stop := func() {
		cancel()
		if release != nil {
			release()
		}
	}
	if !req.Serving {
		// The options were only checked. They are released before a daemon starts, which
		// may need what they hold (a token that admits one session at a time).
		stop()
		if req.Info.LockFilePath == "" {
			return errNoLock
		}
		return launch(ctx, p, req.Info.LockFilePath)
	}
	defer stop()
	if p.Daemon {
		daemonGC()
	}
	var so Options
	if o != nil {
		so = *o
	}
	so.LockFilePath = req.Info.LockFilePath
	if so.Upstream == nil {
		so.Upstream = upstream
	}
	if so.IdentityFile == "" {
		so.IdentityFile = req.Info.LockFilePath + ".identity"
	}
	if so.SocketDir == "" {
		so.SocketDir = filepath.Dir(req.Info.LockFilePath)
	}
	so.Ready = func(s *execcred.Status) {
		// The answer is the only thing this process writes to stdout; closing stdout tells
		// the reader (the launcher, or the client) that it is complete.
		if err := plugin.Write(p.Stdout, req.Info, s); err != nil {
			so.logger().Error("exec proxy: writing the answer", "error", err)
		}
		if c, ok := p.Stdout.(io.Closer); ok {
			_ = c.Close()
		}
	}
	return Serve(ctx, so)
}

// daemonGC has a daemon's garbage collector collect when its heap grows by half its live
// part rather than by all of it (GOGC 50), unless GOGC is set. A proxy daemon lives as
// long as its client, one per client, and uses a few hundredths of a core under load: its
// memory is what to save (docs/reliability.md).
func daemonGC() {
	if _, set := os.LookupEnv("GOGC"); !set { //nolint:forbidigo // the runtime's own variable: the user's setting wins
		debug.SetGCPercent(50)
	}
}

// readRequest parses KUBERNETES_EXEC_INFO: the ExecCredential input, and the exec proxy's
// spec.lockFilePath. For a client that sent a lock file, it also returns the API server
// to forward to, failing when there is none: that is what the kubeconfig must fix.
func readRequest(execInfo string) (*Request, *rest.Config, error) {
	info, err := plugin.LoadInfo(execInfo)
	if err != nil {
		return nil, nil, err
	}
	req := &Request{Info: info}
	if info.LockFilePath == "" {
		return req, nil, nil
	}
	upstream, err := execcred.ClusterConfig(info)
	if err != nil {
		return nil, nil, &ConfigError{Err: err}
	}
	return req, upstream, nil
}

// maxArgs bounds the arguments a daemon reads from its launcher.
const maxArgs = 1 << 20

// readArgs reads the launcher's arguments (JSON) from a daemon's stdin.
func readArgs(r io.Reader) ([]string, error) {
	var args []string
	if r == nil {
		r = strings.NewReader("")
	}
	if err := json.NewDecoder(io.LimitReader(r, maxArgs)).Decode(&args); err != nil {
		return nil, fmt.Errorf("exec proxy: reading the launcher's arguments from stdin: %w", err)
	}
	return args, nil
}

// mainDaemonArgs is how Main starts its daemon, and how a daemon knows it is one.
var mainDaemonArgs = []string{"--exec-proxy-daemon"}

// Main is a proxy plugin's whole main function: Run f with the process's arguments,
// KUBERNETES_EXEC_INFO and standard streams, as a launcher that starts the plugin's own
// executable as its daemon (its command line: the executable and --exec-proxy-daemon);
// exit 1 with the error on stderr if it fails. The daemon logs to stderr, that is to
// <lockFilePath>.log, unless f sets a Logger, and stops at SIGINT or SIGTERM.
//
// f reads the plugin's arguments from req.Args, never from os.Args, which in the daemon
// holds none of them.
func Main(f Func) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	withLogger := func(ctx context.Context, req *Request) (*Options, func(), error) {
		o, release, err := f(ctx, req)
		if err != nil {
			return nil, nil, err
		}
		if o == nil {
			o = &Options{}
		}
		if o.Logger == nil {
			o.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
		}
		return o, release, nil
	}
	err := Run(ctx, withLogger, Process{
		Args:       os.Args[1:],
		ExecInfo:   os.Getenv(execcred.InfoEnv), //nolint:forbidigo // Main is a plugin's main function: it reads the process's environment
		DaemonArgs: mainDaemonArgs,
		Daemon:     slices.Equal(os.Args[1:], mainDaemonArgs),
		Stdin:      os.Stdin,
		Stdout:     os.Stdout,
	})
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "error: %v\n", err)
		os.Exit(1)
	}
}
