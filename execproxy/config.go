package execproxy

import (
	"errors"
	"net/http"
	"net/url"
	"strings"

	"k8s.io/client-go/rest"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/kplug/kplug/execcred"
	"github.com/kplug/kplug/execproxy/server"
)

// SocketPath returns the socket of a proxy answer (unix:///path → /path).
func SocketPath(p *execcred.ProxyConfig) string { return strings.TrimPrefix(p.URL, "unix://") }

// ConfigFor returns a copy of cfg that sends everything through the exec proxy the
// credential describes: the API server's URL stays, TLS trusts the proxy's CA and presents
// the hop certificate. REST calls and watches dial the proxy's socket directly
// (rest.Config.Dial); SPDY and WebSocket upgrades, whose dialers honour only
// rest.Config.Proxy, go through the bridge.
func ConfigFor(cfg *rest.Config, cred *execcred.Credential, b *Bridge) (*rest.Config, error) {
	if cred.Proxy == nil {
		return nil, errors.New("exec proxy: the plugin's answer has no proxyConfig")
	}
	certPEM, keyPEM := cred.CertificatePEM()
	bridgeURL, err := url.Parse(b.URL)
	if err != nil {
		return nil, err
	}
	c := rest.AnonymousClientConfig(cfg) // no credentials of the API server's reach the proxy hop
	c.TLSClientConfig = rest.TLSClientConfig{
		ServerName: server.ServerName,
		CAData:     cred.Proxy.CertificateAuthorityData,
		CertData:   certPEM,
		KeyData:    keyPEM,
	}
	c.Dial = b.DialContext
	c.Proxy = func(req *http.Request) (*url.URL, error) {
		// client-go's SPDY and WebSocket dialers set the upgrade headers before they ask.
		if server.IsUpgrade(req) {
			return bridgeURL, nil
		}
		return nil, nil
	}
	return c, nil
}

// Kubeconfig returns a kubeconfig for unmodified clients (kubectl, helm) that reaches the
// API server at server through the bridge (proxy-url) and the exec proxy.
func Kubeconfig(serverURL string, cred *execcred.Credential, b *Bridge) *clientcmdapi.Config {
	certPEM, keyPEM := cred.CertificatePEM()
	cfg := clientcmdapi.NewConfig()
	cluster := clientcmdapi.NewCluster()
	cluster.Server = serverURL
	cluster.TLSServerName = server.ServerName
	cluster.CertificateAuthorityData = cred.Proxy.CertificateAuthorityData
	cluster.ProxyURL = b.URL
	cfg.Clusters["exec-proxy"] = cluster
	user := clientcmdapi.NewAuthInfo()
	user.ClientCertificateData, user.ClientKeyData = certPEM, keyPEM
	cfg.AuthInfos["exec-proxy"] = user
	ctx := clientcmdapi.NewContext()
	ctx.Cluster, ctx.AuthInfo = "exec-proxy", "exec-proxy"
	cfg.Contexts["exec-proxy"] = ctx
	cfg.CurrentContext = "exec-proxy"
	return cfg
}
