package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/kplug/kplug/execcred"
	"github.com/kplug/kplug/execproxy"
	"github.com/kplug/kplug/execproxy/server"
	"github.com/kplug/kplug/internal/execcache"
)

type proxyPluginOptions struct {
	headers     []string
	clientCert  string
	clientKey   string
	idleTimeout time.Duration
	metricsAddr string
	daemon      bool
	sign        signOptions
}

func (o *proxyPluginOptions) AddFlags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringArrayVar(&o.headers, "header", nil, "add a header to every request, as NAME=VALUE, or NAME=@FILE to read the value from FILE (repeatable)")
	f.StringVar(&o.clientCert, "client-cert", "", "PEM certificate for TLS client authentication to the API server (default with a pkcs11: --client-key: the certificate stored on the token under the key's label)")
	f.StringVar(&o.clientKey, "client-key", "", "private key of --client-cert: a PEM file (path or file:PATH), a TPM 2.0 TSS2 key file, a PKCS#11 URI, pkcs11:token=T;object=O?module-path=M&pin-source=file:P, or a TPM URI, tpm:handle=0x81000001?device=D&pin-source=file:P (PIN also from $KPLUG_PKCS11_PIN, module from $KPLUG_PKCS11_MODULE; TPM auth value from $KPLUG_TPM_PIN, TPM device from $KPLUG_TPM_DEVICE)")
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
			// The daemon's command line is only "proxy-plugin --daemon", because any local
			// user can read a process's command line (ps, /proc/PID/cmdline), and --header
			// values are often secrets: server.Run hands it kplug's arguments on stdin.
			err := server.Run(cmd.Context(), o.serverOptions(cmd, g), server.Process{
				Args:       g.args,
				ExecInfo:   os.Getenv(execcred.InfoEnv),
				DaemonArgs: []string{"proxy-plugin", "--daemon"},
				Daemon:     o.daemon,
				Stdin:      g.io.In,
				Stdout:     cmd.OutOrStdout(),
			})
			var ce *server.ConfigError
			if errors.As(err, &ce) {
				return invalidConfig(err)
			}
			return err
		},
	}
	o.AddFlags(cmd)
	return cmd
}

// certCheckInterval is how often the proxy looks for a rotated --client-cert besides at
// each new connection, so that pooled connections to the API server are replaced too.
const certCheckInterval = 2 * time.Second

// serverOptions maps the flags to the proxy's options. A daemon first applies its
// launcher's arguments, which server.Run read from its stdin.
func (o *proxyPluginOptions) serverOptions(cmd *cobra.Command, g *globals) server.Func {
	return func(ctx context.Context, req *server.Request) (*server.Options, func(), error) {
		if o.daemon {
			if err := cmd.Flags().Parse(req.Args); err != nil {
				return nil, nil, &usageError{err: err}
			}
			g.log = newLogger(g.io.Err, g.verbosity)
		}
		return o.options(ctx, g, req)
	}
}

// options checks every flag and loads what they name (keys, certificates, AWS
// credentials), so that bad input fails in the launcher with one message; release closes
// what was opened.
func (o *proxyPluginOptions) options(ctx context.Context, g *globals, req *server.Request) (_ *server.Options, _ func(), err error) {
	var closers []io.Closer
	release := func() {
		for _, c := range closers {
			_ = c.Close()
		}
	}
	defer func() {
		if err != nil {
			release()
		}
	}()
	so := &server.Options{
		SocketDir:   execproxy.RuntimeDir(os.Getenv("XDG_RUNTIME_DIR")),
		IdleTimeout: o.idleTimeout,
		Logger:      g.log,
	}
	headers := http.Header{}
	for _, h := range o.headers {
		name, value, err := headerFlag("--header", h)
		if err != nil {
			return nil, nil, err
		}
		headers.Add(name, value)
	}
	var guard *execcache.Guard // the daemon's launcher checked the same flags
	if !o.daemon {
		if guard, err = pluginGuard(g); err != nil {
			return nil, nil, err
		}
	}
	sign, signCloser, err := o.sign.signer(ctx, guard)
	if err != nil {
		return nil, nil, err
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
		return nil, nil, &usageError{err: errors.New("--client-cert and --client-key go together (--client-cert may be left out when the key and its certificate are on a PKCS#11 token)"), showHelp: true}
	}
	if o.clientKey != "" {
		cc, err := clientCertificate(o.clientCert, o.clientKey, guard, g.log)
		if err != nil {
			return nil, nil, err
		}
		closers = append(closers, cc)
		so.GetClientCertificate = cc.GetClientCertificate
		so.ClientSessionCache = cc.ClientSessionCache()
		if req.Serving {
			so.RenewConnections = cc.Watch(ctx, certCheckInterval)
		}
	}
	if req.Serving && o.metricsAddr != "" {
		reg := prometheus.NewRegistry()
		if so.Metrics, err = server.NewMetrics(reg); err != nil {
			return nil, nil, err
		}
		srv, err := serveMetrics(o.metricsAddr, reg)
		if err != nil {
			return nil, nil, err
		}
		closers = append(closers, srv)
	}
	return so, release, nil
}

// headerFlag parses the value of a header flag (--header, --sign-header): NAME=VALUE, or
// NAME=@FILE for a value kept in a file (surrounding white space, such as a final newline,
// is dropped). Errors never repeat the value, which is often a secret.
func headerFlag(flag, h string) (name, value string, err error) {
	name, value, ok := strings.Cut(h, "=")
	if !ok || !validHeaderName(name) {
		what := flag // the flag's text may hold the secret value, so it is not shown
		if validHeaderName(name) {
			what += " " + name
		}
		return "", "", &usageError{err: fmt.Errorf("invalid %s: want NAME=VALUE or NAME=@FILE, where NAME is a header name", what), showHelp: true}
	}
	if notForwarded(name) {
		return "", "", &usageError{err: fmt.Errorf("invalid %s %s: the proxy does not forward that header as set (it is hop-by-hop, or the transport writes it from the request itself), so the API server would not get it, or not the value signed", flag, name), showHelp: true}
	}
	if file, ok := strings.CutPrefix(value, "@"); ok {
		b, err := readHeaderFile(file)
		if err != nil {
			return "", "", invalidConfig(fmt.Errorf("%s %s=@%s: %w", flag, name, file, err))
		}
		value = strings.TrimSpace(string(b))
	}
	if strings.ContainsFunc(value, func(r rune) bool { return r < ' ' && r != '\t' || r == 0x7f }) {
		return "", "", invalidConfig(fmt.Errorf("%s %s: the value holds a control character (a line break?), which a header cannot carry", flag, name))
	}
	return name, value, nil
}

// notForwarded reports whether the proxy's transport drops or rewrites a header of that
// name whatever the request's header map holds: the hop-by-hop headers (RFC 9110 §7.6.1;
// HTTP/2 forbids them), and those it writes from the request's fields (Host,
// Content-Length).
func notForwarded(name string) bool {
	switch strings.ToLower(name) {
	case "connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade", "host", "content-length":
		return true
	}
	return false
}

// readHeaderFile reads a header value file of at most 64 KiB.
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
