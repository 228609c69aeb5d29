package cli

import (
	"context"
	"net/http"

	"k8s.io/client-go/rest"

	"github.com/kplug/kplug/execcred"
	"github.com/kplug/kplug/execproxy"
)

// clientSession is what a client command needs to reach the API server: a round tripper
// through the exec credential runtime and, when the plugin is an exec proxy, through the
// proxy. close releases the lock (the proxy exits) and stops the bridge.
type clientSession struct {
	rt    http.RoundTripper
	proxy *execproxy.Session // nil without an exec plugin
	close func()
}

// connect runs the context's exec plugin, if any, as a client that supports exec proxies.
func (o *kubeconfigOptions) connect(ctx context.Context, g *globals, cfg *rest.Config, stdinUse string) (*clientSession, error) {
	plugin, opts, err := o.execPlugin(g, cfg, stdinUse)
	if err != nil {
		return nil, err
	}
	if plugin == nil {
		rt, err := execcred.HTTPTransport(cfg, nil, false)
		return &clientSession{rt: rt, close: func() {}}, err
	}
	s, err := execproxy.Connect(ctx, cfg, *plugin, opts)
	if err != nil {
		return nil, pluginFailed(err)
	}
	rt, err := s.Transport()
	if err != nil {
		s.Close()
		if !s.Proxied() {
			err = invalidConfig(err) // the kubeconfig's TLS settings
		}
		return nil, err
	}
	return &clientSession{rt: rt, proxy: s, close: s.Close}, nil
}
