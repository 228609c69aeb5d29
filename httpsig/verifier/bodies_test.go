package verifier

import (
	"bufio"
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kplug/kplug/httpsig"
	"github.com/kplug/kplug/internal/testkit/testpki"
)

// forgedLeaf is what anyone can make without the CA's key: a certificate of their own key
// that names ca, by its (public) subject key identifier, as its issuer.
func forgedLeaf(t *testing.T, ca *testpki.CA, now time.Time) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(666), Subject: pkix.Name{CommonName: "mallory"}, Issuer: ca.Cert.Subject,
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), AuthorityKeyId: ca.Cert.SubjectKeyId,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return leaf, key
}

// signedHeader signs a POST of body for key and cert at now, as a client would, and
// returns its headers.
func signedHeader(t *testing.T, key *ecdsa.PrivateKey, cert *x509.Certificate, now time.Time, path, body string) http.Header {
	t.Helper()
	signer, err := httpsig.NewSigner(httpsig.SignerOptions{
		Key:     httpsig.Key{Signer: key, Certificate: cert},
		Headers: map[string]string{httpsig.AudienceHeader: "https://cluster.example"},
		Now:     func() time.Time { return now },
	})
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, "http://example.com"+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "kplug-test")
	if err := signer.Sign(req); err != nil {
		t.Fatal(err)
	}
	return req.Header
}

// countingBody counts the bytes read from it.
type countingBody struct {
	r    io.Reader
	read atomic.Int64
}

func (c *countingBody) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.read.Add(int64(n))
	return n, err
}

func (c *countingBody) Close() error { return nil }

// TestSecurityUnauthenticatedBodyIsNeverRead (issue 27, N3): a certificate of the
// attacker's own key that names a trusted CA by its authority key identifier, with a
// signature that verifies under that key, used to have its body read and digested before
// the chain was checked. The chain comes first now: the request is refused without a
// byte of its body read.
func TestSecurityUnauthenticatedBodyIsNeverRead(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	leaf, key := forgedLeaf(t, f.ca1, f.now)
	const path = "/api/v1/namespaces/default/configmaps"
	body := strings.Repeat("x", 1<<20)
	h := signedHeader(t, key, leaf, f.now, path, body)
	cb := &countingBody{r: strings.NewReader(body)}
	req := httptest.NewRequestWithContext(t.Context(), http.MethodPost, path, nil)
	req.Host = "example.com"
	req.Header = h
	req.Body, req.ContentLength = cb, int64(len(body))
	user, err := f.auth.Authenticate(req)
	if user != nil || outcomeOf(err) != InvalidCertificate {
		t.Errorf("user %v, error %v (%s); want %s", user, err, outcomeOf(err), InvalidCertificate)
	}
	if n := cb.read.Load(); n != 0 {
		t.Errorf("%d bytes of the body of a request whose certificate does not chain were read", n)
	}
}

// blockingUpstream holds every request until release is closed, and says on arrived when
// one has come.
func blockingUpstream(t *testing.T) (u *httptest.Server, arrived chan struct{}, release chan struct{}) {
	t.Helper()
	arrived, release = make(chan struct{}, 8), make(chan struct{})
	u = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		arrived <- struct{}{}
		<-release
		_, _ = io.WriteString(w, "ok")
	}))
	t.Cleanup(u.Close)
	return u, arrived, release
}

// TestSecurityBodyBudget (issue 27, N3): the bodies held while their requests are
// checked and forwarded share one budget. A request whose body would take it over is
// answered 429 with Retry-After and not forwarded, and the budget is given back once a
// request is done.
func TestSecurityBodyBudget(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	leaf, key := leafFrom(t, f.ca1, "alice", nil, f.now.Add(-time.Hour), f.now.Add(time.Hour))
	up, arrived, release := blockingUpstream(t)
	target, _ := url.Parse(up.URL)
	h, err := NewHandler(HandlerOptions{Authenticator: f.auth, Upstream: target, BodyBudget: httpsig.MaxBodyBytes + 1})
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(h)
	t.Cleanup(front.Close)
	const path = "/api/v1/namespaces/default/configmaps"
	body := strings.Repeat("x", 2<<20) // two of them do not fit
	type answer struct {
		code  int
		s     metav1.Status
		retry string
	}
	send := func() answer {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, front.URL+path, strings.NewReader(body))
		req.Header = signedHeader(t, key, leaf, f.now, path, body)
		req.Host = "example.com"
		resp, err := front.Client().Do(req)
		if err != nil {
			t.Error(err)
			return answer{}
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var s metav1.Status
		_ = json.Unmarshal(b, &s)
		return answer{resp.StatusCode, s, resp.Header.Get("Retry-After")}
	}
	first, second := make(chan answer, 1), make(chan answer, 1)
	go func() { first <- send() }()
	<-arrived // the first body is held: read, checked, on its way upstream
	go func() { second <- send() }()
	select {
	case a := <-second:
		want := fmt.Sprintf("signature proxy: too many request bodies are being checked at once (%d MiB); retry shortly", (httpsig.MaxBodyBytes+1)>>20)
		if a.code != http.StatusTooManyRequests || a.s.Reason != metav1.StatusReasonTooManyRequests || a.s.Message != want || a.retry != "1" {
			t.Errorf("second request: %d %+v Retry-After %q; want 429 %q", a.code, a.s, a.retry, want)
		}
	case <-arrived:
		t.Error("the second request reached the upstream although its body did not fit the budget")
		defer func() { <-second }()
	}
	close(release)
	if a := <-first; a.code != http.StatusOK {
		t.Errorf("first request: %d", a.code)
	}
	if a := send(); a.code != http.StatusOK {
		t.Errorf("after the first was done: %d %+v; the budget was not given back", a.code, a.s)
	}
	select {
	case <-arrived:
	default:
		t.Error("the third request did not reach the upstream")
	}
	if len(arrived) != 0 {
		t.Errorf("the refused request reached the upstream")
	}
}

// TestSecurityTrickledBodyIsCutOff (issue 27, N3): a client that sends its headers and
// then trickles (here: stops sending) its body is cut off at BodyReadTimeout instead of
// holding the connection and its buffer for as long as it likes.
func TestSecurityTrickledBodyIsCutOff(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	leaf, key := leafFrom(t, f.ca1, "alice", nil, f.now.Add(-time.Hour), f.now.Add(time.Hour))
	up := newRecordingUpstream(t)
	target, _ := url.Parse(up.URL)
	h, err := NewHandler(HandlerOptions{Authenticator: f.auth, Upstream: target, BodyReadTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(h)
	t.Cleanup(front.Close)
	const path = "/api/v1/namespaces/default/configmaps"
	body := strings.Repeat("x", 64<<10)
	conn, err := (&net.Dialer{}).DialContext(t.Context(), "tcp", strings.TrimPrefix(front.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var head bytes.Buffer
	fmt.Fprintf(&head, "POST %s HTTP/1.1\r\nHost: example.com\r\nContent-Length: %d\r\n", path, len(body))
	_ = signedHeader(t, key, leaf, f.now, path, body).Write(&head)
	head.WriteString("\r\n")
	head.WriteString(body[:len(body)/2]) // and never the rest
	if _, err := conn.Write(head.Bytes()); err != nil {
		t.Fatal(err)
	}
	// Bounded only so that a regression fails instead of hanging the suite.
	_ = conn.SetReadDeadline(time.Now().Add(time.Minute))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer while the body trickles: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(string(b), "reading the request body") || !strings.Contains(string(b), "timeout") {
		t.Errorf("%d %s; want 401 naming the body read that timed out", resp.StatusCode, b)
	}
	if n := len(up.requests()); n != 0 {
		t.Errorf("%d requests went upstream", n)
	}
}
