package verifier

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/x509"
	"encoding/base64"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	authenticationv1 "k8s.io/api/authentication/v1"

	"github.com/kplug/kplug/httpsig"
	"github.com/kplug/kplug/internal/testkit/testpki"
)

// roundTripFunc lets a test change a request after it was signed.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// authServer runs Authenticate on every request it receives, as the front proxy does.
type authServer struct {
	*httptest.Server
	mu   sync.Mutex
	user *authenticationv1.UserInfo
	err  error
}

func newAuthServer(t *testing.T, a RequestAuthenticator) *authServer {
	t.Helper()
	s := &authServer{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		u, err := a.Authenticate(r)
		s.mu.Lock()
		s.user, s.err = u, err
		s.mu.Unlock()
	}))
	t.Cleanup(s.Close)
	return s
}

// send signs a request with key and cert (or keyID), lets tamper change it afterwards,
// and returns what the verifier made of it.
func (s *authServer) send(t *testing.T, key *ecdsa.PrivateKey, cert *x509.Certificate, keyID, audience string, created time.Time, method, path, body string, tamper func(*http.Request)) (*authenticationv1.UserInfo, error) {
	t.Helper()
	signer, err := httpsig.NewSigner(httpsig.SignerOptions{
		Key:     httpsig.Key{Signer: key, Certificate: cert, KeyID: keyID},
		Headers: map[string]string{httpsig.AudienceHeader: audience},
		Now:     func() time.Time { return created },
	})
	if err != nil {
		t.Fatal(err)
	}
	next := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		if tamper != nil {
			tamper(r)
		}
		return s.Client().Transport.RoundTrip(r) // not http.DefaultTransport: other tests' servers close its connections as they end
	})
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, _ := http.NewRequestWithContext(t.Context(), method, s.URL+path, rd)
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Transport: signer.RoundTripper(next)}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.user, s.err
}

func TestAuthenticateSignedRequests(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	srv := newAuthServer(t, f.auth)
	leaf, key := leafFrom(t, f.ca1, "alice", []string{"developers"}, f.now.Add(-time.Hour), f.now.Add(time.Hour))
	bob, bobKey := leafFrom(t, f.ca1, "bob", nil, f.now.Add(-time.Hour), f.now.Add(time.Hour))
	eve, eveKey := leafFrom(t, testpki.NewTestCA(t, "nobody's CA"), "eve", nil, f.now.Add(-time.Hour), f.now.Add(time.Hour))
	const aud = "https://cluster.example"
	want := &authenticationv1.UserInfo{
		Username: "cert:alice", UID: leaf.SerialNumber.String(), Groups: []string{"developers"},
		Extra: map[string]authenticationv1.ExtraValue{"example.com/uris": {"spiffe://example.org/alice"}},
	}
	u, err := srv.send(t, key, leaf, "", aud, f.now, http.MethodPost, "/api/v1/namespaces/default/configmaps?dryRun=All", `{"kind":"ConfigMap"}`, nil)
	if err != nil {
		t.Fatalf("a good signature: %v", err)
	}
	if diff := cmp.Diff(want, u); diff != "" {
		t.Errorf("user (-want +got):\n%s", diff)
	}
	for _, tc := range []struct {
		name     string
		key      *ecdsa.PrivateKey
		cert     *x509.Certificate
		keyID    string
		audience string
		created  time.Time
		tamper   func(*http.Request)
		want     httpsig.Outcome
	}{
		{"tampered path", key, leaf, "", aud, f.now, func(r *http.Request) { r.URL.Path = "/api/v1/namespaces/kube-system/configmaps" }, httpsig.Forged},
		{"tampered query", key, leaf, "", aud, f.now, func(r *http.Request) { r.URL.RawQuery = "" }, httpsig.Forged},
		{"tampered body", key, leaf, "", aud, f.now, func(r *http.Request) {
			r.Body, r.ContentLength = io.NopCloser(bytes.NewReader([]byte(`{"kind":"Secret"}`))), 17
		}, httpsig.Forged},
		{"added impersonation", key, leaf, "", aud, f.now, func(r *http.Request) { r.Header.Set("Impersonate-User", "admin") }, httpsig.Uncovered},
		{"another cluster's audience", key, leaf, "", "https://other.example", f.now, nil, httpsig.Required},
		{"older than maxAge", key, leaf, "", aud, f.now.Add(-6 * time.Second), nil, httpsig.Stale},
		{"certificate swapped for alice's", bobKey, bob, "", aud, f.now, func(r *http.Request) {
			r.Header.Set(httpsig.CertificateHeader, ":"+base64.StdEncoding.EncodeToString(leaf.Raw)+":")
		}, httpsig.UnknownKey},
		{"untrusted issuer", eveKey, eve, "", aud, f.now, nil, UnknownIssuer},
		{"not a certificate", key, nil, "corp:key-1", aud, f.now, nil, NotCertificate},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u, err := srv.send(t, tc.key, tc.cert, tc.keyID, tc.audience, tc.created, http.MethodPost, "/api/v1/namespaces/default/configmaps?dryRun=All", `{"kind":"ConfigMap"}`, tc.tamper)
			if u != nil || outcomeOf(err) != tc.want {
				t.Errorf("user %v, error %v (%s); want outcome %s", u, err, outcomeOf(err), tc.want)
			}
		})
	}
	if got := testutil.ToFloat64(f.auth.o.Metrics.outcomes.WithLabelValues("a1", string(httpsig.Accepted))); got != 1 {
		t.Errorf("accepted a1 = %v", got)
	}
	if got := testutil.ToFloat64(f.auth.o.Metrics.unclaimed.WithLabelValues(string(NotCertificate))); got != 1 {
		t.Errorf("unclaimed not_certificate = %v", got)
	}
}

// The parsed-leaf cache of issue 33 item 4 keeps every check: a leaf Authenticate has
// parsed before is still validated against the anchors at the request's time (past its
// notAfter, where the memory of its validation has lapsed too, it is refused as it was
// before), and a certificate re-issued for the same key is its own, never the one
// remembered.
func TestAuthenticateRemembersLeavesAndKeepsTheChecks(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	var now atomic.Int64
	now.Store(f.now.UnixNano())
	a := New(f.cfg, Options{Now: func() time.Time { return time.Unix(0, now.Load()) }})
	srv := newAuthServer(t, a)
	leaf, key := leafFrom(t, f.ca1, "alice", nil, f.now.Add(-time.Hour), f.now.Add(time.Hour))
	const aud = "https://cluster.example"
	send := func(cert *x509.Certificate, at time.Time) (*authenticationv1.UserInfo, error) {
		now.Store(at.UnixNano())
		return srv.send(t, key, cert, "", aud, at, http.MethodGet, "/api", "", nil)
	}
	for range 2 {
		if u, err := send(leaf, f.now); err != nil || u.Username != "cert:alice" {
			t.Fatalf("alice: %v %v", u, err)
		}
	}
	if a.leaves.Len() != 1 {
		t.Errorf("%d leaves remembered after two requests with one certificate", a.leaves.Len())
	}
	renewed := leafFor(t, f.ca1, "alice-renewed", key, f.now.Add(-time.Hour), f.now.Add(2*time.Hour))
	if u, err := send(renewed, f.now); err != nil || u.Username != "cert:alice-renewed" {
		t.Errorf("the re-issued certificate: %v %v", u, err)
	}
	if u, err := send(leaf, f.now.Add(time.Hour+time.Minute)); u != nil || outcomeOf(err) != InvalidCertificate {
		t.Errorf("alice's certificate past its notAfter: user %v, error %v (%s); want %s", u, err, outcomeOf(err), InvalidCertificate)
	}
}
