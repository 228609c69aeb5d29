package httpsig

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// verifyingServer verifies every request it gets with key and answers 200, or 401 with
// the refusal.
func verifyingServer(t *testing.T, key any) (*httptest.Server, *atomic.Int64) {
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		p := testPolicy()
		p.Now = time.Now
		if _, err := Verify(r, p, publicResolver(key)); err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		b, _ := io.ReadAll(r.Body)
		_, _ = w.Write(b)
	}))
	t.Cleanup(srv.Close)
	return srv, &n
}

func TestRoundTripEveryAlgorithm(t *testing.T) {
	p256, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	p384, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	_, ed, _ := ed25519.GenerateKey(rand.Reader)
	rsaKey, _ := rsa.GenerateKey(rand.Reader, 2048)
	secret := bytes.Repeat([]byte{7}, 32)
	for _, tc := range []struct {
		alg string
		key Key
		pub any
	}{
		{algECDSAP256, Key{Signer: p256, KeyID: "k"}, p256.Public()},
		{algECDSAP384, Key{Signer: p384, KeyID: "k"}, p384.Public()},
		{algEd25519, Key{Signer: ed, KeyID: "k"}, ed.Public()},
		{algRSAPSS, Key{Signer: rsaKey, KeyID: "k"}, rsaKey.Public()},
		{algHMAC, Key{Secret: secret, KeyID: "k"}, secret},
	} {
		for _, body := range []string{"", `{"kind":"ConfigMap"}`} {
			t.Run(tc.alg+"/body="+body, func(t *testing.T) {
				s, err := NewSigner(SignerOptions{Key: tc.key, Headers: map[string]string{AudienceHeader: audience}})
				if err != nil {
					t.Fatal(err)
				}
				if s.Algorithm() != tc.alg {
					t.Errorf("Algorithm() = %q, want %q", s.Algorithm(), tc.alg)
				}
				srv, _ := verifyingServer(t, tc.pub)
				client := &http.Client{Transport: s.RoundTripper(nil)}
				var rb io.Reader
				if body != "" {
					rb = strings.NewReader(body)
				}
				req, _ := http.NewRequest(http.MethodPost, srv.URL+"/api/v1/namespaces/default/configmaps?fieldManager=kubectl", rb)
				req.Header.Set("Impersonate-User", "alice")
				resp, err := client.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				got, _ := io.ReadAll(resp.Body)
				_ = resp.Body.Close()
				if resp.StatusCode != http.StatusOK || string(got) != body {
					t.Errorf("got %d %q, want 200 %q", resp.StatusCode, got, body)
				}
				if req.Header.Get("Signature") != "" || req.Header.Get(AudienceHeader) != "" {
					t.Error("RoundTripper changed the caller's request")
				}
			})
		}
	}
}

func TestSignRestoresBody(t *testing.T) {
	ec, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	s := newTestSigner(t, ec)
	req, _ := http.NewRequest(http.MethodPut, "https://cluster.example/api", io.NopCloser(strings.NewReader("payload")))
	if err := s.Sign(req); err != nil {
		t.Fatal(err)
	}
	if req.ContentLength != 7 || req.GetBody == nil {
		t.Fatalf("ContentLength %d, GetBody set %v", req.ContentLength, req.GetBody != nil)
	}
	for i := 0; i < 2; i++ {
		b, _ := io.ReadAll(req.Body)
		if string(b) != "payload" {
			t.Fatalf("read %d: body %q", i, b)
		}
		req.Body, _ = req.GetBody()
	}
	if got, want := req.Header.Get("Content-Digest"), contentDigest(held([]byte("payload"))); got != want {
		t.Errorf("Content-Digest %q, want %q", got, want)
	}
}

// TestBodyOverLimitNotSent: a body over MaxBodyBytes is refused and the request never
// reaches the server, and Sign leaves the body readable from its start.
func TestBodyOverLimitNotSent(t *testing.T) {
	ec, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	s := newTestSigner(t, ec)
	srv, hits := verifyingServer(t, ec.Public())
	big := strings.Repeat("x", MaxBodyBytes+1)
	// Unknown length, so the limit is found by reading.
	req, _ := http.NewRequest(http.MethodPost, srv.URL, io.NopCloser(strings.NewReader(big)))
	resp, err := (&http.Client{Transport: s.RoundTripper(nil)}).Do(req)
	if err == nil {
		_ = resp.Body.Close()
	}
	if err == nil || !strings.Contains(err.Error(), "httpsig: request body is over 3145728 bytes, kube-apiserver's limit; the request is not signed") {
		t.Fatalf("got %v", err)
	}
	if hits.Load() != 0 {
		t.Error("the request was sent")
	}
	req, _ = http.NewRequest(http.MethodPost, srv.URL, io.NopCloser(strings.NewReader(big)))
	if err := s.Sign(req); err == nil {
		t.Fatal("Sign accepted the body")
	}
	if b, _ := io.ReadAll(req.Body); len(b) != len(big) || req.Header.Get("Signature") != "" {
		t.Errorf("after refusing: body %d bytes, Signature %q", len(b), req.Header.Get("Signature"))
	}
}

func TestSignReplacesSignatures(t *testing.T) {
	ec, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	s := newTestSigner(t, ec)
	req := testRequest(http.MethodGet, "/api", "")
	req.Header.Set("Signature-Input", `old=("@method");created=1`)
	req.Header.Set("Signature", "old=:AAAA:")
	req.Header.Set(AudienceHeader, "https://other.example")
	if err := s.Sign(req); err != nil {
		t.Fatal(err)
	}
	in := req.Header.Values("Signature-Input")
	if len(in) != 1 || !strings.HasPrefix(in[0], `sig1=("@method" "@authority" "@path" "@query" "user-agent" "x-k8s-audience");created=1800000000;nonce="`) ||
		!strings.HasSuffix(in[0], `";alg="ecdsa-p256-sha256";tag="kubernetes";keyid="test-key"`) {
		t.Errorf("Signature-Input %q", in)
	}
	if got := req.Header.Values(AudienceHeader); len(got) != 1 || got[0] != audience {
		t.Errorf("%s %q, want the configured value", AudienceHeader, got)
	}
	if _, err := Verify(req, testPolicy(), publicResolver(ec.Public())); err != nil {
		t.Error(err)
	}
}

// rawECDSASigner returns r||s, as some hardware interfaces do, instead of DER.
type rawECDSASigner struct{ *ecdsa.PrivateKey }

func (s rawECDSASigner) Sign(r io.Reader, d []byte, _ crypto.SignerOpts) ([]byte, error) {
	der, err := s.PrivateKey.Sign(r, d, crypto.SHA256)
	if err != nil {
		return nil, err
	}
	return fixedECDSA(der, 32)
}

func TestECDSASignatureForms(t *testing.T) {
	ec, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	for name, key := range map[string]crypto.Signer{"DER": ec, "r||s": rawECDSASigner{ec}} {
		t.Run(name, func(t *testing.T) {
			req := testRequest(http.MethodGet, "/api", "")
			if err := newTestSigner(t, key).Sign(req); err != nil {
				t.Fatal(err)
			}
			if _, err := Verify(req, testPolicy(), publicResolver(ec.Public())); err != nil {
				t.Error(err)
			}
		})
	}
}

func TestNewSignerRefuses(t *testing.T) {
	ec, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	p224, _ := ecdsa.GenerateKey(elliptic.P224(), rand.Reader)
	aud := map[string]string{AudienceHeader: audience}
	for _, tc := range []struct {
		name string
		o    SignerOptions
		err  string
	}{
		{"no audience", SignerOptions{Key: Key{Signer: ec, KeyID: "k"}}, "httpsig: signed headers lack X-K8s-Audience"},
		{"empty audience", SignerOptions{Key: Key{Signer: ec, KeyID: "k"}, Headers: map[string]string{AudienceHeader: " "}}, "httpsig: signed header X-K8s-Audience is empty"},
		{"reserved header", SignerOptions{Key: Key{Signer: ec, KeyID: "k"}, Headers: map[string]string{AudienceHeader: audience, "Authorization": "x"}}, `httpsig: signed header "Authorization" is reserved`},
		{"no key", SignerOptions{Headers: aud}, "httpsig: key has neither a signer nor a secret"},
		{"signer and secret", SignerOptions{Key: Key{Signer: ec, Secret: make([]byte, 32), KeyID: "k"}, Headers: aud}, "both a signer and a secret"},
		{"short secret", SignerOptions{Key: Key{Secret: make([]byte, 16), KeyID: "k"}, Headers: aud}, "secret has 16 bytes; hmac-sha256 needs at least 32"},
		{"no key ID", SignerOptions{Key: Key{Signer: ec}, Headers: aud}, "key has neither a certificate nor a key ID"},
		{"P-224", SignerOptions{Key: Key{Signer: p224, KeyID: "k"}, Headers: aud}, "ECDSA key on curve P-224 is not allowed"},
		{"bad label", SignerOptions{Key: Key{Signer: ec, KeyID: "k"}, Headers: aud, Label: "Sig1"}, `label "Sig1" is not a structured field key`},
		{"key ID with a newline", SignerOptions{Key: Key{Signer: ec, KeyID: "a\nb"}, Headers: aud}, "key ID must be printable ASCII"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewSigner(tc.o)
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("got %v, want %q", err, tc.err)
			}
		})
	}
}
