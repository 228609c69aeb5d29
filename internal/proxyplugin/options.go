// Package proxyplugin is `kplug proxy-plugin` (docs/exec-proxy.md): its flags, the proxy
// options they build, and Main, which cmd/kplug-proxy-plugin runs. It links the exec
// proxy and what signs and authenticates requests, and nothing else of kplug, so that the
// daemon the plugin leaves serving is a small program: Go initialises every package a
// binary links, and their pages count in the daemon's resident memory for as long as it
// serves (docs/reliability.md).
package proxyplugin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"

	"github.com/kplug/kplug/execproxy"
	"github.com/kplug/kplug/execproxy/server"
	"github.com/kplug/kplug/internal/execcache"
	"github.com/kplug/kplug/internal/metrics"
)

// Options are proxy-plugin's flags.
type Options struct {
	headers     []string
	clientCert  string
	clientKey   string
	idleTimeout time.Duration
	metricsAddr string
	daemon      bool
	sign        signOptions
}

// AddFlags adds proxy-plugin's flags to f.
func (o *Options) AddFlags(f *pflag.FlagSet) {
	f.StringArrayVar(&o.headers, "header", nil, "add a header to every request, as NAME=VALUE, or NAME=@FILE to read the value from FILE (repeatable)")
	f.StringVar(&o.clientCert, "client-cert", "", "PEM certificate for TLS client authentication to the API server (default with a pkcs11: --client-key: the certificate stored on the token under the key's label)")
	f.StringVar(&o.clientKey, "client-key", "", "private key of --client-cert: a PEM file (path or file:PATH), a TPM 2.0 TSS2 key file, a PKCS#11 URI, pkcs11:token=T;object=O?module-path=M&pin-source=file:P, or a TPM URI, tpm:handle=0x81000001?device=D&pin-source=file:P (PIN also from $KPLUG_PKCS11_PIN, module from $KPLUG_PKCS11_MODULE; TPM auth value from $KPLUG_TPM_PIN, TPM device from $KPLUG_TPM_DEVICE)")
	f.DurationVar(&o.idleTimeout, "idle-timeout", 0, "exit after this long without connections (0: only when the client exits)")
	f.StringVar(&o.metricsAddr, "metrics-addr", "", "serve Prometheus metrics on this address, e.g. 127.0.0.1:9102")
	f.BoolVar(&o.daemon, "daemon", false, "internal: serve in the foreground; the plugin starts its daemon this way")
	_ = f.MarkHidden("daemon")
	o.sign.AddFlags(f)
}

// Daemon reports whether --daemon was given: this process is the daemon a launcher
// started, and reads the launcher's arguments from stdin.
func (o *Options) Daemon() bool { return o.daemon }

// UsageError is bad flags or an invalid configuration: the command exits with 2, and
// with ShowHelp says where to read the usage.
type UsageError struct {
	Err      error
	ShowHelp bool
}

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

// usage is a flag error, after which the usage is worth reading.
func usage(err error) error { return &UsageError{Err: err, ShowHelp: true} }

// invalidConfig is a configuration that fails its checks.
func invalidConfig(err error) error { return &UsageError{Err: err} }

// certCheckInterval is how often the proxy looks for a rotated --client-cert besides at
// each new connection, so that pooled connections to the API server are replaced too.
const certCheckInterval = 2 * time.Second

// ServerOptions checks every flag and loads what they name (keys, certificates, AWS
// credentials), so that bad input fails in the launcher with one message; release closes
// what was opened. A launcher's newGuard is the client's credential plugin policy over
// what the flags would load or run (NewGuard); a daemon's launcher has checked them.
func (o *Options) ServerOptions(ctx context.Context, log *slog.Logger, newGuard func() (*execcache.Guard, error), req *server.Request) (_ *server.Options, _ func(), err error) {
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
		Logger:      log,
	}
	headers := http.Header{}
	for _, h := range o.headers {
		name, value, err := headerFlag("--header", h)
		if err != nil {
			return nil, nil, err
		}
		headers.Add(name, value)
	}
	var guard *execcache.Guard
	if !o.daemon {
		if guard, err = newGuard(); err != nil {
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
		return nil, nil, usage(errors.New("--client-cert and --client-key go together (--client-cert may be left out when the key and its certificate are on a PKCS#11 token)"))
	}
	if o.clientKey != "" {
		cc, err := clientCertificate(o.clientCert, o.clientKey, guard, log)
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
		srv, err := metrics.Serve(o.metricsAddr, reg)
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
		return "", "", usage(fmt.Errorf("invalid %s: want NAME=VALUE or NAME=@FILE, where NAME is a header name", what))
	}
	if notForwarded(name) {
		return "", "", usage(fmt.Errorf("invalid %s %s: the proxy does not forward that header as set (it is hop-by-hop, or the transport writes it from the request itself), so the API server would not get it, or not the value signed", flag, name))
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
