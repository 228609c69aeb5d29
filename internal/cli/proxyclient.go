package cli

import (
	"context"
	"errors"
	"net/http"
	"os"

	"k8s.io/client-go/rest"

	"github.com/kplug/kplug/execcred"
	"github.com/kplug/kplug/execproxy"
)

// clientSession is what a client command needs to reach the API server: a round tripper
// through the exec credential runtime and, when the plugin is an exec proxy, through the
// proxy. close releases the lock (the proxy exits) and stops the bridge.
type clientSession struct {
	rt     http.RoundTripper
	cred   *execcred.Credential // nil without an exec plugin
	bridge *execproxy.Bridge
	close  func()
}

// connect runs the context's exec plugin, if any, as a client that supports exec proxies.
func (o *kubeconfigOptions) connect(ctx context.Context, g *globals, cfg *rest.Config, stdinUse string) (*clientSession, error) {
	if cfg.ExecProvider == nil || execcred.HasStaticCredentials(cfg) {
		rt, err := execcred.HTTPTransport(cfg, nil, false)
		return &clientSession{rt: rt, close: func() {}}, err
	}
	lock, err := execproxy.NewLock(execproxy.RuntimeDir(os.Getenv("XDG_RUNTIME_DIR")))
	if err != nil {
		return nil, err
	}
	s := &clientSession{close: func() { _ = lock.Close() }}
	fail := func(err error) (*clientSession, error) {
		s.close()
		return nil, err
	}
	a, err := o.authenticator(g, cfg, stdinUse, lock.Path)
	if err != nil {
		return fail(err)
	}
	if s.cred, err = a.Credential(ctx); err != nil {
		return fail(err)
	}
	if s.cred.Proxy == nil {
		s.rt, err = execcred.HTTPTransport(cfg, a, true)
		if err != nil {
			return fail(invalidConfig(err))
		}
		return s, nil
	}
	used := s.cred
	restart := func(ctx context.Context, _ string) (string, error) {
		fresh, err := a.Refresh(ctx, used, nil)
		if err != nil {
			return "", err
		}
		if fresh.Proxy == nil {
			return "", errors.New("the plugin no longer answers with a proxy")
		}
		used = fresh
		return execproxy.SocketPath(fresh.Proxy), nil
	}
	if s.bridge, err = execproxy.NewBridge(execproxy.SocketPath(s.cred.Proxy), restart, g.log); err != nil {
		return fail(err)
	}
	s.close = func() { _ = s.bridge.Close(); _ = lock.Close() }
	proxied, err := execproxy.ConfigFor(cfg, s.cred, s.bridge)
	if err != nil {
		return fail(err)
	}
	if s.rt, err = rest.TransportFor(proxied); err != nil {
		return fail(err)
	}
	return s, nil
}
