package framework

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// CA is a certificate authority generated for one control plane.
type CA struct {
	Cert    *x509.Certificate
	Key     crypto.Signer
	CertPEM []byte
	File    string // the certificate, PEM
}

// KeyPair is a certificate and its key, as PEM bytes and as files.
type KeyPair struct {
	CertPEM, KeyPEM   []byte
	CertFile, KeyFile string
}

// PKI is everything a control plane needs: the cluster CA (serving certificates, and the
// peer CA of the mixed version proxy), the client CA, the front-proxy CA with its proxy
// client certificate, and the service-account signing key.
type PKI struct {
	Dir           string
	ClusterCA     *CA
	ClientCA      *CA
	FrontProxyCA  *CA
	Serving       *KeyPair // for 127.0.0.1, ::1 and localhost; shared by all apiservers
	ProxyClient   *KeyPair // CN front-proxy-client, signed by FrontProxyCA
	ServiceAccKey string   // PEM private key file; the public half verifies tokens
}

// FrontProxyClientName is the CN of the proxy client certificate and the only name
// apiservers accept for request-header authentication.
const FrontProxyClientName = "front-proxy-client"

// newPKI generates all keys and certificates into dir (created 0700; keys 0600).
func newPKI(dir string) (*PKI, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	p := &PKI{Dir: dir}
	var err error
	if p.ClusterCA, err = p.newCA("cluster-ca", "kplug-e2e cluster CA"); err != nil {
		return nil, err
	}
	if p.ClientCA, err = p.newCA("client-ca", "kplug-e2e client CA"); err != nil {
		return nil, err
	}
	if p.FrontProxyCA, err = p.newCA("front-proxy-ca", "kplug-e2e front-proxy CA"); err != nil {
		return nil, err
	}
	p.Serving, err = p.Issue(p.ClusterCA, "serving", &x509.Certificate{
		Subject:     pkix.Name{CommonName: "kube-apiserver"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback, net.IPv4(10, 0, 0, 1)},
		DNSNames:    []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"},
	})
	if err != nil {
		return nil, err
	}
	if p.ProxyClient, err = p.IssueClient(p.FrontProxyCA, "front-proxy-client", FrontProxyClientName); err != nil {
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
func (p *PKI) NewCA(name, cn string) (*CA, error) { return p.newCA(name, cn) }

func (p *PKI) newCA(name, cn string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("creating %s: %w", cn, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	ca := &CA{Cert: cert, Key: key, CertPEM: pemBlock("CERTIFICATE", der), File: filepath.Join(p.Dir, name+".crt")}
	return ca, os.WriteFile(ca.File, ca.CertPEM, 0o600)
}

// IssueClient issues a client certificate for user with groups as organizations.
func (p *PKI) IssueClient(ca *CA, fileName, user string, groups ...string) (*KeyPair, error) {
	return p.Issue(ca, fileName, &x509.Certificate{
		Subject:     pkix.Name{CommonName: user, Organization: groups},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
}

// Issue signs tmpl (subject, usages and names) with ca for a new P-256 key and writes
// fileName.crt and fileName.key into the PKI directory.
func (p *PKI) Issue(ca *CA, fileName string, tmpl *x509.Certificate) (*KeyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	t := *tmpl
	t.SerialNumber = serial()
	t.NotBefore = time.Now().Add(-time.Hour)
	t.NotAfter = time.Now().Add(24 * time.Hour)
	t.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, &t, ca.Cert, key.Public(), ca.Key)
	if err != nil {
		return nil, fmt.Errorf("issuing %s: %w", fileName, err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	kp := &KeyPair{
		CertPEM:  pemBlock("CERTIFICATE", der),
		KeyPEM:   pemBlock("PRIVATE KEY", keyDER),
		CertFile: filepath.Join(p.Dir, fileName+".crt"),
		KeyFile:  filepath.Join(p.Dir, fileName+".key"),
	}
	if err := os.WriteFile(kp.CertFile, kp.CertPEM, 0o600); err != nil {
		return nil, err
	}
	return kp, os.WriteFile(kp.KeyFile, kp.KeyPEM, 0o600)
}

// IssueFor signs tmpl (subject, usages) with ca for pub, a key held elsewhere (e.g. on a
// hardware token), valid from an hour ago until notAfter, and writes fileName.crt into the
// PKI directory.
func (p *PKI) IssueFor(ca *CA, fileName string, tmpl *x509.Certificate, pub crypto.PublicKey, notAfter time.Time) (string, error) {
	t := *tmpl
	t.SerialNumber = serial()
	t.NotBefore = time.Now().Add(-time.Hour)
	t.NotAfter = notAfter
	t.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, &t, ca.Cert, pub, ca.Key)
	if err != nil {
		return "", fmt.Errorf("issuing %s: %w", fileName, err)
	}
	path := filepath.Join(p.Dir, fileName+".crt")
	return path, os.WriteFile(path, pemBlock("CERTIFICATE", der), 0o600)
}

// writeKey writes an EC key in SEC1 form, which kube-apiserver reads both as the signing
// key and, for --service-account-key-file, as the public key.
func writeKey(path string, key *ecdsa.PrivateKey) error {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	return os.WriteFile(path, pemBlock("EC PRIVATE KEY", der), 0o600)
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 126))
	if err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	return n
}
