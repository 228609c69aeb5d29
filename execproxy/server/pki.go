package server

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"path/filepath"
	"time"

	"github.com/kplug/kplug/execcred/wire"
	"github.com/kplug/kplug/internal/privdir"
)

// identity is the proxy's trust material: an ephemeral CA, the serving certificate it
// issued, and the client certificate handed to the client for the hop to the proxy.
type identity struct {
	CAPEM      []byte `json:"ca"`
	ServerCert []byte `json:"serverCert"`
	ServerKey  []byte `json:"serverKey"`
	ClientCert []byte `json:"clientCert"`
	ClientKey  []byte `json:"clientKey"`
}

// maxIdentity bounds the identity file read back (it holds about 3 KiB).
const maxIdentity = 64 << 10

// loadOrCreateIdentity reuses the identity in path, so that a proxy restarted for the
// same client keeps the CA and client certificate the client already trusts, or creates
// one and stores it there (0600). An empty path means a fresh identity, not stored.
// path's directory is checked first (this user's, not writable by others), and path is
// read and written only as a regular file, never through a link.
func loadOrCreateIdentity(path string) (*identity, error) {
	if path != "" {
		if err := privdir.Verify(filepath.Dir(path)); err != nil {
			return nil, fmt.Errorf("exec proxy: identity file %s: %w; keep it (and the client's lock file) in a directory of your own that other users cannot write to", path, err)
		}
		b, err := privdir.ReadFile(path, maxIdentity)
		switch {
		case err == nil:
			var id identity
			if json.Unmarshal(b, &id) == nil && id.valid() {
				return &id, nil
			}
		case !errors.Is(err, fs.ErrNotExist):
			return nil, fmt.Errorf("exec proxy: reading the identity file: %w", err)
		}
	}
	id, err := newIdentity()
	if err != nil {
		return nil, err
	}
	if path != "" {
		if err := id.store(path); err != nil {
			return nil, fmt.Errorf("exec proxy: storing the identity: %w", err)
		}
	}
	return id, nil
}

// store writes id to path (0600), replacing a regular file left there before.
func (id *identity) store(path string) error {
	b, err := json.Marshal(id) //nolint:gosec // stored 0600 for this user's own proxy, by design
	if err != nil {
		return err
	}
	f, err := privdir.Replace(path)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	return errors.Join(err, f.Close())
}

func (id *identity) valid() bool {
	_, err1 := tls.X509KeyPair(id.ServerCert, id.ServerKey)
	c, err2 := tls.X509KeyPair(id.ClientCert, id.ClientKey)
	return err1 == nil && err2 == nil && c.Leaf != nil && time.Now().Before(c.Leaf.NotAfter.Add(-time.Hour))
}

func newIdentity() (*identity, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: "kplug exec proxy CA"},
		NotBefore: now.Add(-time.Minute), NotAfter: now.Add(30 * 24 * time.Hour),
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature, BasicConstraintsValid: true, IsCA: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, caKey.Public(), caKey)
	if err != nil {
		return nil, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	issue := func(cn string, usage x509.ExtKeyUsage, dns []string) (certPEM, keyPEM []byte, err error) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, nil, err
		}
		tmpl := &x509.Certificate{
			SerialNumber: serial(), Subject: pkix.Name{CommonName: cn}, DNSNames: dns,
			NotBefore: now.Add(-time.Minute), NotAfter: ca.NotAfter,
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, key.Public(), caKey)
		if err != nil {
			return nil, nil, err
		}
		kder, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			return nil, nil, err
		}
		return pemBlock("CERTIFICATE", der), pemBlock("EC PRIVATE KEY", kder), nil
	}
	id := &identity{CAPEM: pemBlock("CERTIFICATE", caDER)}
	if id.ServerCert, id.ServerKey, err = issue(wire.ProxyServerName, x509.ExtKeyUsageServerAuth, []string{wire.ProxyServerName}); err != nil {
		return nil, err
	}
	if id.ClientCert, id.ClientKey, err = issue("kplug exec proxy client", x509.ExtKeyUsageClientAuth, nil); err != nil {
		return nil, err
	}
	return id, nil
}

// tlsConfig serves the proxy's certificate and accepts only client certificates its CA issued.
func (id *identity) tlsConfig() (*tls.Config, error) {
	cert, err := tls.X509KeyPair(id.ServerCert, id.ServerKey)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(id.CAPEM) {
		return nil, errors.New("exec proxy: bad CA certificate")
	}
	return &tls.Config{
		Certificates: []tls.Certificate{cert},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    pool,
		MinVersion:   tls.VersionTLS12,
		NextProtos:   []string{"http/1.1"},
	}, nil
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
