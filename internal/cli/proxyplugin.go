package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"

	"github.com/kplug/kplug/execcred"
	"github.com/kplug/kplug/execcred/plugin"
	"github.com/kplug/kplug/execproxy"
	"github.com/kplug/kplug/execproxy/modify"
	"github.com/kplug/kplug/execproxy/server"
	"github.com/kplug/kplug/internal/privdir"
)

type proxyPluginOptions struct {
	headers     []string
	clientCert  string
	clientKey   string
	idleTimeout time.Duration
	metricsAddr string
	daemon      bool
	sign        signOptions
	cert        *modify.ClientCertificate // loaded from --client-cert and --client-key
}

func (o *proxyPluginOptions) AddFlags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringArrayVar(&o.headers, "header", nil, "add a header to every request, as NAME=VALUE, or NAME=@FILE to read the value from FILE (repeatable)")
	f.StringVar(&o.clientCert, "client-cert", "", "PEM certificate for TLS client authentication to the API server (default with a pkcs11: --client-key: the certificate stored on the token under the key's label)")
	f.StringVar(&o.clientKey, "client-key", "", "private key of --client-cert: a PEM file (path or file:PATH) or a PKCS#11 URI, pkcs11:token=T;object=O?module-path=M&pin-source=file:P (PIN also from $KPLUG_PKCS11_PIN, module from $KPLUG_PKCS11_MODULE)")
	f.DurationVar(&o.idleTimeout, "idle-timeout", 0, "exit after this long without connections (0: only when the client exits)")
	f.StringVar(&o.metricsAddr, "metrics-addr", "", "serve Prometheus metrics on this address, e.g. 127.0.0.1:9102")
	f.BoolVar(&o.daemon, "daemon", false, "internal: serve in the foreground; the plugin starts itself this way")
	_ = f.MarkHidden("daemon")
	o.sign.AddFlags(f)
}

func newProxyPluginCommand(g *globals) *cobra.Command {
	o := &proxyPluginOptions{}
	cmd := &cobra.Command{
		Use:   "proxy-plugin",
		Short: "Reference exec proxy plugin (KEP-2718): forward a client's API traffic, adding headers, signatures or a client certificate",
		Long: `An exec credential plugin that answers with an exec proxy (docs/exec-proxy.md): it starts
a proxy on a private unix socket, which forwards the client's requests to the API server
and can add headers (--header), sign each request (--sign sigv4 or rfc9421) and
authenticate with a TLS client certificate whose key is a file or stays on a PKCS#11
token (--client-cert, --client-key). A replaced certificate file is used for new
connections without a restart. It is meant to be named in a kubeconfig's exec block, with
provideClusterInfo: true, and run by a client that supports exec proxies (kplug request,
kplug run, the execproxy package). The proxy exits when its client exits.`,
		Example: `users:
- name: proxied
  user:
    exec:
      apiVersion: client.authentication.k8s.io/v1
      command: kplug
      args: [proxy-plugin, --client-cert, /etc/kplug/me.crt, --client-key, /etc/kplug/me.key]
      provideClusterInfo: true
      interactiveMode: Never`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.daemon {
				if err := o.launcherArgs(cmd, g); err != nil {
					return err
				}
			}
			return o.run(cmd.Context(), g, cmd.OutOrStdout())
		},
	}
	o.AddFlags(cmd)
	return cmd
}

// launcherArgs reads the launcher's arguments from stdin and applies them. The daemon's
// command line is only "proxy-plugin --daemon", because any local user can read a
// process's command line (ps, /proc/PID/cmdline), and --header values are often secrets.
func (o *proxyPluginOptions) launcherArgs(cmd *cobra.Command, g *globals) error {
	var args []string
	if err := json.NewDecoder(io.LimitReader(g.io.In, 1<<20)).Decode(&args); err != nil {
		return fmt.Errorf("exec proxy: reading the launcher's arguments from stdin: %w", err)
	}
	if err := cmd.Flags().Parse(args); err != nil {
		return &usageError{err: err}
	}
	g.log = newLogger(g.io.Err, g.verbosity)
	return nil
}

func (o *proxyPluginOptions) run(ctx context.Context, g *globals, out io.Writer) error {
	info, err := plugin.LoadInfo(os.Getenv(execcred.InfoEnv))
	if err != nil {
		return err
	}
	serveOpts, closers, err := o.serveOptions(ctx, g, info)
	defer func() {
		for _, c := range closers {
			_ = c.Close()
		}
	}()
	if err != nil {
		return err
	}
	if !o.daemon {
		return launch(ctx, out, serveOpts.LockFilePath, g.args)
	}
	serveOpts.Ready = func(s *execcred.Status) {
		// The answer is the only thing this process writes to stdout; closing stdout tells
		// the launcher it is complete.
		_ = json.NewEncoder(out).Encode(execcred.ExecCredential{Kind: execcred.Kind, APIVersion: info.APIVersion, Spec: struct{}{}, Status: s})
		if f, ok := out.(*os.File); ok {
			_ = f.Close()
		}
	}
	if o.metricsAddr != "" {
		reg := prometheus.NewRegistry()
		if serveOpts.Metrics, err = server.NewMetrics(reg); err != nil {
			return err
		}
		stop, err := serveMetrics(o.metricsAddr, reg)
		if err != nil {
			return err
		}
		defer stop()
	}
	if o.cert != nil {
		watchCtx, stopWatching := context.WithCancel(ctx)
		defer stopWatching()
		serveOpts.CloseIdleConnections = o.cert.Watch(watchCtx, certCheckInterval)
	}
	return server.Serve(ctx, serveOpts)
}

// certCheckInterval is how often the proxy looks for a rotated --client-cert besides at
// each new connection, so that pooled connections to the API server are replaced too.
const certCheckInterval = 2 * time.Second

// serveOptions checks every flag and loads what they name (keys, certificates, AWS
// credentials), so that bad input fails at start with one message; it returns what to
// close when the proxy stops.
func (o *proxyPluginOptions) serveOptions(ctx context.Context, g *globals, info *plugin.Info) (server.Options, []io.Closer, error) {
	spec, err := execLockFile(os.Getenv(execcred.InfoEnv))
	if err != nil {
		return server.Options{}, nil, err
	}
	upstream, err := info.RESTConfig()
	if err != nil && spec != "" {
		return server.Options{}, nil, invalidConfig(err)
	}
	var closers []io.Closer
	so := server.Options{
		Upstream:     upstream,
		LockFilePath: spec,
		SocketDir:    execproxy.RuntimeDir(os.Getenv("XDG_RUNTIME_DIR")),
		IdentityFile: spec + ".identity",
		IdleTimeout:  o.idleTimeout,
		Logger:       g.log,
	}
	if spec == "" {
		so.IdentityFile = ""
	}
	headers := http.Header{}
	for _, h := range o.headers {
		name, value, err := headerFlag(h)
		if err != nil {
			return so, closers, err
		}
		headers.Add(name, value)
	}
	sign, signCloser, err := o.sign.signer(ctx)
	if err != nil {
		return so, closers, err
	}
	if signCloser != nil {
		closers = append(closers, signCloser)
	}
	if len(headers) > 0 || sign != nil {
		// Headers first, so that a signature covers them.
		so.ModifyRequest = func(r *http.Request) error {
			for name, values := range headers {
				r.Header[http.CanonicalHeaderKey(name)] = values
			}
			if sign != nil {
				return sign(r)
			}
			return nil
		}
	}
	keyOnToken := strings.HasPrefix(o.clientKey, "pkcs11:")
	if o.clientCert != "" && o.clientKey == "" || o.clientCert == "" && o.clientKey != "" && !keyOnToken {
		return so, closers, &usageError{err: errors.New("--client-cert and --client-key go together (--client-cert may be left out when the key and its certificate are on a PKCS#11 token)"), showHelp: true}
	}
	if o.clientKey != "" {
		cc, err := clientCertificate(o.clientCert, o.clientKey, g.log)
		if err != nil {
			return so, closers, err
		}
		closers = append(closers, cc)
		o.cert = cc
		so.GetClientCertificate = cc.GetClientCertificate
		so.ClientSessionCache = cc.ClientSessionCache()
	}
	if spec == "" {
		return so, closers, errors.New("exec proxy: no lock file: the client did not send spec.lockFilePath, so it does not support exec proxies (KEP-2718); run it through `kplug run -- <client>` or use `kplug request`")
	}
	return so, closers, nil
}

// headerFlag parses a --header value: NAME=VALUE, or NAME=@FILE for a value kept in a file
// (surrounding white space, such as a final newline, is dropped). Errors never repeat the
// value, which is often a secret.
func headerFlag(h string) (name, value string, err error) {
	name, value, ok := strings.Cut(h, "=")
	if !ok || !validHeaderName(name) {
		what := "--header" // the flag's text may hold the secret value, so it is not shown
		if validHeaderName(name) {
			what += " " + name
		}
		return "", "", &usageError{err: fmt.Errorf("invalid %s: want NAME=VALUE or NAME=@FILE, where NAME is a header name", what), showHelp: true}
	}
	if file, ok := strings.CutPrefix(value, "@"); ok {
		b, err := readHeaderFile(file)
		if err != nil {
			return "", "", invalidConfig(fmt.Errorf("--header %s=@%s: %w", name, file, err))
		}
		value = strings.TrimSpace(string(b))
	}
	if strings.ContainsFunc(value, func(r rune) bool { return r < ' ' && r != '\t' || r == 0x7f }) {
		return "", "", invalidConfig(fmt.Errorf("--header %s: the value holds a control character (a line break?), which a header cannot carry", name))
	}
	return name, value, nil
}

// readHeaderFile reads a --header value file of at most 64 KiB.
func readHeaderFile(path string) ([]byte, error) {
	f, err := os.Open(path) //nolint:gosec // a file the user names
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 64<<10+1))
	if err == nil && len(b) > 64<<10 {
		err = errors.New("larger than 64 KiB")
	}
	return b, err
}

// validHeaderName reports whether name is an HTTP token (RFC 9110, section 5.6.2).
func validHeaderName(name string) bool {
	const tchar = "!#$%&'*+-.^_`|~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
	return name != "" && strings.Trim(name, tchar) == ""
}

// execLockFile reads spec.lockFilePath, the exec proxy extension, from KUBERNETES_EXEC_INFO.
func execLockFile(info string) (string, error) {
	if info == "" {
		return "", nil
	}
	var in struct {
		Spec struct {
			LockFilePath string `json:"lockFilePath"`
		} `json:"spec"`
	}
	if err := json.Unmarshal([]byte(info), &in); err != nil {
		return "", fmt.Errorf("%s: %w", execcred.InfoEnv, err)
	}
	return in.Spec.LockFilePath, nil
}

// launch starts this command again as a detached daemon, waits for its answer and prints
// it. The daemon's log goes beside the client's lock file, once that directory is known
// to be the user's own and closed to other users' writes, and never through a link.
func launch(ctx context.Context, out io.Writer, lockFile string, args []string) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	if err := privdir.Verify(filepath.Dir(lockFile)); err != nil {
		return fmt.Errorf("exec proxy: spec.lockFilePath %s: %w; the client must keep its lock file in a directory of its own that other users cannot write to", lockFile, err)
	}
	logFile, err := privdir.Replace(lockFile + ".log")
	if err != nil {
		return fmt.Errorf("exec proxy: the proxy's log: %w", err)
	}
	defer logFile.Close()
	// The daemon outlives this launcher by design, so no context may kill it. Its options,
	// --header values among them, reach it on stdin, not on its command line.
	cmd := exec.Command(self, "proxy-plugin", "--daemon") //nolint:gosec,noctx // ourselves, detached
	cmd.Stderr = logFile
	detach(cmd)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("exec proxy: starting the proxy: %w", err)
	}
	_ = json.NewEncoder(stdin).Encode(args) // a daemon that cannot read them says so in its log
	_ = stdin.Close()
	// The answer is complete when the daemon closes stdout, after printing it or by dying.
	answer := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(io.LimitReader(stdout, 1<<20))
		answer <- b
	}()
	timer := time.NewTimer(30 * time.Second)
	defer timer.Stop()
	var b []byte
	select {
	case b = <-answer:
	case <-timer.C:
		_ = cmd.Process.Kill()
		return fmt.Errorf("exec proxy: the proxy did not answer within 30s; see %s.log", lockFile)
	case <-ctx.Done():
		_ = cmd.Process.Kill()
		return ctx.Err()
	}
	if len(bytes.TrimSpace(b)) == 0 {
		_ = cmd.Wait() // it has exited: reap it
		logTail, _ := privdir.ReadFile(lockFile+".log", 64<<10)
		return fmt.Errorf("exec proxy: the proxy exited without answering: %s", strings.TrimSpace(string(logTail)))
	}
	_ = cmd.Process.Release()
	_, err = out.Write(b)
	return err
}

// metricsServer serves reg at /metrics, for the commands with --metrics-addr.
func metricsServer(reg *prometheus.Registry) *http.Server {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	return &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
}

func serveMetrics(addr string, reg *prometheus.Registry) (func(), error) {
	srv := metricsServer(reg)
	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-addr: %w", err)
	}
	go func() { _ = srv.Serve(ln) }()
	return func() { _ = srv.Close() }, nil
}
