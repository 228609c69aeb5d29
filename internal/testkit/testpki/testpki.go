// Package testpki is the one test PKI of kplug's tests and of the e2e framework: CAs and
// certificates generated on the spot (P-256 keys, valid from an hour ago for a day), as
// objects and as PEM files, for TLS servers, clients and peers.
package testpki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// CA is a certificate authority whose certificates and keys are written into Dir.
type CA struct {
	Cert    *x509.Certificate
	Key     crypto.Signer
	CertPEM []byte
	File    string // the CA certificate, PEM
	Dir     string
}

// KeyPair is a certificate and its key, as PEM bytes and as files.
type KeyPair struct {
	CertPEM, KeyPEM   []byte
	CertFile, KeyFile string
}

// NewCA generates a CA named cn and writes its certificate to dir/name.crt; dir is created
// 0700 if needed.
func NewCA(dir, name, cn string) (*CA, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
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
	ca := &CA{Cert: cert, Key: key, CertPEM: PEM("CERTIFICATE", der), File: filepath.Join(dir, name+".crt"), Dir: dir}
	return ca, os.WriteFile(ca.File, ca.CertPEM, 0o600)
}

// NewTestCA is NewCA in a temporary directory of t's, failing t on error.
func NewTestCA(t testing.TB, cn string) *CA {
	t.Helper()
	ca, err := NewCA(t.TempDir(), "ca", cn)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// Pool is a pool holding only the CA certificate.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// Issue signs tmpl (subject, usages and names) for a new P-256 key and writes name.crt and
// name.key into ca.Dir.
func (ca *CA) Issue(name string, tmpl *x509.Certificate) (*KeyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	der, err := ca.sign(name, tmpl, key.Public(), time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour))
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	kp := &KeyPair{
		CertPEM:  PEM("CERTIFICATE", der),
		KeyPEM:   PEM("PRIVATE KEY", keyDER),
		CertFile: filepath.Join(ca.Dir, name+".crt"),
		KeyFile:  filepath.Join(ca.Dir, name+".key"),
	}
	if err := os.WriteFile(kp.CertFile, kp.CertPEM, 0o600); err != nil {
		return nil, err
	}
	return kp, os.WriteFile(kp.KeyFile, kp.KeyPEM, 0o600)
}

// IssueClient issues a client certificate for user with groups as organizations.
func (ca *CA) IssueClient(name, user string, groups ...string) (*KeyPair, error) {
	return ca.Issue(name, &x509.Certificate{
		Subject:     pkix.Name{CommonName: user, Organization: groups},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
}

// IssueServing issues a serving certificate for hosts: IP addresses or DNS names.
func (ca *CA) IssueServing(name string, hosts ...string) (*KeyPair, error) {
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: name},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	return ca.Issue(name, tmpl)
}

// IssueFor signs tmpl (subject, usages) for pub, a key held elsewhere (e.g. on a hardware
// token), valid from an hour ago until notAfter, and writes name.crt into ca.Dir.
func (ca *CA) IssueFor(name string, tmpl *x509.Certificate, pub crypto.PublicKey, notAfter time.Time) (string, error) {
	return ca.IssueForPeriod(name, tmpl, pub, time.Now().Add(-time.Hour), notAfter)
}

// IssueForPeriod is IssueFor valid from notBefore: a certificate that is not valid yet,
// or already expired.
func (ca *CA) IssueForPeriod(name string, tmpl *x509.Certificate, pub crypto.PublicKey, notBefore, notAfter time.Time) (string, error) {
	der, err := ca.sign(name, tmpl, pub, notBefore, notAfter)
	if err != nil {
		return "", err
	}
	path := filepath.Join(ca.Dir, name+".crt")
	return path, os.WriteFile(path, PEM("CERTIFICATE", der), 0o600)
}

func (ca *CA) sign(name string, tmpl *x509.Certificate, pub crypto.PublicKey, notBefore, notAfter time.Time) ([]byte, error) {
	t := *tmpl
	t.SerialNumber = serial()
	t.NotBefore = notBefore
	t.NotAfter = notAfter
	t.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, &t, ca.Cert, pub, ca.Key)
	if err != nil {
		return nil, fmt.Errorf("issuing %s: %w", name, err)
	}
	return der, nil
}

// TLS is the pair as a tls.Certificate.
func (kp *KeyPair) TLS() (tls.Certificate, error) { return tls.X509KeyPair(kp.CertPEM, kp.KeyPEM) }

// MustTLS is TLS, failing t on error.
func (kp *KeyPair) MustTLS(t testing.TB) tls.Certificate {
	t.Helper()
	c, err := kp.TLS()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// PEM encodes der as a PEM block of type typ.
func PEM(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 126))
	if err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	return n
}
