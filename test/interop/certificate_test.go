package interop

import (
	"crypto"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/kplug/kplug/httpsig"
	"github.com/kplug/kplug/httpsig/verifier"
	"github.com/kplug/kplug/internal/testkit/testpki"
)

// signingCA is a signing CA and a leaf under it, for a key, in the certificate form of
// KEP-6308 ("keyid, and how a request selects an authenticator", "Signature-Certificate").
type signingCA struct {
	ca *testpki.CA
	t  *testing.T
}

// leaf issues alice's certificate (organization developers) for pub and returns it, and
// its PEM.
func (s signingCA) leaf(name string, pub crypto.PublicKey) (*x509.Certificate, string) {
	s.t.Helper()
	path, err := s.ca.IssueFor(name, &x509.Certificate{Subject: pkix.Name{CommonName: "alice", Organization: []string{"developers"}}}, pub, time.Now().Add(time.Hour))
	if err != nil {
		s.t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		s.t.Fatal(err)
	}
	block, _ := pem.Decode(b)
	leaf, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		s.t.Fatal(err)
	}
	return leaf, string(b)
}

// pem is the CA certificate.
func (s signingCA) pem() string {
	b, err := os.ReadFile(s.ca.File)
	if err != nil {
		s.t.Fatal(err)
	}
	return string(b)
}

// TestKplugCertificateSignatureVerifiesInNode: in the certificate form (keyid x509-sha256:
// and the leaf's digest, the leaf in a covered Signature-Certificate), what httpsig.Signer
// produces verifies in http-message-signatures with the key node takes from that
// certificate, after node has checked that the CA issued it and that the keyid is its
// digest; a changed path, or another certificate in its place, does not verify.
func TestKplugCertificateSignatureVerifiesInNode(t *testing.T) {
	run := findNode(t)
	ca := signingCA{testpki.NewTestCA(t, "interop signing CA"), t}
	other := testKeys(t)[0]
	otherLeaf, _ := ca.leaf("other", other.priv.Public())
	for _, k := range testKeys(t) {
		leaf, _ := ca.leaf(k.alg, k.priv.Public())
		for _, r := range requests {
			t.Run(k.alg+"/"+r.name, func(t *testing.T) {
				s, err := httpsig.NewSigner(httpsig.SignerOptions{
					Key:     httpsig.Key{Signer: k.priv, Certificate: leaf},
					Headers: map[string]string{httpsig.AudienceHeader: audience},
				})
				if err != nil {
					t.Fatal(err)
				}
				url := "https://cluster.example" + r.target
				var body io.Reader
				if r.body != "" {
					body = strings.NewReader(r.body)
				}
				req, _ := http.NewRequest(r.method, url, body)
				req.Header.Set("User-Agent", "kubectl/v1.36.3 (linux/amd64)")
				if r.body != "" {
					req.Header.Set("Content-Type", "application/json")
				}
				if err := s.Sign(req); err != nil {
					t.Fatal(err)
				}
				input := req.Header.Get("Signature-Input")
				if !strings.Contains(input, `"signature-certificate"`) || !strings.Contains(input, `keyid="x509-sha256:`) {
					t.Fatalf("not the certificate form: %s", input)
				}
				headers := map[string][]string{}
				for name, vs := range req.Header {
					headers[strings.ToLower(name)] = vs
				}
				swapped := map[string][]string{}
				for name, vs := range headers {
					swapped[name] = vs
				}
				swapped["signature-certificate"] = []string{":" + base64.StdEncoding.EncodeToString(otherLeaf.Raw) + ":"}
				for _, tc := range []struct {
					name    string
					url     string
					headers map[string][]string
					want    bool
				}{
					{"as signed", url, headers, true},
					{"another path", strings.Replace(url, "/namespaces/default/", "/namespaces/kube-system/", 1), headers, false},
					{"another certificate", url, swapped, false},
				} {
					var out struct {
						Verified bool
						Params   map[string]any
						Subject  string
						Error    string
					}
					run(t, map[string]any{"op": "verify", "alg": k.alg, "ca": ca.pem(),
						"request": map[string]any{"method": r.method, "url": tc.url, "headers": tc.headers}}, &out)
					if out.Verified != tc.want {
						t.Errorf("%s: node verified=%v (error %q), want %v", tc.name, out.Verified, out.Error, tc.want)
					}
					if tc.want && (out.Error != "" || out.Params["keyid"] != httpsig.CertificateKeyID(leaf.Raw) || !strings.Contains(out.Subject, "CN=alice")) {
						t.Errorf("%s: node read parameters %v, subject %q, error %q", tc.name, out.Params, out.Subject, out.Error)
					}
				}
			})
		}
	}
}

// TestNodeCertificateSignatureAcceptedByKplugVerifier: a request http-message-signatures
// signs in the certificate form (node computes the keyid from the certificate and adds
// Signature-Certificate) passes kplug's verifier, the handler behind `kplug
// signature-proxy`, configured with the signing CA: the upstream receives it as the user
// the claim mappings make of the certificate, without the signature fields. Tampered, or
// under a certificate from another CA, it is refused with 401 and never reaches the
// upstream.
func TestNodeCertificateSignatureAcceptedByKplugVerifier(t *testing.T) {
	run := findNode(t)
	ca := signingCA{testpki.NewTestCA(t, "interop signing CA"), t}
	stranger := signingCA{testpki.NewTestCA(t, "another CA"), t}
	cfg, err := verifier.ParseConfig([]byte(`apiVersion: apiserver.config.k8s.io/v1alpha1
kind: AuthenticationConfiguration
httpSignature:
  requiredSignedHeaders:
    X-K8s-Audience: [`+audience+`]
  maxClockSkew: 5s
  authenticators:
  - name: interop
    maxAge: 1m
    x509:
      certificateAuthorityFile: `+ca.ca.File+`
      claimMappings:
        username: {expression: '"cert:" + cert.subject.commonName'}
        groups: {expression: 'cert.subject.organization'}
`), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	type seen struct{ user, groups, signature string }
	got := make(chan seen, 1)
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- seen{r.Header.Get("X-Remote-User"), strings.Join(r.Header.Values("X-Remote-Group"), ","),
			r.Header.Get("Signature-Input") + r.Header.Get("Signature") + r.Header.Get("Signature-Certificate")}
		_, _ = io.WriteString(w, "ok")
	}))
	defer upstream.Close()
	target, _ := url.Parse(upstream.URL)
	h, err := verifier.NewHandler(verifier.HandlerOptions{Authenticator: verifier.New(cfg, verifier.Options{}), Upstream: target})
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(h)
	defer front.Close()
	send := func(t *testing.T, method, target, body string, headers map[string]string) (int, string) {
		t.Helper()
		var rb io.Reader
		if body != "" {
			rb = strings.NewReader(body)
		}
		req, _ := http.NewRequest(method, front.URL+target, rb)
		for name, v := range headers {
			req.Header.Set(name, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = resp.Body.Close() }()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, k := range testKeys(t) {
		_, certPEM := ca.leaf(k.alg, k.priv.Public())
		for _, r := range requests {
			t.Run(k.alg+"/"+r.name, func(t *testing.T) {
				headers := nodeSign(t, run, front.URL, k, r.method, r.target, r.body, certPEM, false)
				if status, answer := send(t, r.method, r.target, r.body, headers); status != http.StatusOK || answer != "ok" {
					t.Fatalf("got %d %q, want the upstream's answer", status, answer)
				}
				if s := <-got; s.user != "cert:alice" || s.groups != "developers" || s.signature != "" {
					t.Errorf("the upstream saw user %q, groups %q, signature fields %q; want cert:alice, developers, none", s.user, s.groups, s.signature)
				}
				tampered := strings.Replace(r.target, "/namespaces/default/", "/namespaces/kube-system/", 1)
				if status, answer := send(t, r.method, tampered, r.body, headers); status != http.StatusUnauthorized || !strings.Contains(answer, "signature does not verify") {
					t.Errorf("another path: got %d %q, want 401 signature does not verify", status, answer)
				}
			})
		}
	}
	t.Run("a certificate from another CA", func(t *testing.T) {
		k := testKeys(t)[0]
		_, certPEM := stranger.leaf("stranger", k.priv.Public())
		headers := nodeSign(t, run, front.URL, k, http.MethodGet, "/api", "", certPEM, false)
		if status, answer := send(t, http.MethodGet, "/api", "", headers); status != http.StatusUnauthorized {
			t.Errorf("got %d %q, want 401", status, answer)
		}
	})
	select {
	case s := <-got:
		t.Errorf("a refused request reached the upstream: %+v", s)
	default:
	}
}
