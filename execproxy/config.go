package execproxy

import (
	"errors"
	"net/http"
	"net/url"
	"strings"

	"k8s.io/client-go/rest"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/kplug/kplug/execcred"
	"github.com/kplug/kplug/execcred/wire"
	"github.com/kplug/kplug/internal/reverseproxy"
)

// SocketPath returns the socket of a proxy answer (unix:///path → /path).
func SocketPath(p *execcred.ProxyConfig) string { return strings.TrimPrefix(p.URL, "unix://") }

// configFor returns a copy of cfg that sends everything through the exec proxy the
// credential describes: the API server's URL stays, TLS trusts the proxy's CA and presents
// the hop certificate. REST calls and watches dial the proxy's socket directly
// (rest.Config.Dial); SPDY and WebSocket upgrades, whose dialers honour only
// rest.Config.Proxy, go through the bridge. cfg's credentials stay behind, but its
// impersonation (Impersonate-* headers) is kept: it says whom the requests act as, and the
// proxy passes it on to the API server.
func configFor(cfg *rest.Config, cred *execcred.Credential, b *Bridge) (*rest.Config, error) {
	if cred.Proxy == nil {
		return nil, errors.New("exec proxy: the plugin's answer has no proxyConfig")
	}
	certPEM, keyPEM := cred.CertificatePEM()
	c := rest.AnonymousClientConfig(cfg) // no credentials of the API server's reach the proxy hop
	c.Impersonate = cfg.Impersonate
	c.TLSClientConfig = rest.TLSClientConfig{
		ServerName: wire.ProxyServerName,
		CAData:     cred.Proxy.CertificateAuthorityData,
		CertData:   certPEM,
		KeyData:    keyPEM,
	}
	c.Dial = b.DialContext
	c.Proxy = func(req *http.Request) (*url.URL, error) {
		// client-go's SPDY and WebSocket dialers set the upgrade headers before they ask.
		if reverseproxy.IsUpgrade(req) {
			return b.ProxyURL(), nil
		}
		return nil, nil
	}
	return c, nil
}

// kubeconfigFor returns a kubeconfig for unmodified clients (kubectl, helm) that reaches the
// API server of cfg (its Host) through the bridge (proxy-url) and the exec proxy, with
// cfg's impersonation (as, as-uid, as-groups, as-user-extra). It holds the hop's private
// key and the bridge's secret: write it only where no other user can read it.
func kubeconfigFor(cfg *rest.Config, cred *execcred.Credential, b *Bridge) *clientcmdapi.Config {
	certPEM, keyPEM := cred.CertificatePEM()
	kc := clientcmdapi.NewConfig()
	cluster := clientcmdapi.NewCluster()
	cluster.Server = cfg.Host
	cluster.TLSServerName = wire.ProxyServerName
	cluster.CertificateAuthorityData = cred.Proxy.CertificateAuthorityData
	cluster.ProxyURL = b.ProxyURL().String()
	kc.Clusters["exec-proxy"] = cluster
	user := clientcmdapi.NewAuthInfo()
	user.ClientCertificateData, user.ClientKeyData = certPEM, keyPEM
	as := cfg.Impersonate
	user.Impersonate, user.ImpersonateUID, user.ImpersonateGroups = as.UserName, as.UID, as.Groups
	if len(as.Extra) > 0 {
		user.ImpersonateUserExtra = as.Extra
	}
	kc.AuthInfos["exec-proxy"] = user
	ctx := clientcmdapi.NewContext()
	ctx.Cluster, ctx.AuthInfo = "exec-proxy", "exec-proxy"
	kc.Contexts["exec-proxy"] = ctx
	kc.CurrentContext = "exec-proxy"
	return kc
}
