//go:build cgo

package bench

import (
	"crypto"
	"crypto/x509"
	"crypto/x509/pkix"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/kplug/kplug/internal/testkit/softhsm"
	"github.com/kplug/kplug/internal/testkit/testpki"
)

// pkcs11Key generates an ECDSA P-256 key on a fresh SoftHSM2 token and issues a
// certificate for it; it returns the certificate file and the key's URI.
func pkcs11Key(b *testing.B, ca *testpki.CA, dir string) (certFile, keyURI string, err error) {
	tok, err := softhsm.NewToken(filepath.Join(dir, "hsm"), "kplug-bench", "1234")
	if err != nil {
		return "", "", err
	}
	b.Setenv(softhsm.ConfEnv, tok.Conf)
	pub, err := tok.Generate("ecdsa-p256", "bench")
	if err != nil {
		return "", "", err
	}
	pin := filepath.Join(dir, "hsm", "pin")
	if err := os.WriteFile(pin, []byte(tok.PIN), 0o600); err != nil {
		return "", "", err
	}
	return issueClient(b, ca, "pkcs11", pub), tok.URI("bench", pin), nil
}

// issueClient writes a client certificate from ca for pub, a key held elsewhere (a
// PKCS#11 token), and returns its path.
func issueClient(b *testing.B, ca *testpki.CA, name string, pub crypto.PublicKey) string {
	tmpl := &x509.Certificate{Subject: pkix.Name{CommonName: name}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	path, err := ca.IssueFor(name, tmpl, pub, time.Now().Add(time.Hour))
	if err != nil {
		b.Fatal(err)
	}
	return path
}
