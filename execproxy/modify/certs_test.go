package modify_test

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
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kplug/kplug/execproxy/modify"
)

// testCA issues client certificates for the TLS servers of these tests.
type testCA struct {
	cert *x509.Certificate
	key  crypto.Signer
	pool *x509.CertPool
}

func newTestCA(t testing.TB) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test client CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true, IsCA: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &testCA{cert: cert, key: key, pool: pool}
}

var serials atomic.Int64

// issue returns a PEM client certificate for pub, valid from notBefore to notAfter.
func (ca *testCA) issue(t testing.TB, cn string, pub crypto.PublicKey, notBefore, notAfter time.Time) []byte {
	t.Helper()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serials.Add(1) + 1), Subject: pkix.Name{CommonName: cn},
		NotBefore: notBefore, NotAfter: notAfter,
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, pub, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func (ca *testCA) issueNow(t testing.TB, cn string, pub crypto.PublicKey) []byte {
	return ca.issue(t, cn, pub, time.Now().Add(-time.Minute), time.Now().Add(time.Hour))
}

func keyPEM(t testing.TB, key crypto.Signer) []byte {
	t.Helper()
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
}

// writeFile replaces path atomically, as certificate managers do.
func writeFile(t testing.TB, path string, b []byte) {
	t.Helper()
	tmp := path + ".new"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// counting counts the signatures its keys make: each is a private-key operation that a
// hardware token would perform.
type counting struct {
	modify.KeySource
	n *atomic.Int64
}

func (c counting) Key(pub crypto.PublicKey) (crypto.Signer, error) {
	k, err := c.KeySource.Key(pub)
	if err != nil {
		return nil, err
	}
	return countingSigner{k, c.n}, nil
}

type countingSigner struct {
	crypto.Signer
	n *atomic.Int64
}

func (s countingSigner) Sign(r io.Reader, digest []byte, opts crypto.SignerOpts) ([]byte, error) {
	s.n.Add(1)
	return s.Signer.Sign(r, digest, opts)
}

// mtlsServer requires a client certificate from ca and answers with its common name and
// whether the TLS session was resumed. /stream sends a line, then one more for each
// value on next, until the client goes away.
func mtlsServer(t testing.TB, ca *testCA, maxVersion uint16, next <-chan string) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cn := r.TLS.PeerCertificates[0].Subject.CommonName
		if r.URL.Path == "/stream" {
			fmt.Fprintf(w, "%s\n", cn)
			_ = http.NewResponseController(w).Flush()
			for {
				select {
				case s := <-next:
					fmt.Fprintf(w, "%s\n", s)
					_ = http.NewResponseController(w).Flush()
				case <-r.Context().Done():
					return
				}
			}
		}
		fmt.Fprintf(w, "%s resumed=%v", cn, r.TLS.DidResume)
	}))
	srv.TLS = &tls.Config{ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: ca.pool, MaxVersion: maxVersion}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}

// mtlsClient authenticates with cc and opens a new connection for every request, with
// TLS session resumption if resume is set.
func mtlsClient(srv *httptest.Server, cc *modify.ClientCertificate, resume bool) *http.Client {
	cfg := &tls.Config{RootCAs: x509.NewCertPool(), GetClientCertificate: cc.GetClientCertificate}
	cfg.RootCAs.AddCert(srv.Certificate())
	if resume {
		cfg.ClientSessionCache = cc.ClientSessionCache()
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: cfg, DisableKeepAlives: true}}
}

func getBody(t testing.TB, c *http.Client, url string) string {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func filePair(t testing.TB, dir, name string, ca *testCA, cn string, key crypto.Signer) (certFile, keyFile string) {
	t.Helper()
	certFile, keyFile = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	writeFile(t, keyFile, keyPEM(t, key))
	writeFile(t, certFile, ca.issueNow(t, cn, key.Public()))
	return certFile, keyFile
}
