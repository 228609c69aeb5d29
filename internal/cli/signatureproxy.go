package cli

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
	"golang.org/x/net/http/httpguts"

	"github.com/kplug/kplug/httpsig"
	"github.com/kplug/kplug/httpsig/verifier"
	"github.com/kplug/kplug/mvproxy/sidecar"
)

type signatureProxyOptions struct {
	config, upstream, upstreamCA string
	proxyCert, proxyKey          string
	tlsCert, tlsKey              string
	listen, metricsAddr          string
	maxConnections               int
	maxHeaderBytes               int
	bodyBudget                   int64
	bodyReadTimeout              time.Duration
	// requestHeaders are kube-apiserver's --requestheader-* names.
	usernameHeaders, groupHeaders, uidHeaders, extraPrefixes []string
}

func (o *signatureProxyOptions) AddFlags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&o.config, "authentication-config", "", "AuthenticationConfiguration file whose httpSignature section configures verification (as kube-apiserver's flag of that name); reloaded when it changes (required)")
	f.StringVar(&o.upstream, "apiserver", "", "URL of the kube-apiserver to forward authenticated requests to (required)")
	f.StringVar(&o.upstreamCA, "apiserver-ca-file", "", "CA that the kube-apiserver's serving certificate must verify against, PEM (required)")
	f.StringVar(&o.proxyCert, "proxy-client-cert-file", "", "front-proxy client certificate presented to the kube-apiserver, signed by the CA of its --requestheader-client-ca-file (required)")
	f.StringVar(&o.proxyKey, "proxy-client-key-file", "", "key of --proxy-client-cert-file (required)")
	f.StringVar(&o.tlsCert, "tls-cert-file", "", "serving certificate for clients, PEM; reloaded when it changes (required)")
	f.StringVar(&o.tlsKey, "tls-private-key-file", "", "serving key, PEM (required)")
	f.StringVar(&o.listen, "listen-address", "127.0.0.1:6445", "host:port to serve clients on (TLS)")
	f.StringVar(&o.metricsAddr, "metrics-addr", "", "host:port to serve Prometheus metrics on at /metrics; empty disables")
	f.IntVar(&o.maxConnections, "max-connections", verifier.DefaultMaxConnections, "client connections open at once; a quarter may be unauthenticated (the oldest of the busiest host gives way to a new one) and a quarter one user's")
	f.IntVar(&o.maxHeaderBytes, "max-request-header-bytes", verifier.DefaultMaxHeaderBytes, "bytes of a request's header (HTTP/1.1 request line and fields, HTTP/2 header list); a signed request needs a few KiB, and each Impersonate-Group value a line")
	f.Int64Var(&o.bodyBudget, "max-buffered-body-bytes", verifier.DefaultBodyBudget, "bytes of request bodies held at once across requests, a quarter of it at most for one user (a body is buffered to check its digest once its signer is authenticated, and released once forwarded); a request over it gets 429 with Retry-After")
	f.DurationVar(&o.bodyReadTimeout, "body-read-timeout", verifier.DefaultBodyReadTimeout, "time a client has from its request's headers to the end of its body")
	d := verifier.DefaultRequestHeaders
	const rh = " (as kube-apiserver's flag of that name): the first is set, all are removed from clients' requests; kube-apiserver must publish no other"
	f.StringSliceVar(&o.usernameHeaders, "requestheader-username-headers", d.Username, "identity headers of the user"+rh)
	f.StringSliceVar(&o.groupHeaders, "requestheader-group-headers", d.Group, "identity headers of the groups"+rh)
	f.StringSliceVar(&o.uidHeaders, "requestheader-uid-headers", d.UID, "identity headers of the UID"+rh)
	f.StringSliceVar(&o.extraPrefixes, "requestheader-extra-headers-prefix", d.ExtraPrefix, "prefixes of the identity headers of extra values"+rh)
	// The names from before both servers took kube-apiserver's (issue 32).
	for _, a := range [][2]string{
		{"upstream", "apiserver"}, {"upstream-ca", "apiserver-ca-file"},
		{"proxy-client-cert", "proxy-client-cert-file"}, {"proxy-client-key", "proxy-client-key-file"},
		{"listen", "listen-address"},
	} {
		deprecatedAlias(cmd, a[0], a[1])
	}
}

func newSignatureProxyCommand(g *globals) *cobra.Command {
	o := &signatureProxyOptions{}
	cmd := &cobra.Command{
		Use:   "signature-proxy",
		Short: "Front proxy that verifies KEP-6308 HTTP message signatures for a kube-apiserver without the feature",
		Long: `signature-proxy serves clients in front of a kube-apiserver. It verifies each request's
HTTP message signature (KEP-6308) as the httpSignature section of --authentication-config
says (x509 and resolver authenticators), and forwards the request with the mapped user in the
requestheader identity headers, presenting --proxy-client-cert-file. Identity headers
(--requestheader-*), Authorization and Proxy-Authorization sent by clients are removed.
It forwards nothing until it has read which identity headers kube-apiserver reads from
front proxies (ConfigMap kube-system/extension-apiserver-authentication, read as the user
kplug-signature-proxy, which it asserts with --proxy-client-cert-file: bind that user to the
Role extension-apiserver-authentication-reader in kube-system) and found them all among
--requestheader-*; until then it answers 503, and it exits on a name it does not remove.
Unsigned or refused requests are answered 401, and requests a resolver cannot answer for
503 with Retry-After. What reaches kube-apiserver is what was
verified: a Connection header naming anything but close, keep-alive and upgrade, an
Impersonate-* value with a comma (or a second Impersonate-User or -Uid line), declared
trailers, or a signed field that forwarding would drop or rewrite, is answered 400.
X-Forwarded-For is set to the client's address; X-Real-Ip and Forwarded from clients are
removed. A body is read only once its request's certificate and signature have verified,
within --body-read-timeout and --max-buffered-body-bytes across requests.`,
		Example: `  kplug signature-proxy --authentication-config /etc/kplug/authn.yaml \
    --apiserver https://10.0.0.11:6443 --apiserver-ca-file /etc/kubernetes/pki/ca.crt \
    --proxy-client-cert-file /etc/kubernetes/pki/front-proxy-client.crt --proxy-client-key-file /etc/kubernetes/pki/front-proxy-client.key \
    --tls-cert-file /etc/kplug/serving.crt --tls-private-key-file /etc/kplug/serving.key --listen-address 0.0.0.0:6445`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error { return o.run(cmd.Context(), g) },
	}
	o.AddFlags(cmd)
	return cmd
}

func (o *signatureProxyOptions) run(ctx context.Context, g *globals) error {
	reg := prometheus.NewRegistry()
	metrics, err := verifier.NewMetrics(reg)
	if err != nil {
		return err
	}
	opts, err := o.proxyOptions(g)
	if err != nil {
		return invalidConfig(err)
	}
	opts.Metrics = metrics
	p, err := verifier.NewProxy(opts)
	if err != nil {
		return invalidConfig(err)
	}
	return serveWithMetrics(ctx, g, o.metricsAddr, reg, p.Serve)
}

// proxyOptions reads and checks every file and flag.
func (o *signatureProxyOptions) proxyOptions(g *globals) (verifier.ProxyOptions, error) {
	var errs []error
	for _, f := range []struct{ v, flag string }{
		{o.config, "authentication-config"}, {o.upstream, "apiserver"}, {o.upstreamCA, "apiserver-ca-file"},
		{o.proxyCert, "proxy-client-cert-file"}, {o.proxyKey, "proxy-client-key-file"},
		{o.tlsCert, "tls-cert-file"}, {o.tlsKey, "tls-private-key-file"},
	} {
		if f.v == "" {
			errs = append(errs, fmt.Errorf("--%s is required", f.flag))
		}
	}
	if o.maxConnections <= 0 {
		errs = append(errs, fmt.Errorf("--max-connections %d: must be positive", o.maxConnections))
	}
	if o.maxHeaderBytes < 4<<10 {
		errs = append(errs, fmt.Errorf("--max-request-header-bytes %d: must be at least 4096", o.maxHeaderBytes))
	}
	if o.bodyBudget <= httpsig.MaxBodyBytes {
		errs = append(errs, fmt.Errorf("--max-buffered-body-bytes %d: must be more than %d, kube-apiserver's largest request body", o.bodyBudget, httpsig.MaxBodyBytes))
	}
	if o.bodyReadTimeout <= 0 {
		errs = append(errs, fmt.Errorf("--body-read-timeout %s: must be positive", o.bodyReadTimeout))
	}
	errs = append(errs, o.checkRequestHeaders()...)
	if err := errors.Join(errs...); err != nil {
		return verifier.ProxyOptions{}, err
	}
	upstream, err := url.Parse(o.upstream)
	if err != nil || upstream.Scheme != "https" || upstream.Host == "" {
		errs = append(errs, fmt.Errorf("--apiserver %q: want an https:// URL", o.upstream))
	}
	roots, err := loadPool(o.upstreamCA, "apiserver-ca-file")
	errs = append(errs, err)
	serving, err := sidecar.CertificateFiles(o.tlsCert, o.tlsKey, g.log)
	if err != nil {
		errs = append(errs, fmt.Errorf("--tls-cert-file/--tls-private-key-file: %w", err))
	}
	proxyCert, err := sidecar.CertificateFiles(o.proxyCert, o.proxyKey, g.log)
	if err != nil {
		errs = append(errs, fmt.Errorf("--proxy-client-cert-file/--proxy-client-key-file: %w", err))
	}
	if err := errors.Join(errs...); err != nil {
		return verifier.ProxyOptions{}, err
	}
	return verifier.ProxyOptions{
		ConfigFile:            o.config,
		Upstream:              upstream,
		Transport:             verifier.UpstreamTransport(roots, proxyCert),
		GetServingCertificate: serving,
		ListenAddress:         o.listen,
		Logger:                g.log,
		MaxConnections:        o.maxConnections,
		MaxHeaderBytes:        o.maxHeaderBytes,
		BodyBudget:            o.bodyBudget,
		BodyReadTimeout:       o.bodyReadTimeout,
		Headers:               verifier.RequestHeaders{Username: o.usernameHeaders, Group: o.groupHeaders, UID: o.uidHeaders, ExtraPrefix: o.extraPrefixes},
	}, nil
}

// checkRequestHeaders checks the --requestheader-* names: header names, and at least one
// for the user.
func (o *signatureProxyOptions) checkRequestHeaders() []error {
	var errs []error
	if len(o.usernameHeaders) == 0 {
		errs = append(errs, errors.New("--requestheader-username-headers is empty: the proxy needs a header to name the user in"))
	}
	for _, f := range []struct {
		flag  string
		names []string
	}{
		{"requestheader-username-headers", o.usernameHeaders}, {"requestheader-group-headers", o.groupHeaders},
		{"requestheader-uid-headers", o.uidHeaders}, {"requestheader-extra-headers-prefix", o.extraPrefixes},
	} {
		for _, n := range f.names {
			if !httpguts.ValidHeaderFieldName(n) {
				errs = append(errs, fmt.Errorf("--%s %q: not a header name", f.flag, n))
			}
		}
	}
	return errs
}
