package verifier

import (
	"fmt"
	"net/http"
	"strings"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kplug/kplug/internal/requestheader"
)

// ReaderUsername is the user a Proxy asserts, in its first username header and with its
// front-proxy client certificate, when it reads which identity headers kube-apiserver
// reads (the ConfigMap kube-system/extension-apiserver-authentication). Grant it that
// and nothing more: bind it to the built-in Role extension-apiserver-authentication-reader
// in kube-system (docs/signature-proxy-rbac.yaml).
const ReaderUsername = "kplug-signature-proxy"

// signatureProxy names the proxy in the messages of the request-header check.
var signatureProxy = requestheader.Proxy{Name: "kplug signature-proxy", Server: "kube-apiserver", Configurable: true}

// notChecked is the answer while the Proxy has not checked the names; it names no
// address.
const notChecked = "signature proxy: not forwarding until it has read which identity headers kube-apiserver reads from front proxies"

// newHeaderGate returns the gate that keeps the Proxy from forwarding until the names
// kube-apiserver publishes fit o.Headers (defaults applied). It asks Upstream's /readyz,
// as ReaderUsername through Transport, whether a refused reading comes from a
// kube-apiserver that is restarting.
func newHeaderGate(o ProxyOptions) (*requestheader.Gate, error) {
	base := o.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	hc := &http.Client{Transport: assertUser{base: base, header: o.Headers.Username[0]}}
	upstream := strings.TrimSuffix(o.Upstream.String(), "/")
	client := o.Client
	if client == nil {
		var err error
		if client, err = kubernetes.NewForConfigAndClient(&rest.Config{Host: upstream, UserAgent: "kplug-signature-proxy"}, hc); err != nil {
			return nil, fmt.Errorf("verifier: a client of %s: %w", o.Upstream, err)
		}
	}
	cm := requestheader.Namespace + "/" + requestheader.ConfigMapName
	return requestheader.NewGate(requestheader.GateOptions{
		Client: client, Names: requestheader.Names(o.Headers), Interval: o.RequestHeaderRefresh, Logger: o.Logger,
		Ready: requestheader.Readyz(hc, upstream), Proxy: signatureProxy, Refusal: notChecked,
		Forbidden: fmt.Sprintf("the user %s, which the proxy asserts in %s with its front-proxy client certificate, may not get ConfigMap %s: bind it to the Role extension-apiserver-authentication-reader in %s (docs/signature-proxy-rbac.yaml)",
			ReaderUsername, o.Headers.Username[0], cm, requestheader.Namespace),
		Unauthorized: fmt.Sprintf("kube-apiserver does not accept the proxy's front-proxy client certificate (--proxy-client-cert-file: its CA must be kube-apiserver's --requestheader-client-ca-file, its name in --requestheader-allowed-names), or does not read %s", o.Headers.Username[0]),
	}), nil
}

// assertUser names ReaderUsername in header on each request, which the front-proxy
// client certificate of base makes kube-apiserver believe.
type assertUser struct {
	base   http.RoundTripper
	header string
}

func (a assertUser) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set(a.header, ReaderUsername)
	return a.base.RoundTrip(r)
}
