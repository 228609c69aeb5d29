package verifier

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/dunglas/httpsfv"

	"github.com/kplug/kplug/httpsig"
	"github.com/kplug/kplug/internal/testkit/testlog"
	"github.com/kplug/kplug/internal/testkit/testpki"
)

// bigNamedLeaf is a self-made certificate of its own key naming ca by its subject key
// identifier (what anyone can make), with a subject (and issuer) of 4.4 KB.
func bigNamedLeaf(t *testing.T, ca *testpki.CA, now time.Time) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(667), AuthorityKeyId: ca.Cert.SubjectKeyId, NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
		Subject: pkix.Name{CommonName: strings.Repeat("M", 1500), Organization: []string{strings.Repeat("O", 1500), strings.Repeat("P", 1400)}},
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

// manyLabels repeats the request's one signature under labels more long labels, as a
// client may send several signatures.
func manyLabels(t *testing.T, h http.Header, more int) {
	t.Helper()
	in, err := httpsfv.UnmarshalDictionary(h.Values("Signature-Input"))
	if err != nil {
		t.Fatal(err)
	}
	sg, err := httpsfv.UnmarshalDictionary(h.Values("Signature"))
	if err != nil {
		t.Fatal(err)
	}
	m, _ := in.Get("sig1")
	v, _ := sg.Get("sig1")
	for i := range more {
		label := fmt.Sprintf("l%d%s", i, strings.Repeat("x", 150))
		in.Add(label, m)
		sg.Add(label, v)
	}
	a, err := httpsfv.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	b, err := httpsfv.Marshal(sg)
	if err != nil {
		t.Fatal(err)
	}
	h.Set("Signature-Input", a)
	h.Set("Signature", b)
}

// TestSecurityRefusalsDoNotEchoTheRequest (issue 27, F8 of the second review): a
// request signed under a self-made certificate with a 4.4 KB subject, under 16 labels,
// to a 4 KiB path, used to be answered with a 76 KB 401 and logged in an 80 KB line:
// every refusal quoted the subject and the label in full, one per signature. A client
// sends that as often as it likes. The refusal now quotes what the client chose at most
// httpsig.MaxQuotedBytes at a time, spells out three signatures' refusals and counts the
// rest, and both the answer and the log line stay within a few KiB.
func TestSecurityRefusalsDoNotEchoTheRequest(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	leaf, key := bigNamedLeaf(t, f.ca1, f.now)
	up := newRecordingUpstream(t)
	target, _ := url.Parse(up.URL)
	var logs testlog.Buffer
	h, err := NewHandler(HandlerOptions{Authenticator: f.auth, Upstream: target, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(h)
	t.Cleanup(front.Close)
	path := "/api/v1/namespaces/" + strings.Repeat("n", 4<<10)
	signer, err := httpsig.NewSigner(httpsig.SignerOptions{
		Key: httpsig.Key{Signer: key, Certificate: leaf}, Headers: map[string]string{httpsig.AudienceHeader: "https://cluster.example"},
		Now: func() time.Time { return f.now },
	})
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, front.URL+path, nil)
	if err := signer.Sign(req); err != nil {
		t.Fatal(err)
	}
	manyLabels(t, req.Header, 15)
	resp, err := front.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	const bound = 3 << 10
	if resp.StatusCode != http.StatusUnauthorized || len(body) > bound {
		t.Errorf("%d, %d bytes of answer; want 401 within %d bytes:\n%.600s", resp.StatusCode, len(body), bound, body)
	}
	if !strings.Contains(string(body), "none of 16 signatures accepted") || !strings.Contains(string(body), "and 13 more") || !strings.Contains(string(body), "(4409 bytes)") {
		t.Errorf("the answer does not name the certificate and say how many signatures were refused: %.600s", body)
	}
	for line := range strings.Lines(logs.String()) {
		if len(line) > bound {
			t.Errorf("a log line of %d bytes (want at most %d): %.600s", len(line), bound, line)
		}
	}
	if !strings.Contains(logs.String(), "signature proxy: refused") {
		t.Errorf("the refusal was not logged: %s", logs.String())
	}
}
