package bench

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/apiserver/pkg/authentication/request/bearertoken"
	"k8s.io/apiserver/pkg/authentication/request/headerrequest"
	"k8s.io/apiserver/pkg/authentication/token/tokenfile"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/endpoints/request"

	"github.com/kplug/kplug/httpsig"
	"github.com/kplug/kplug/httpsig/verifier"
	"github.com/kplug/kplug/internal/testkit/testpki"
)

const (
	sigAudience = "https://bench.example"
	sigHost     = "bench.example"
	sigPath     = "/api/v1/namespaces/default/pods"
	sigQuery    = "limit=500"
)

// fixedUser accepts every request as one user: the front proxy with no authentication,
// the floor of the comparison.
type fixedUser struct{ u *authenticationv1.UserInfo }

func (f fixedUser) Authenticate(*http.Request) (*authenticationv1.UserInfo, error) { return f.u, nil }

// contextUser takes the user k8s.io/apiserver's authentication put in the request
// context, so that the bearer token path runs through the same front-proxy handler.
type contextUser struct{}

func (contextUser) Authenticate(r *http.Request) (*authenticationv1.UserInfo, error) {
	u, ok := request.UserFrom(r.Context())
	if !ok {
		return nil, errors.New("no user")
	}
	return &authenticationv1.UserInfo{Username: u.GetName(), UID: u.GetUID(), Groups: u.GetGroups()}, nil
}

// signatureSetup is a configuration trusting one signing CA, a leaf under it and its key
// (ECDSA P-256), and a second leaf for an Ed25519 key.
type signatureSetup struct {
	cfg    *verifier.Config
	key    *ecdsa.PrivateKey
	leaf   *x509.Certificate
	edKey  ed25519.PrivateKey
	edLeaf *x509.Certificate
}

func newSignatureSetup(tb testing.TB) *signatureSetup {
	tb.Helper()
	ca := testpki.NewTestCA(tb, "bench signing CA")
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	issue := func(name string, pub any) *x509.Certificate {
		path, err := ca.IssueFor(name, &x509.Certificate{Subject: pkix.Name{CommonName: "alice", Organization: []string{"developers"}}}, pub, time.Now().Add(time.Hour))
		if err != nil {
			tb.Fatal(err)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			tb.Fatal(err)
		}
		block, _ := pem.Decode(b)
		leaf, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			tb.Fatal(err)
		}
		return leaf
	}
	leaf := issue("alice", key.Public())
	edPub, edKey, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	edLeaf := issue("alice-ed25519", edPub)
	cfg, err := verifier.ParseConfig([]byte(`apiVersion: apiserver.config.k8s.io/v1alpha1
kind: AuthenticationConfiguration
httpSignature:
  requiredSignedHeaders:
    X-K8s-Audience: [`+sigAudience+`]
  authenticators:
  - name: bench
    maxAge: 1h
    x509:
      certificateAuthorityFile: `+ca.File+`
      claimMappings:
        username: {expression: 'cert.subject.commonName'}
        groups: {expression: 'cert.subject.organization'}
    userValidationRules:
    - expression: '!user.username.startsWith("system:")'
      message: no system names
`), "", nil)
	if err != nil {
		tb.Fatal(err)
	}
	return &signatureSetup{cfg: cfg, key: key, leaf: leaf, edKey: edKey, edLeaf: edLeaf}
}

// signedHeaders signs one request to the benchmark's target and returns its headers; the
// verifier keeps no nonces, so within maxAge they verify on every request.
func (s *signatureSetup) signedHeaders(tb testing.TB) http.Header {
	tb.Helper()
	return s.signedHeadersWith(tb, httpsig.Key{Signer: s.key, Certificate: s.leaf})
}

// signedHeadersWith is signedHeaders with another key.
func (s *signatureSetup) signedHeadersWith(tb testing.TB, key httpsig.Key) http.Header {
	tb.Helper()
	return signedWith(tb, key)
}

// signedWith signs one request to the benchmark's target with key and returns its headers.
func signedWith(tb testing.TB, key httpsig.Key) http.Header {
	tb.Helper()
	signer, err := httpsig.NewSigner(httpsig.SignerOptions{
		Key:     key,
		Headers: map[string]string{httpsig.AudienceHeader: sigAudience},
	})
	if err != nil {
		tb.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodGet, "https://"+sigHost+sigPath+"?"+sigQuery, nil)
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "kubectl/v1.36.3")
	if err := signer.Sign(req); err != nil {
		tb.Fatal(err)
	}
	return req.Header
}

// loopbackUpstream is the upstream the front-proxy rows forward to over loopback HTTP, and
// a maker of the verifier.Handlers compared, sharing one transport.
func loopbackUpstream(tb testing.TB) (upstream *httptest.Server, newHandler func(verifier.RequestAuthenticator) *verifier.Handler) {
	tb.Helper()
	upstream = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, `{"kind":"PodList","apiVersion":"v1","items":[]}`)
	}))
	target, _ := url.Parse(upstream.URL)
	transport := &http.Transport{MaxIdleConnsPerHost: 64}
	tb.Cleanup(transport.CloseIdleConnections)
	return upstream, func(a verifier.RequestAuthenticator) *verifier.Handler {
		h, err := verifier.NewHandler(verifier.HandlerOptions{Authenticator: a, Upstream: target, Transport: transport})
		if err != nil {
			tb.Fatal(err)
		}
		return h
	}
}

// frontProxies are the handlers compared, all verifier.Handler forwarding to one
// upstream over loopback HTTP.
func frontProxies(tb testing.TB, s *signatureSetup, token string) (upstream *httptest.Server, handlers map[string]http.Handler) {
	tb.Helper()
	upstream, newHandler := loopbackUpstream(tb)
	tokens := bearertoken.New(tokenfile.New(map[string]*user.DefaultInfo{token: {Name: "alice", UID: "u-1", Groups: []string{"developers"}}}))
	viaToken := newHandler(contextUser{})
	bearer := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		resp, ok, err := tokens.AuthenticateRequest(r)
		if err != nil || !ok {
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
			return
		}
		viaToken.ServeHTTP(w, r.WithContext(request.WithUser(r.Context(), resp.User)))
	})
	return upstream, map[string]http.Handler{
		"unauthenticated": newHandler(fixedUser{&authenticationv1.UserInfo{Username: "alice", Groups: []string{"developers"}}}),
		"bearer-token":    bearer,
		"httpsig":         newHandler(verifier.New(s.cfg, verifier.Options{})),
		"httpsig-fresh":   newHandler(verifier.New(s.cfg, verifier.Options{})),
		"httpsig-ed25519": newHandler(verifier.New(s.cfg, verifier.Options{})),
	}
}

// targetRequest is a request to the benchmark's target, as received, with header.
func targetRequest(header http.Header) *http.Request {
	req := httptest.NewRequest(http.MethodGet, sigPath+"?"+sigQuery, nil)
	req.Host = sigHost
	for k, v := range header {
		req.Header[k] = v
	}
	return req
}

func serveOnce(tb testing.TB, h http.Handler, header http.Header) {
	req := targetRequest(header)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		tb.Fatalf("%d %s", rec.Code, rec.Body)
	}
}

// BenchmarkSignatureProxy compares the verifier's cost per request with kube-apiserver's
// own bearer token authentication (k8s.io/apiserver's bearertoken over a token file), both
// in the same front-proxy handler forwarding to a loopback upstream, beside the handler
// with no authentication at all. The certificate's validation is memoized, as it is after
// a client's first request. The httpsig row signs with ECDSA P-256 and reuses one
// signature; httpsig-fresh sends a new one with each request, as a client does (nothing
// keyed by the signature can help it); httpsig-ed25519, the same as httpsig with an
// Ed25519 key, is what the cheapest asymmetric key the profile allows costs. Each row
// also reports cpu-µs/op (cpuMeter), which a loaded machine inflates less than wall time.
func BenchmarkSignatureProxy(b *testing.B) {
	s := newSignatureSetup(b)
	const token = "0123456789abcdef0123456789abcdef"
	upstream, handlers := frontProxies(b, s, token)
	defer upstream.Close()
	headers := s.benchHeaders(b, token)
	for _, name := range []string{"unauthenticated", "bearer-token", "httpsig", "httpsig-fresh", "httpsig-ed25519"} {
		h := handlers[name]
		b.Run(name, func(b *testing.B) {
			meter := &cpuMeter{}
			next := headers(name, meter)
			measure(b, meter, func() { serveOnce(b, h, next(b)) })
		})
	}
}

// benchHeaders gives, for a row of the signature benchmarks, what makes each of its
// requests' headers; the fresh row's signatures are made in batches off the meter.
func (s *signatureSetup) benchHeaders(b *testing.B, token string) func(row string, meter *cpuMeter) func(*testing.B) http.Header {
	b.Helper()
	key := httpsig.Key{Signer: s.key, Certificate: s.leaf}
	reused := map[string]http.Header{
		"unauthenticated": {"Accept": {"application/json"}},
		"bearer-token":    {"Accept": {"application/json"}, "Authorization": {"Bearer " + token}},
		"httpsig":         s.signedHeadersWith(b, key),
		"httpsig-ed25519": s.signedHeadersWith(b, httpsig.Key{Signer: s.edKey, Certificate: s.edLeaf}),
	}
	return func(row string, meter *cpuMeter) func(*testing.B) http.Header {
		if row == "httpsig-fresh" {
			return (&freshSignatures{key: key, meter: meter}).next
		}
		h := reused[row]
		return func(*testing.B) http.Header { return h }
	}
}

// BenchmarkSignatureAuthentication is the authentication step alone, without the proxy:
// k8s.io/apiserver's bearer token authenticator over a token file beside the verifier's
// Authenticate (an ECDSA P-256 signature under a certificate whose validation is cached;
// the rows are BenchmarkSignatureProxy's).
func BenchmarkSignatureAuthentication(b *testing.B) {
	s := newSignatureSetup(b)
	const token = "0123456789abcdef0123456789abcdef"
	tokens := bearertoken.New(tokenfile.New(map[string]*user.DefaultInfo{token: {Name: "alice"}}))
	auth := verifier.New(s.cfg, verifier.Options{})
	headers := s.benchHeaders(b, token)
	for _, name := range []string{"bearer-token", "httpsig", "httpsig-fresh", "httpsig-ed25519"} {
		b.Run(name, func(b *testing.B) {
			meter := &cpuMeter{}
			next := headers(name, meter)
			measure(b, meter, func() {
				req := targetRequest(next(b))
				if name == "bearer-token" {
					if _, ok, err := tokens.AuthenticateRequest(req); !ok || err != nil {
						b.Fatal(ok, err)
					}
					return
				}
				if _, err := auth.Authenticate(req); err != nil {
					b.Fatal(err)
				}
			})
		})
	}
}

// TestSignatureProxyIdentityReadByAPIServer: the identity headers the front proxy sets are
// read back by kube-apiserver's own requestheader authenticator as the same user, extra
// keys with reserved characters included.
func TestSignatureProxyIdentityReadByAPIServer(t *testing.T) {
	var got http.Header
	upstream := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) { got = r.Header.Clone() }))
	defer upstream.Close()
	target, _ := url.Parse(upstream.URL)
	want := &authenticationv1.UserInfo{
		Username: "cert:alice", UID: "u-1", Groups: []string{"developers", "ops"},
		Extra: map[string]authenticationv1.ExtraValue{"example.com/uris": {"spiffe://example.org/alice"}, "scopes.example/team%x y": {"blue", "green"}},
	}
	h, err := verifier.NewHandler(verifier.HandlerOptions{Authenticator: fixedUser{want}, Upstream: target})
	if err != nil {
		t.Fatal(err)
	}
	req := httptest.NewRequest(http.MethodGet, "/api", nil)
	req.Header.Set("X-Remote-Extra-Forged", "x")
	h.ServeHTTP(httptest.NewRecorder(), req)

	names := verifier.DefaultRequestHeaders
	auth, err := headerrequest.New(names.Username, names.UID, names.Group, names.ExtraPrefix)
	if err != nil {
		t.Fatal(err)
	}
	resp, ok, err := auth.AuthenticateRequest(&http.Request{Header: got})
	if err != nil || !ok {
		t.Fatalf("requestheader: %v %v (headers %v)", ok, err, got)
	}
	u := resp.User
	if u.GetName() != want.Username || u.GetUID() != want.UID || strings.Join(u.GetGroups(), ",") != "developers,ops" || len(u.GetExtra()) != 2 ||
		strings.Join(u.GetExtra()["scopes.example/team%x y"], ",") != "blue,green" || strings.Join(u.GetExtra()["example.com/uris"], ",") != "spiffe://example.org/alice" {
		t.Errorf("apiserver reads %+v, want %+v", u, want)
	}
}
