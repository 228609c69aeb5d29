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

// NewForRESTConfig is the source of a kubeconfig user's credentials, one call for every
// kind a plugin can give: New for cfg's exec provider (FromRESTConfig), or, with
// Options.HTTPSignature, the user's signing material (KEP-6308):
//
//   - with key files, a source that reads them, cached until the certificate expires or
//     a server rejects it, when the files are read again (a rotated certificate is picked
//     up then);
//   - otherwise cfg's exec plugin, in New's pipeline, asked for signing material in
//     spec.httpSignature; an answer without it, or without a value for a header the block
//     names, is an error.
//
// Give it to HTTPTransport or ConfigFor: each request then carries the token or client
// certificate, or is signed and carries neither. A user with static credentials (a token,
// basic auth, a client certificate) besides httpSignature, or with key files and an exec
// plugin, is refused. Errors are *ConfigError when no plugin ran.
func NewForRESTConfig(cfg *rest.Config, opts Options) (Source, error) {
	if opts.HTTPSignature != nil {
		return newHTTPSignatureSource(cfg, opts.HTTPSignature, opts)
	}
	c, err := FromRESTConfig(cfg)
	if err != nil {
		return nil, err
	}
	return New(*c, opts)
}

// ConfigFor returns a copy of cfg in which src, not client-go's exec authenticator,
// authenticates requests: a Transport that wraps every transport client-go builds from
// the config (REST calls, watches, SPDY and WebSocket upgrades) adds the bearer token and
// refreshes it after a 401, sending the request once more when its body can be replayed
// (Transport.RetryAfterRefresh). If cfg has static credentials, they win and src is not used,
// as in client-go.
//
// A client-go config has no hook for a client certificate that changes (only client-go's
// own exec provider has one), so requests for which src returns a certificate fail with
// an error saying to use HTTPTransport; for the same reason connections are not tracked
// for certificate rotation.
func ConfigFor(cfg *rest.Config, src Source) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.ExecProvider = nil
	if HasStaticCredentials(cfg) {
		return c
	}
	c.Wrap(WrapTransport(src))
	return c
}

// HTTPTransport returns a round tripper for cfg that authenticates with src: a Transport
// over an http.Transport that presents the client certificate at each TLS handshake and
// whose connections are closed when it changes; after a 401 it refreshes the credential
// and sends a replayable request once more (Transport.RetryAfterRefresh). It honours cfg's TLS settings, proxy,
// dialer, impersonation and user agent. Static credentials in cfg win over src, as in
// client-go; a nil src sends cfg's own credentials only.
func HTTPTransport(cfg *rest.Config, src Source) (http.RoundTripper, error) {
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
		DialContext:       c.Dial,
	}
	if base.Proxy == nil {
		base.Proxy = http.ProxyFromEnvironment
	}
	var rt http.RoundTripper = base
	if src != nil && !HasStaticCredentials(cfg) {
		t := &Transport{Source: src, Base: base, RetryAfterRefresh: true}
		if base.TLSClientConfig == nil {
			// rest.TLSConfigFor has nothing to say for a server trusted through the system
			// roots, but the plugin's certificate must be presented all the same.
			base.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12}
		}
		if base.TLSClientConfig.GetClientCertificate == nil {
			base.TLSClientConfig.GetClientCertificate = t.GetClientCertificate
		}
		base.DialContext = t.DialContext(c.Dial)
		rt = t
	}
	return rest.HTTPWrappersForConfig(c, rt)
}
