package bench

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"encoding/pem"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/aws/smithy-go/aws-http-auth/credentials"
	"k8s.io/client-go/rest"

	"github.com/kplug/kplug/execproxy/server"
	"github.com/kplug/kplug/execproxy/sigv4"
	"github.com/kplug/kplug/internal/testkit/testpki"
	"github.com/kplug/kplug/keys"
)

// The use-case benchmarks measure what each exec proxy use case costs per request: no
// modifier, SigV4, RFC 9421 in the KEP-6308 profile (httpsig), and a TLS client key on a PKCS#11 token, the last over pooled
// connections and over a new upstream connection per request, with and without TLS
// session resumption.

// mtlsUpstream accepts client certificates from ca. With closeEach, it speaks HTTP/1.1 and
// closes every connection after one response, so that each request needs a new TLS
// connection to the upstream; otherwise connections are pooled over HTTP/2.
func mtlsUpstream(b *testing.B, ca *testpki.CA, closeEach bool) *rest.Config {
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

// withClientKey sets the proxy's upstream client certificate, with the key keyURI names;
// signs counts the key's signatures.
func withClientKey(b *testing.B, certFile, keyURI string, resume bool, signs *atomic.Int64) func(*server.Options) {
	ks, err := keys.Open(keyURI, keys.Options{})
	if err != nil {
		b.Fatal(err)
	}
	cc, err := keys.NewClientCertificate(keys.ClientCertOptions{CertFile: certFile, Key: countingKeys{ks, signs}})
	if err != nil {
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
	modifier := func(m func(*http.Request) error) func(*server.Options) {
		return func(o *server.Options) { o.ModifyRequest = m }
	}
	fileKey, err := ca.IssueClient("file", "file")
	if err != nil {
		b.Fatal(err)
	}

	type useCase struct {
		name     string
		upstream *rest.Config
		options  func(signs *atomic.Int64) func(*server.Options)
	}
	cases := []useCase{
		{"no-modifier", pooled, func(*atomic.Int64) func(*server.Options) { return nil }},
		{"sigv4", pooled, func(*atomic.Int64) func(*server.Options) { return modifier(signV4) }},
		{"rfc9421-ed25519", pooled, func(*atomic.Int64) func(*server.Options) { return modifier(ed.Sign) }},
		{"rfc9421-ecdsa-p256", pooled, func(*atomic.Int64) func(*server.Options) { return modifier(ec.Sign) }},
		{"file-key/new-conn-full-handshake", closing, func(n *atomic.Int64) func(*server.Options) {
			return withClientKey(b, fileKey.CertFile, fileKey.KeyFile, false, n)
		}},
	}
	if certFile, keyURI, err := pkcs11Key(b, ca, dir); err != nil {
		b.Logf("no PKCS#11 cases: %v", err)
	} else {
		cases = append(cases,
			useCase{"pkcs11-key/pooled", pooled, func(n *atomic.Int64) func(*server.Options) { return withClientKey(b, certFile, keyURI, true, n) }},
			useCase{"pkcs11-key/new-conn-full-handshake", closing, func(n *atomic.Int64) func(*server.Options) { return withClientKey(b, certFile, keyURI, false, n) }},
			useCase{"pkcs11-key/new-conn-resumed", closing, func(n *atomic.Int64) func(*server.Options) { return withClientKey(b, certFile, keyURI, true, n) }},
		)
	}
	for _, uc := range cases {
		b.Run(uc.name, func(b *testing.B) {
			var signs atomic.Int64
			p := path{base: uc.upstream.Host, client: startKplugProxy(b, uc.upstream, uc.options(&signs))}
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
