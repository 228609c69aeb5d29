package execproxy

import (
	"context"
	"errors"
	"net/http"
	"os"

	"k8s.io/client-go/rest"

	"github.com/kplug/kplug/execcred"
)

// Session is a client's side of the exec proxy protocol: the lock the proxy watches, the
// authenticator that runs the plugin, and, when the plugin answered with a proxy, the
// bridge for upgrades and for restarting a proxy that died.
type Session struct {
	cfg    *rest.Config
	auth   *execcred.Authenticator
	cred   *execcred.Credential
	bridge *Bridge
	lock   *Lock
}

// Connect runs the exec plugin of cfg as a client that supports exec proxies: it takes a
// fresh lock in the per-user runtime directory, passes its path in spec.lockFilePath, and
// waits for the plugin's answer. plugin is cfg's exec configuration (execcred.FromRESTConfig)
// and opts the authenticator's options. Close ends the session, and with it the proxy.
//
// A plugin may answer with an ordinary credential instead of a proxy; the session then
// authenticates with it (see Config).
func Connect(ctx context.Context, cfg *rest.Config, plugin execcred.Config, opts execcred.Options) (*Session, error) {
	lock, err := NewLock(RuntimeDir(os.Getenv("XDG_RUNTIME_DIR"))) //nolint:forbidigo // where clients keep locks, as the exec proxy specification says
	if err != nil {
		return nil, err
	}
	s := &Session{cfg: cfg, lock: lock}
	plugin.LockFilePath = lock.Path
	if s.auth, err = execcred.New(plugin, opts); err != nil {
		s.Close()
		return nil, err
	}
	if s.cred, err = s.auth.Credential(ctx); err != nil {
		s.Close()
		return nil, err
	}
	if s.cred.Proxy == nil {
		return s, nil
	}
	if s.bridge, err = NewBridge(SocketPath(s.cred.Proxy), s.restart(), opts.Logger); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// restart runs the plugin again for a proxy that refuses connections, and returns the
// new proxy's socket.
func (s *Session) restart() func(context.Context, string) (string, error) {
	used := s.cred
	return func(ctx context.Context, _ string) (string, error) {
		fresh, err := s.auth.Refresh(ctx, used, nil)
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

// Credential is the plugin's first answer.
func (s *Session) Credential() *execcred.Credential { return s.cred }

// Authenticator runs the session's plugin.
func (s *Session) Authenticator() *execcred.Authenticator { return s.auth }

// Bridge is the loopback CONNECT endpoint to the proxy (nil when not Proxied), for
// clients that take a proxy-url, as in Kubeconfig.
func (s *Session) Bridge() *Bridge { return s.bridge }

// Config returns a copy of the client's configuration for client-go that sends everything
// (REST calls, watches, SPDY and WebSocket upgrades) through the proxy; see ConfigFor.
//
// Without a proxy, the plugin's credential authenticates the requests. A bearer token is
// added by the session's authenticator (execcred.ConfigFor). A client certificate can be
// presented on all of client-go's dial paths, and replaced when it expires, only by
// client-go's own exec provider: for a plugin that answered with one, Config keeps cfg's
// exec provider, and client-go runs the plugin itself (once more, without
// spec.lockFilePath, as for any client; the plugin answered without a proxy anyway).
func (s *Session) Config() (*rest.Config, error) {
	switch {
	case s.bridge != nil:
		return ConfigFor(s.cfg, s.cred, s.bridge)
	case s.cred.Certificate != nil && s.cfg.ExecProvider != nil:
		return rest.CopyConfig(s.cfg), nil
	}
	return execcred.ConfigFor(s.cfg, s.auth, true), nil
}

// Transport returns a round tripper for plain HTTP requests to the API server, with the
// same credentials as Config: through the proxy, or, without a proxy, with the session's
// authenticator (execcred.HTTPTransport), which presents the plugin's token or client
// certificate, the latter even for a server trusted through the system roots, and
// refreshes the credential and retries once after a 401.
func (s *Session) Transport() (http.RoundTripper, error) {
	if s.bridge == nil {
		return execcred.HTTPTransport(s.cfg, s.auth, true)
	}
	c, err := ConfigFor(s.cfg, s.cred, s.bridge)
	if err != nil {
		return nil, err
	}
	return rest.TransportFor(c)
}

// Close stops the bridge and releases the lock, which tells the proxy to exit.
func (s *Session) Close() {
	if s.bridge != nil {
		_ = s.bridge.Close()
	}
	_ = s.lock.Close()
}
