package keys_test

import (
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kplug/kplug/internal/testkit/testpki"
	"github.com/kplug/kplug/keys"
)

// issued names the certificates issued, so that no two share a file in the CA's directory.
var issued atomic.Int64

// issue returns a PEM client certificate from ca for pub, valid from notBefore to notAfter.
func issue(t testing.TB, ca *testpki.CA, cn string, pub crypto.PublicKey, notBefore, notAfter time.Time) []byte {
	t.Helper()
	tmpl := &x509.Certificate{Subject: pkix.Name{CommonName: cn}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	path, err := ca.IssueForPeriod(fmt.Sprintf("%s-%d", cn, issued.Add(1)), tmpl, pub, notBefore, notAfter)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func issueNow(t testing.TB, ca *testpki.CA, cn string, pub crypto.PublicKey) []byte {
	t.Helper()
	return issue(t, ca, cn, pub, time.Now().Add(-time.Minute), time.Now().Add(time.Hour))
}

func keyPEM(t testing.TB, key crypto.Signer) []byte {
	t.Helper()
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return testpki.PEM("PRIVATE KEY", der)
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
	keys.Source
	n *atomic.Int64
}

func (c counting) Key(pub crypto.PublicKey) (crypto.Signer, error) {
	k, err := c.Source.Key(pub)
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
func mtlsServer(t testing.TB, ca *testpki.CA, maxVersion uint16, next <-chan string) *httptest.Server {
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
	srv.TLS = &tls.Config{ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: ca.Pool(), MaxVersion: maxVersion}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}

// mtlsClient authenticates with cc and opens a new connection for every request, with
// TLS session resumption if resume is set.
func mtlsClient(srv *httptest.Server, cc *keys.ClientCertificate, resume bool) *http.Client {
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

func filePair(t testing.TB, dir, name string, ca *testpki.CA, cn string, key crypto.Signer) (certFile, keyFile string) {
	t.Helper()
	certFile, keyFile = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	writeFile(t, keyFile, keyPEM(t, key))
	writeFile(t, certFile, issueNow(t, ca, cn, key.Public()))
	return certFile, keyFile
}

// send makes one request through c and returns the verifier's verdict.
func send(t *testing.T, c *http.Client, method, url string, body string, header http.Header) (string, error) {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, url, r)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := c.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return strings.TrimSpace(string(b)), nil
}
