package execproxy

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/kplug/kplug/execcred"
	"github.com/kplug/kplug/internal/privdir"
)

// Options configure Connect.
type Options struct {
	// Credentials configure the exec credential pipeline the plugin runs in (execcred.New):
	// the host (runner, terminal, timeout), backoff, refresh-ahead, metrics and the logger,
	// which the bridge uses too.
	Credentials execcred.Options
	// RuntimeDir holds the session's lock file and, for WriteKubeconfig, its kubeconfig;
	// empty means RuntimeDir(os.Getenv("XDG_RUNTIME_DIR")).
	RuntimeDir string
}

// Session is a client's connection to the API server of one *rest.Config, through
// whatever its exec plugin answered. Config and Transport authenticate the same way, for
// every case:
//
//   - no exec plugin, or static credentials that take precedence over it (a token, basic
//     auth, a client certificate, as in client-go): the config as it is;
//   - a user with an httpSignature block (Credentials.HTTPSignature): each request is signed
//     in process with the key files' or the plugin's signing material, and carries no
//     token or client certificate;
//   - a plugin that answered with a bearer token: kplug's pipeline (execcred.New with
//     Options.Credentials) adds it to every request and refreshes it, after a 401 too;
//   - a plugin that answered with a client certificate: for Config, client-go's own exec
//     provider, the only one that can present a certificate, and replace it when it
//     rotates, on all of client-go's dial paths (REST, SPDY, WebSocket), so client-go runs
//     the plugin once more itself, as for any client, without spec.lockFilePath; for
//     Transport, kplug's, which presents the certificate this session already has;
//   - a plugin that answered with an exec proxy: everything goes through the proxy, with
//     a bridge that starts the proxy again if it dies. REST calls and watches dial the
//     proxy's socket directly; SPDY and WebSocket upgrades, whose dialers honour only a
//     proxy URL, go through the bridge. The config's credentials stay behind, but its
//     impersonation is kept: the proxy passes it on to the API server.
//
// A Session is safe for concurrent use. Close ends it, and with it the proxy.
type Session struct {
	cfg    *rest.Config
	dir    string
	src    execcred.Source      // nil without a plugin
	cred   *execcred.Credential // the plugin's first answer
	bridge *Bridge
	lock   *Lock
}

// Connect is the one call from a kubeconfig user to a client, for every kind of credential
// (see Session). It runs the exec plugin of cfg, if cfg has one that client-go would use,
// as a client that supports exec proxies: it takes a fresh lock in the runtime directory,
// passes its path in spec.lockFilePath, and waits for the plugin's answer; for a proxy it
// starts the bridge. For a user with an httpSignature block (Credentials.HTTPSignature) it
// fetches the signing material instead.
// Errors are those of the pipeline (*execcred.PluginError, ...), an invalid exec
// configuration (*execcred.ConfigError), or the runtime directory's.
func Connect(ctx context.Context, cfg *rest.Config, o Options) (*Session, error) {
	s := &Session{cfg: cfg, dir: o.RuntimeDir}
	if s.dir == "" {
		s.dir = RuntimeDir(os.Getenv("XDG_RUNTIME_DIR")) //nolint:forbidigo // where clients keep locks, as the exec proxy specification says
	}
	if o.Credentials.HTTPSignature != nil {
		return s, s.sign(ctx, o)
	}
	if cfg.ExecProvider == nil || execcred.HasStaticCredentials(cfg) {
		return s, nil
	}
	plugin, err := execcred.FromRESTConfig(cfg)
	if err != nil {
		return nil, err
	}
	if s.lock, err = NewLock(s.dir); err != nil {
		return nil, err
	}
	plugin.LockFilePath = s.lock.Path
	if s.src, err = execcred.New(*plugin, o.Credentials); err != nil {
		s.Close()
		return nil, err
	}
	if s.cred, err = s.src.Credential(ctx, nil); err != nil {
		s.Close()
		return nil, err
	}
	if s.cred.Proxy == nil {
		return s, nil
	}
	if s.bridge, err = NewBridge(SocketPath(s.cred.Proxy), s.restart(), o.Credentials.Logger); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// sign makes s sign requests with the signing material of the user's httpSignature block,
// fetched now so that a bad key or plugin fails here rather than at the first request.
func (s *Session) sign(ctx context.Context, o Options) (err error) {
	if s.src, err = execcred.NewForRESTConfig(s.cfg, o.Credentials); err != nil {
		return err
	}
	s.cred, err = s.src.Credential(ctx, nil)
	return err
}

// NewSession returns a Session through an exec proxy that is already running, from its
// answer (a Credential with Proxy set) obtained elsewhere, e.g. by a program that ran the
// plugin itself. It starts the bridge and runs no plugin: a proxy that dies is not started
// again. Close stops the bridge. A credential without a proxy is refused with an error
// wrapping ErrNotProxied.
func NewSession(cfg *rest.Config, cred *execcred.Credential) (*Session, error) {
	if cred == nil || cred.Proxy == nil {
		return nil, fmt.Errorf("%w: the credential has no proxyConfig", ErrNotProxied)
	}
	b, err := NewBridge(SocketPath(cred.Proxy), nil, nil)
	if err != nil {
		return nil, err
	}
	return &Session{cfg: cfg, cred: cred, bridge: b}, nil
}

// restart runs the plugin again for a proxy that refuses connections, and returns the
// new proxy's socket.
func (s *Session) restart() func(context.Context, string) (string, error) {
	used := s.cred
	return func(ctx context.Context, _ string) (string, error) {
		fresh, err := s.src.Credential(ctx, &execcred.Rejection{Credential: used})
		if err != nil {
			return "", err
		}
		if fresh.Proxy == nil {
			return "", errors.New("the plugin no longer answers with a proxy")
		}
		used = fresh
		return SocketPath(fresh.Proxy), nil
	}
}

// Proxied reports whether the plugin answered with a proxy.
func (s *Session) Proxied() bool { return s.bridge != nil }

// Credential is the plugin's first answer; nil without a plugin.
func (s *Session) Credential() *execcred.Credential { return s.cred }

// Bridge is the loopback CONNECT endpoint to the proxy (nil when not Proxied), for
// clients that take a proxy-url, as in Kubeconfig.
func (s *Session) Bridge() *Bridge { return s.bridge }

// Config returns a copy of the client's configuration for client-go, authenticated as
// the Session's doc says: REST calls, watches, SPDY and WebSocket upgrades all carry the
// same credentials, and keep cfg's impersonation.
func (s *Session) Config() (*rest.Config, error) {
	switch {
	case s.bridge != nil:
		return configFor(s.cfg, s.cred, s.bridge)
	case s.src == nil:
		c := rest.CopyConfig(s.cfg)
		c.ExecProvider = nil // static credentials win, as in client-go
		return c, nil
	case s.cred.Certificate != nil:
		return rest.CopyConfig(s.cfg), nil // client-go's exec provider presents it
	}
	return execcred.ConfigFor(s.cfg, s.src), nil
}

// Transport returns a round tripper for plain HTTP requests to the API server, which
// authenticates as Config does. For a plugin that answered with a client certificate it
// is kplug's own transport (execcred.HTTPTransport), which presents the certificate the
// session already has, and a rotated one later, at each TLS handshake, so that a
// one-shot request does not make client-go run the plugin a second time (a second login
// for an interactive plugin); otherwise it is the transport client-go builds from Config.
// It retries a request once after a 401 that made the plugin's token refresh.
func (s *Session) Transport() (http.RoundTripper, error) {
	if s.src != nil && s.bridge == nil && (s.cred.Certificate != nil || s.cred.HTTPSignature != nil) {
		return execcred.HTTPTransport(s.cfg, s.src)
	}
	c, err := s.Config()
	if err != nil {
		return nil, err
	}
	return rest.TransportFor(c)
}

// Kubeconfig returns a kubeconfig for unmodified clients (kubectl, helm) that reaches the
// API server of the config (its Host) through the bridge (proxy-url) and the exec proxy,
// with the config's impersonation (as, as-uid, as-groups, as-user-extra). It holds the
// hop's private key and the bridge's secret: write it only where no other user can read
// it (WriteKubeconfig does). It fails, with an error wrapping ErrNotProxied, when there is no proxy.
func (s *Session) Kubeconfig() (*clientcmdapi.Config, error) {
	switch {
	case s.bridge != nil:
		return kubeconfigFor(s.cfg, s.cred, s.bridge), nil
	case s.src == nil:
		return nil, fmt.Errorf("%w: the config has no exec plugin that a client would run", ErrNotProxied)
	case s.cred.HTTPSignature != nil:
		return nil, fmt.Errorf("%w: the user signs requests (httpSignature), which only a client that signs can do", ErrNotProxied)
	}
	return nil, fmt.Errorf("%w: the exec plugin answered with a credential", ErrNotProxied)
}

// WriteKubeconfig writes Kubeconfig to a 0600 file in a fresh 0700 directory of the
// runtime directory, which it checks first (it holds the hop's private key and the
// bridge's secret), and returns its path and a function that removes it.
func (s *Session) WriteKubeconfig() (path string, remove func(), err error) {
	kc, err := s.Kubeconfig()
	if err != nil {
		return "", nil, err
	}
	if err := privdir.Ensure(s.dir); err != nil {
		return "", nil, fmt.Errorf("exec proxy: runtime directory: %w (kplug uses $XDG_RUNTIME_DIR/kplug, else $TMPDIR/kplug-<uid>)", err)
	}
	dir, err := os.MkdirTemp(s.dir, "run-")
	if err != nil {
		return "", nil, err
	}
	remove = func() { _ = os.RemoveAll(dir) }
	path = filepath.Join(dir, "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		remove()
		return "", nil, err
	}
	if err := os.Chmod(path, 0o600); err != nil {
		remove()
		return "", nil, err
	}
	return path, remove, nil
}

// ErrNotProxied says a Session has no exec proxy to reach the API server through.
var ErrNotProxied = errors.New("exec proxy: no exec proxy to run through")

// Close stops the bridge and releases the lock, which tells the proxy to exit.
func (s *Session) Close() {
	if s.bridge != nil {
		_ = s.bridge.Close()
	}
	if s.lock != nil {
		_ = s.lock.Close()
	}
}
