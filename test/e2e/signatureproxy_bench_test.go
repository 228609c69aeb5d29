package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"

	"github.com/kplug/kplug/httpsig"
	"github.com/kplug/kplug/httpsig/verifier"
	"github.com/kplug/kplug/test/e2e/framework"
)

// fixedUser accepts every request as one user: the verifier's handler with no
// authentication, the floor of the comparison.
type fixedUser struct{ u *authenticationv1.UserInfo }

func (f fixedUser) Authenticate(*http.Request) (*authenticationv1.UserInfo, error) { return f.u, nil }

// BenchmarkSignatureProxyKubeAPIServer: what verifying a KEP-6308 signature costs a real
// request to a real kube-apiserver (GET of one ConfigMap, one client, loopback TLS), beside
// the apiserver's own bearer token authentication. Every row goes through one proxy hop
// in this process: "bearer token" is a plain reverse proxy passing the token on, so that
// kube-apiserver authenticates it; "no authentication" is kplug signature-proxy's handler
// with a fixed user (requestheader identity, the floor); "signed" is the same handler
// verifying an ECDSA P-256 signature made by the client for each request.
func BenchmarkSignatureProxyKubeAPIServer(b *testing.B) {
	cp := framework.StartForTest(b, framework.Options{Servers: []framework.ServerOptions{{}}})
	ctx, cancel := context.WithTimeout(b.Context(), time.Minute)
	defer cancel()
	for _, args := range [][]string{
		{"create", "configmap", "bench", "--from-literal=k=v", "-n", "default"},
		{"create", "role", "bench-read", "--verb=get", "--resource=configmaps", "-n", "default"},
		{"create", "rolebinding", "bench-read", "--role=bench-read", "--group=signers", "--user=" + cp.TokenUser.Name, "-n", "default"},
	} {
		if out, err := cp.Kubectl(ctx, cp.Admin, args...).CombinedOutput(); err != nil {
			b.Fatalf("kubectl %v: %v\n%s", args, err, out)
		}
	}
	signingCA, key, certFile := newSigningIdentity(b, cp, "grace")
	configFile := b.TempDir() + "/authn.yaml"
	if err := os.WriteFile(configFile, []byte(signatureProxyConfig(signingCA.File)), 0o600); err != nil {
		b.Fatal(err)
	}
	cfg, err := verifier.LoadConfig(configFile, nil)
	if err != nil {
		b.Fatal(err)
	}
	upstreamURL, _ := url.Parse(cp.Servers[0].URL)
	roots := cp.PKI.ClusterCA.Pool()
	proxyCert, err := tls.LoadX509KeyPair(cp.PKI.ProxyClient.CertFile, cp.PKI.ProxyClient.KeyFile)
	if err != nil {
		b.Fatal(err)
	}
	front := func(auth verifier.RequestAuthenticator) string {
		transport := verifier.UpstreamTransport(roots, func() (*tls.Certificate, error) { return &proxyCert, nil })
		b.Cleanup(transport.CloseIdleConnections)
		h, err := verifier.NewHandler(verifier.HandlerOptions{Authenticator: auth, Upstream: upstreamURL, Transport: transport})
		if err != nil {
			b.Fatal(err)
		}
		s := httptest.NewTLSServer(h)
		b.Cleanup(s.Close)
		return s.URL
	}
	passthrough := httptest.NewTLSServer(&httputil.ReverseProxy{
		Rewrite:   func(pr *httputil.ProxyRequest) { pr.SetURL(upstreamURL) },
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}},
	})
	b.Cleanup(passthrough.Close)

	signer, err := httpsig.NewSigner(httpsig.SignerOptions{
		Key:     httpsig.Key{Signer: key, Certificate: readCertificate(b, certFile)},
		Headers: map[string]string{httpsig.AudienceHeader: signatureAudience},
	})
	if err != nil {
		b.Fatal(err)
	}
	client := func(rt http.RoundTripper) *http.Client { return &http.Client{Transport: rt} }
	serving := x509.NewCertPool() // every httptest server presents the same certificate
	serving.AddCert(passthrough.Certificate())
	base := func() *http.Transport {
		t := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: serving, MinVersion: tls.VersionTLS12}}
		b.Cleanup(t.CloseIdleConnections)
		return t
	}
	const path = "/api/v1/namespaces/default/configmaps/bench"
	rows := []struct {
		name   string
		url    string
		client *http.Client
		token  string
	}{
		{"bearer token", passthrough.URL, client(base()), cp.TokenUser.Token},
		{"no authentication", front(fixedUser{&authenticationv1.UserInfo{Username: "grace", Groups: []string{"signers"}}}), client(base()), ""},
		{"signed", front(verifier.New(cfg, verifier.Options{})), client(signer.RoundTripper(base())), ""},
	}
	for _, row := range rows {
		b.Run(row.name, func(b *testing.B) {
			get := func() {
				req, _ := http.NewRequestWithContext(b.Context(), http.MethodGet, row.url+path, nil)
				req.Header.Set("Accept", "application/json")
				if row.token != "" {
					req.Header.Set("Authorization", "Bearer "+row.token)
				}
				resp, err := row.client.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					b.Fatalf("%s: %s", row.name, resp.Status)
				}
			}
			get() // connections and the verifier's certificate cache warm
			b.ResetTimer()
			for b.Loop() {
				get()
			}
		})
	}
}
