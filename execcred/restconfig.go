package execcred

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"

	"k8s.io/client-go/rest"
)

// HasStaticCredentials reports whether cfg carries credentials of its own (a bearer token or
// token file, a basic-auth user, or a client certificate and key). client-go then never runs
// the exec plugin, and neither does this package.
func HasStaticCredentials(cfg *rest.Config) bool {
	tc := cfg.TLSClientConfig
	hasCert := (len(tc.CertData) > 0 || tc.CertFile != "") && (len(tc.KeyData) > 0 || tc.KeyFile != "")
	return cfg.BearerToken != "" || cfg.BearerTokenFile != "" || cfg.Username != "" || hasCert
}

// NewForRESTConfig returns an Authenticator for cfg's exec provider.
func NewForRESTConfig(cfg *rest.Config, opts Options) (*Authenticator, error) {
	c, err := FromRESTConfig(cfg)
	if err != nil {
		return nil, err
	}
	return New(*c, opts)
}

// ConfigFor returns a copy of cfg in which a, not client-go's exec authenticator,
// authenticates requests: the bearer token is added by a Transport that wraps every
// transport client-go builds from the config (REST calls, watches, SPDY and WebSocket
// upgrades), and connections are tracked for rotation. If cfg has static credentials,
// they win and a is not used, as in client-go.
//
// A client-go config has no hook for a client certificate that changes, so a plugin that
// returns one fails requests through ConfigFor with a clear error; use HTTPTransport.
func ConfigFor(cfg *rest.Config, a *Authenticator, retryAfterRefresh bool) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.ExecProvider = nil
	if HasStaticCredentials(cfg) {
		return c
	}
	c.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return &Transport{Auth: a, Base: rt, RetryAfterRefresh: retryAfterRefresh, tokenOnly: true}
	})
	return c
}

// HTTPTransport returns a round tripper for cfg that authenticates with a: bearer token,
// client certificate (presented at each TLS handshake, connections closed when it
// changes), 401 refresh and, if asked, one retry. It honours cfg's TLS settings, proxy,
// impersonation and user agent. Static credentials in cfg win over a, as in client-go.
func HTTPTransport(cfg *rest.Config, a *Authenticator, retryAfterRefresh bool) (http.RoundTripper, error) {
	c := rest.CopyConfig(cfg)
	c.ExecProvider = nil
	if c.Transport != nil {
		return nil, errors.New("execcred: the config already has a custom Transport")
	}
	tlsConfig, err := rest.TLSConfigFor(c)
	if err != nil {
		return nil, fmt.Errorf("execcred: TLS configuration: %w", err)
	}
	base := &http.Transport{
		Proxy:             c.Proxy,
		TLSClientConfig:   tlsConfig,
		ForceAttemptHTTP2: true,
		MaxIdleConns:      100,
	}
	if base.Proxy == nil {
		base.Proxy = http.ProxyFromEnvironment
	}
	var rt http.RoundTripper = base
	if HasStaticCredentials(cfg) || a == nil {
		base.DialContext = c.Dial
	} else {
		if base.TLSClientConfig == nil {
			// rest.TLSConfigFor has nothing to say for a server trusted through the system
			// roots, but the plugin's certificate must be presented all the same.
			base.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12}
		}
		if base.TLSClientConfig.GetClientCertificate == nil {
			base.TLSClientConfig.GetClientCertificate = a.GetClientCertificate
		}
		base.DialContext = a.DialContext(c.Dial)
		rt = &Transport{Auth: a, Base: base, RetryAfterRefresh: retryAfterRefresh}
	}
	return rest.HTTPWrappersForConfig(c, rt)
}
