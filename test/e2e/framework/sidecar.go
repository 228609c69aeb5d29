package framework

import (
	"context"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"path/filepath"

	"github.com/kplug/kplug/mvproxy"
)

// LeaseNamespace is the namespace docs/peerproxy-rbac.yaml gives the sidecars.
const LeaseNamespace = "kplug-peerproxy"

// Sidecars is what the `kplug peerproxy` sidecars of one control plane share in the
// secure setup docs/mixed-version-proxy.md documents: a peer CA of their own, and the
// kubeconfig of the user docs/peerproxy-rbac.yaml grants Leases in LeaseNamespace.
type Sidecars struct {
	PeerCA     *CA
	Kubeconfig string
}

// Sidecars makes, at the first call, the peer CA and the sidecars' user kplug-peerproxy
// (a client certificate), and applies docs/peerproxy-rbac.yaml as the admin; later calls
// return the same.
func (cp *ControlPlane) Sidecars(ctx context.Context) (*Sidecars, error) {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	if cp.sidecars != nil {
		return cp.sidecars, nil
	}
	ca, err := cp.PKI.NewCA("peer-ca", "kplug-e2e peer CA")
	if err != nil {
		return nil, err
	}
	user, err := cp.PKI.ClientCA.IssueClient("kplug-peerproxy", "kplug-peerproxy")
	if err != nil {
		return nil, err
	}
	s := &Sidecars{PeerCA: ca, Kubeconfig: filepath.Join(cp.Dir, "kplug-peerproxy.kubeconfig")}
	if err := writeKubeconfig(s.Kubeconfig, cp.Servers[0].URL, cp.PKI.ClusterCA.CertPEM, &User{Name: "kplug-peerproxy", Cert: user}); err != nil {
		return nil, err
	}
	root, err := moduleRoot()
	if err != nil {
		return nil, err
	}
	rbac := filepath.Join(root, "docs", "peerproxy-rbac.yaml")
	if out, err := cp.Kubectl(ctx, cp.Admin, "apply", "-f", rbac).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("kubectl apply -f %s: %w\n%s", rbac, err, out)
	}
	cp.sidecars = s
	return s, nil
}

// PeerFlags issues a certificate from the peer CA for the peer server name to the
// sidecar of server i, and returns the flags that present it to peers and verify peers
// with the peer CA.
func (s *Sidecars) PeerFlags(cp *ControlPlane, i int) ([]string, error) {
	name := cp.Servers[i].Name
	cert, err := s.PeerCA.Issue("peer-"+name, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "kplug-peerproxy-" + name},
		DNSNames:    []string{mvproxy.DefaultPeerServerName},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
	if err != nil {
		return nil, err
	}
	return []string{"--peer-ca-file=" + s.PeerCA.File, "--peer-tls-cert-file=" + cert.CertFile, "--peer-tls-private-key-file=" + cert.KeyFile}, nil
}

// PeerproxyArgs returns the arguments of `kplug peerproxy` beside apiserver i (after the
// program name): listening on listen, metrics on metricsAddr, its id kplug-peerproxy-<name>,
// the control plane's serving, client, front-proxy and proxy client certificates, short
// refresh periods for tests, and then peerFlags (Sidecars.PeerFlags). Flags appended later
// override these.
func (s *Sidecars) PeerproxyArgs(cp *ControlPlane, i int, listen, metricsAddr string, peerFlags ...string) []string {
	p := cp.PKI
	return append([]string{"peerproxy", "-v=4",
		"--kubeconfig=" + s.Kubeconfig, "--apiserver=" + cp.Servers[i].URL, "--lease-namespace=" + LeaseNamespace,
		"--listen-address=" + listen, "--id=kplug-peerproxy-" + cp.Servers[i].Name,
		"--tls-cert-file=" + p.Serving.CertFile, "--tls-private-key-file=" + p.Serving.KeyFile,
		"--client-ca-file=" + p.ClientCA.File,
		"--requestheader-client-ca-file=" + p.FrontProxyCA.File, "--requestheader-allowed-names=" + FrontProxyClientName,
		"--proxy-client-cert-file=" + p.ProxyClient.CertFile, "--proxy-client-key-file=" + p.ProxyClient.KeyFile,
		"--local-refresh=2s", "--peer-refresh=3s", "--peer-timeout=3s", "--metrics-addr=" + metricsAddr,
	}, peerFlags...)
}
