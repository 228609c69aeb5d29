package bench

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/smithy-go/aws-http-auth/credentials"
	"k8s.io/client-go/rest"

	"github.com/kplug/kplug/execproxy/server"
	"github.com/kplug/kplug/execproxy/sigv4"
	"github.com/kplug/kplug/internal/testkit/testpki"
	"github.com/kplug/kplug/keys"
)

// The use-case benchmarks measure what each exec proxy use case costs per request: no
// modifier, SigV4, RFC 9421 in the KEP-6308 profile (httpsig), and a TLS client key in a
// file, on a PKCS#11 token and in a TPM, the last three over pooled connections and over a
// new upstream connection per request, with and without TLS session resumption.

// mtlsUpstream accepts client certificates from ca. With closeEach, it speaks HTTP/1.1 and
// closes every connection after one response, so that each request needs a new TLS
// connection to the upstream; otherwise connections are pooled over HTTP/2.
func mtlsUpstream(b testing.TB, ca *testpki.CA, closeEach bool) *rest.Config {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if closeEach {
			w.Header().Set("Connection", "close")
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"1"},"items":[]}`)
	}))
	srv.TLS = &tls.Config{ClientAuth: tls.VerifyClientCertIfGiven, ClientCAs: ca.Pool()}
	srv.EnableHTTP2 = !closeEach
	srv.StartTLS()
	b.Cleanup(srv.Close)
	return &rest.Config{Host: srv.URL, TLSClientConfig: rest.TLSClientConfig{
		CAData: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}),
	}}
}

// countingKeys counts the private-key operations (token signatures) of the keys it finds.
type countingKeys struct {
	keys.Source
	n *atomic.Int64
}

func (c countingKeys) Key(pub crypto.PublicKey) (crypto.Signer, error) {
	k, err := c.Source.Key(pub)
	return countingSigner{k, c.n}, err
}

type countingSigner struct {
	crypto.Signer
	n *atomic.Int64
}

func (s countingSigner) Sign(r io.Reader, d []byte, o crypto.SignerOpts) ([]byte, error) {
	s.n.Add(1)
	return s.Signer.Sign(r, d, o)
}

// withClientKey sets the proxy's upstream client certificate, with the key keyURI names,
// open until b ends; signs counts the key's signatures. With resume, the proxy keeps TLS
// sessions (ClientCertificate.ClientSessionCache) and resumes them on new connections.
func withClientKey(b testing.TB, certFile, keyURI string, resume bool, signs *atomic.Int64) func(*server.Options) {
	ks, err := keys.Open(keyURI, keys.Options{})
	if err != nil {
		b.Fatal(err)
	}
	cc, err := keys.NewClientCertificate(keys.ClientCertOptions{CertFile: certFile, Key: countingKeys{ks, signs}})
	if err != nil {
		_ = ks.Close()
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = cc.Close() })
	return func(o *server.Options) {
		o.GetClientCertificate = cc.GetClientCertificate
		if resume {
			o.ClientSessionCache = cc.ClientSessionCache()
		}
	}
}

// issueClient writes a client certificate from ca for pub, a key held elsewhere (a
// PKCS#11 token, a TPM), and returns its path.
func issueClient(b testing.TB, ca *testpki.CA, name string, pub crypto.PublicKey) string {
	tmpl := &x509.Certificate{Subject: pkix.Name{CommonName: name}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	path, err := ca.IssueFor(name, tmpl, pub, time.Now().Add(time.Hour))
	if err != nil {
		b.Fatal(err)
	}
	return path
}

// tpmClientKey creates an ECDSA P-256 key in a software TPM and issues a certificate for
// it; it returns the certificate file and the key's tpm: URI.
func tpmClientKey(b *testing.B, ca *testpki.CA) (certFile, keyURI string, err error) {
	uris, err := tpmKeys(b, "ecc256")
	if err != nil {
		return "", "", err
	}
	s, c, err := keys.OpenSigner(uris[0], keys.Options{})
	if err != nil {
		return "", "", err
	}
	defer c.Close()
	return issueClient(b, ca, "tpm", s.Public()), uris[0], nil
}

// keyCases are the three ways a client key meets the upstream, for the key keyURI names:
// over a pooled connection, and over a new connection per request with a full handshake
// or a resumed session.
func keyCases(name string, pooled, closing *rest.Config, certFile, keyURI string) []useCase {
	withKey := func(resume bool) func(*testing.B, *atomic.Int64) func(*server.Options) {
		return func(b *testing.B, n *atomic.Int64) func(*server.Options) {
			return withClientKey(b, certFile, keyURI, resume, n)
		}
	}
	return []useCase{
		{name + "/pooled", pooled, withKey(true)},
		{name + "/new-conn-full-handshake", closing, withKey(false)},
		{name + "/new-conn-resumed", closing, withKey(true)},
	}
}

// useCase is one row: the upstream, and the proxy options for a run of b, whose client key
// (if any) counts its signatures in signs.
type useCase struct {
	name     string
	upstream *rest.Config
	options  func(b *testing.B, signs *atomic.Int64) func(*server.Options)
}

func BenchmarkExecProxyUseCases(b *testing.B) {
	ca := testpki.NewTestCA(b, "bench CA")
	pooled := mtlsUpstream(b, ca, false)
	closing := mtlsUpstream(b, ca, true)
	dir := b.TempDir()

	signV4, err := sigv4.New(sigv4.Options{Service: "eks", Region: "eu-west-1",
		Credentials: func(context.Context) (credentials.Credentials, error) {
			return credentials.Credentials{AccessKeyID: "AKIDBENCH", SecretAccessKey: "bench-secret"}, nil
		}})
	if err != nil {
		b.Fatal(err)
	}
	_, edKey, _ := ed25519.GenerateKey(rand.Reader)
	ecKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ed := benchSigner(b, edKey)
	ec := benchSigner(b, ecKey)
	modifier := func(m func(*http.Request) error) func(*testing.B, *atomic.Int64) func(*server.Options) {
		return func(*testing.B, *atomic.Int64) func(*server.Options) {
			return func(o *server.Options) { o.ModifyRequest = m }
		}
	}
	fileKey, err := ca.IssueClient("file", "file")
	if err != nil {
		b.Fatal(err)
	}

	cases := []useCase{
		{"no-modifier", pooled, func(*testing.B, *atomic.Int64) func(*server.Options) { return nil }},
		{"sigv4", pooled, modifier(signV4)},
		{"rfc9421-ed25519", pooled, modifier(ed.Sign)},
		{"rfc9421-ecdsa-p256", pooled, modifier(ec.Sign)},
	}
	cases = append(cases, keyCases("file-key", pooled, closing, fileKey.CertFile, fileKey.KeyFile)...)
	if certFile, keyURI, err := pkcs11Key(b, ca, dir); err != nil {
		b.Logf("no PKCS#11 cases: %v", err)
	} else {
		cases = append(cases, keyCases("pkcs11-key", pooled, closing, certFile, keyURI)...)
	}
	if certFile, keyURI, err := tpmClientKey(b, ca); err != nil {
		b.Logf("no TPM cases: %v", err)
	} else {
		cases = append(cases, keyCases("tpm-key", pooled, closing, certFile, keyURI)...)
	}
	for _, uc := range cases {
		b.Run(uc.name, func(b *testing.B) {
			var signs atomic.Int64
			p := path{base: uc.upstream.Host, client: startKplugProxy(b, uc.upstream, uc.options(b, &signs))}
			p.get(b)
			signs.Store(0)
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				p.get(b)
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "req/s")
			b.ReportMetric(float64(signs.Load())/float64(b.N), "key-signs/op")
		})
	}
}
