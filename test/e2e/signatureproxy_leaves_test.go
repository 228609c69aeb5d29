package e2e

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"io"
	"math/big"
	"net/http"
	"net/url"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/kplug/kplug/httpsig"
)

// anonymousLeavesRSSBound is what anonymous clients' certificates may add to the
// proxy's resident memory once they are refused: the bound of unauthenticated bodies.
const anonymousLeavesRSSBound = unauthenticatedBodiesRSSBound

// TestSecuritySignatureProxyMemoryUnderAnonymousCertificates (issue 33 review 2, C1):
// the certificate path of issue 33 remembers each leaf it parses, by the bytes of
// Signature-Certificate, before anything says who issued it. Anonymous clients send
// 4,096 requests, each signed under a self-made certificate of its own, far from
// expiring and as large as the proxy accepts (12 KiB of DER, most of it URI names, which
// Go parses into a url.URL each). Every one is refused 401; the proxy must not keep
// them: its resident memory stays within anonymousLeavesRSSBound of what it was, and a
// real signer is still served.
func TestSecuritySignatureProxyMemoryUnderAnonymousCertificates(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads the proxy's memory from /proc")
	}
	m := startMemoryTarget(t)
	addr, roots, signed := m.addr, m.roots, m.signed
	before := rss(t, m.pid)

	forgedKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	// "a:b" URIs: 5 bytes of DER each, a url.URL each once parsed.
	var names []*url.URL
	for range 2300 {
		names = append(names, &url.URL{Scheme: "a", Opaque: "b"})
	}
	const certificates, clients = 4096, 8
	work := make(chan int)
	var wg sync.WaitGroup
	var mu sync.Mutex
	codes := map[int]int{}
	for range clients {
		wg.Go(func() {
			tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}}
			defer tr.CloseIdleConnections()
			for i := range work {
				tmpl := &x509.Certificate{SerialNumber: big.NewInt(int64(i) + 1000), Subject: pkix.Name{CommonName: "mallory"},
					NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().AddDate(50, 0, 0), URIs: names}
				der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, forgedKey.Public(), forgedKey)
				if err != nil {
					t.Error(err)
					return
				}
				leaf, err := x509.ParseCertificate(der)
				if err != nil {
					t.Error(err)
					return
				}
				signer, err := httpsig.NewSigner(httpsig.SignerOptions{Key: httpsig.Key{Signer: forgedKey, Certificate: leaf},
					Headers: map[string]string{httpsig.AudienceHeader: signatureAudience}})
				if err != nil {
					t.Error(err)
					return
				}
				req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, "https://"+addr+"/api/v1/namespaces/default/configmaps", nil)
				req.Header.Set("User-Agent", "mallory")
				if err := signer.Sign(req); err != nil {
					t.Error(err)
					return
				}
				resp, err := tr.RoundTrip(req)
				if err != nil {
					t.Error(err)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
				mu.Lock()
				codes[resp.StatusCode]++
				mu.Unlock()
			}
		})
	}
	for i := range certificates {
		work <- i
	}
	close(work)
	wg.Wait()
	if codes[http.StatusUnauthorized] != certificates {
		t.Errorf("answers to the anonymous certificates: %v; want %d 401s", codes, certificates)
	}
	time.Sleep(5 * time.Second) // the proxy's garbage collector runs meanwhile
	after := rss(t, m.pid)
	signed()
	t.Logf("signature-proxy RSS %d MiB before, %d MiB after %d refused anonymous certificates (bound: +%d MiB)", before>>20, after>>20, certificates, anonymousLeavesRSSBound>>20)
	if after-before > anonymousLeavesRSSBound {
		t.Errorf("the proxy's RSS grew by %d MiB and stays so after %d refused anonymous certificates, more than the %d MiB bound", (after-before)>>20, certificates, anonymousLeavesRSSBound>>20)
	}
}
