package framework

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"net"
	"os"
	"path/filepath"

	"github.com/kplug/kplug/internal/testkit/testpki"
)

// CA is the test PKI's certificate authority (internal/testkit/testpki): certificates are issued
// with its methods and written into the PKI directory.
type CA = testpki.CA

// KeyPair is the test PKI's certificate and key, as PEM bytes and files.
type KeyPair = testpki.KeyPair

// PKI is everything a control plane needs: the cluster CA (serving certificates of the
// apiservers and kubelets, and the peer CA of the mixed version proxy), the client CA
// (users, nodes, and the apiservers' client certificate to kubelets), the front-proxy CA
// with its proxy client certificate, and the service-account signing key.
type PKI struct {
	Dir           string
	ClusterCA     *CA
	ClientCA      *CA
	FrontProxyCA  *CA
	Serving       *KeyPair // for 127.0.0.1, ::1 and localhost; shared by all apiservers
	ProxyClient   *KeyPair // CN front-proxy-client, signed by FrontProxyCA
	KubeletClient *KeyPair // CN kube-apiserver-kubelet-client, signed by ClientCA, which kubelets trust
	ServiceAccKey string   // PEM private key file; the public half verifies tokens
}

// FrontProxyClientName is the CN of the proxy client certificate and the only name
// apiservers accept for request-header authentication.
const FrontProxyClientName = "front-proxy-client"

// KubeletClientName is the CN of the apiservers' client certificate to kubelets.
const KubeletClientName = "kube-apiserver-kubelet-client"

// newPKI generates all keys and certificates into dir (created 0700; keys 0600). With
// oneCA, the cluster CA is the client CA too, as kubeadm's ca.crt.
func newPKI(dir string, oneCA bool) (*PKI, error) {
	p := &PKI{Dir: dir}
	var err error
	if p.ClusterCA, err = p.NewCA("cluster-ca", "kplug-e2e cluster CA"); err != nil {
		return nil, err
	}
	p.ClientCA = p.ClusterCA
	if !oneCA {
		if p.ClientCA, err = p.NewCA("client-ca", "kplug-e2e client CA"); err != nil {
			return nil, err
		}
	}
	if p.FrontProxyCA, err = p.NewCA("front-proxy-ca", "kplug-e2e front-proxy CA"); err != nil {
		return nil, err
	}
	p.Serving, err = p.ClusterCA.Issue("serving", &x509.Certificate{
		Subject:     pkix.Name{CommonName: "kube-apiserver"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback, net.IPv4(10, 0, 0, 1)},
		DNSNames:    []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"},
	})
	if err != nil {
		return nil, err
	}
	if p.ProxyClient, err = p.FrontProxyCA.IssueClient("front-proxy-client", FrontProxyClientName); err != nil {
		return nil, err
	}
	// No group: the kubelets of StartNode authorize every authenticated client, and the
	// apiservers, which trust ClientCA too, should not see an admin in it.
	if p.KubeletClient, err = p.ClientCA.IssueClient("kubelet-client", KubeletClientName); err != nil {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	p.ServiceAccKey = filepath.Join(dir, "service-account.key")
	return p, writeKey(p.ServiceAccKey, key)
}

// NewCA generates one more CA, written to name.crt in the PKI directory: for instance a
// dedicated peer CA for the mixed version proxy.
func (p *PKI) NewCA(name, cn string) (*CA, error) { return testpki.NewCA(p.Dir, name, cn) }

// writeKey writes an EC key in SEC1 form, which kube-apiserver reads both as the signing
// key and, for --service-account-key-file, as the public key.
func writeKey(path string, key *ecdsa.PrivateKey) error {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	return os.WriteFile(path, testpki.PEM("EC PRIVATE KEY", der), 0o600)
}
