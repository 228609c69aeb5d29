package verifier_test

import (
	"context"
	"crypto"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"

	"github.com/kplug/kplug/httpsig"
	"github.com/kplug/kplug/httpsig/verifier"
	"github.com/kplug/kplug/internal/testkit/testpki"
)

func ExampleLoadConfig() {
	cfg, err := verifier.LoadConfig("testdata/authentication-config.yaml", nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(cfg.AuthenticatorNames(), cfg.Policy.RequiredHeaders, cfg.Policy.MaxAge, cfg.Policy.MaxClockSkew)
	// Output: [workload-certificates] map[X-K8s-Audience:[https://my-apiserver.example.com]] 1m0s 5s
}

// The front proxy at work: a configured Handler verifies a signed request and forwards it
// to kube-apiserver (here an httptest backend that prints what it receives) as the user
// the configuration maps the signer's certificate to. A request that only claims an
// identity is answered 401 and never forwarded.
func ExampleHandler() {
	dir, _ := os.MkdirTemp("", "verifier")
	defer os.RemoveAll(dir)
	// A CA that issues signing certificates only, for the example.
	ca, err := testpki.NewCA(dir, "signing-ca", "signing CA")
	if err != nil {
		panic(err)
	}
	cfg, err := verifier.ParseConfig([]byte(`
apiVersion: apiserver.config.k8s.io/v1alpha1
kind: AuthenticationConfiguration
httpSignature:
  requiredSignedHeaders:
    X-K8s-Audience: [https://prod.example.com]
  authenticators:
  - name: workloads
    x509:
      certificateAuthorityFile: signing-ca.crt
      claimMappings:
        username:
          expression: '"cert:" + cert.uriSANs[0]'
        groups:
          expression: cert.subject.organization
`), dir, nil)
	if err != nil {
		panic(err)
	}

	// kube-apiserver, as far as the example goes: it shows the identity it is given.
	apiserver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s %s as user %q, groups %q; signature forwarded: %v\n", r.Method, r.URL.Path,
			r.Header.Get("X-Remote-User"), r.Header.Values("X-Remote-Group"), r.Header.Get("Signature") != "")
	}))
	defer apiserver.Close()
	upstream, _ := url.Parse(apiserver.URL)
	h, err := verifier.NewHandler(verifier.HandlerOptions{
		Authenticator: verifier.New(cfg, verifier.Options{}),
		Upstream:      upstream,
		// A real proxy presents its front-proxy client certificate: UpstreamTransport.
	})
	if err != nil {
		panic(err)
	}
	front := httptest.NewServer(h)
	defer front.Close()

	// A workload signs with the key of its certificate from the signing CA.
	spiffe, _ := url.Parse("spiffe://example.com/ns/ci/sa/deployer")
	kp, err := ca.Issue("deployer", &x509.Certificate{Subject: pkix.Name{CommonName: "deployer", Organization: []string{"team-a"}}, URIs: []*url.URL{spiffe}})
	if err != nil {
		panic(err)
	}
	cert, err := kp.TLS()
	if err != nil {
		panic(err)
	}
	signer, err := httpsig.NewSigner(httpsig.SignerOptions{
		Key:     httpsig.Key{Signer: cert.PrivateKey.(crypto.Signer), Certificate: cert.Leaf},
		Headers: map[string]string{httpsig.AudienceHeader: "https://prod.example.com"},
	})
	if err != nil {
		panic(err)
	}
	signed := &http.Client{Transport: signer.RoundTripper(http.DefaultTransport)}
	anyone := http.DefaultClient

	forged := http.Header{"X-Remote-User": {"system:admin"}, "X-Remote-Group": {"system:masters"}}
	for _, c := range []struct {
		client *http.Client
		header http.Header
	}{
		{signed, nil},
		{signed, forged}, // the identity headers a client sends are removed first
		{anyone, forged},
	} {
		req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, front.URL+"/api/v1/namespaces", nil)
		for k, vs := range c.header {
			req.Header[k] = vs
		}
		resp, err := c.client.Do(req)
		if err != nil {
			panic(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Println(resp.StatusCode, strings.TrimSpace(string(body)))
	}
	// Output:
	// 200 GET /api/v1/namespaces as user "cert:spiffe://example.com/ns/ci/sa/deployer", groups ["team-a"]; signature forwarded: false
	// 200 GET /api/v1/namespaces as user "cert:spiffe://example.com/ns/ci/sa/deployer", groups ["team-a"]; signature forwarded: false
	// 401 {"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"Unauthorized: the request is not signed: send a KEP-6308 HTTP message signature (Signature-Input and Signature)","reason":"Unauthorized","code":401}
}
