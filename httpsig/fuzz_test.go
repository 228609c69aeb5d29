package httpsig

import (
	"crypto/ed25519"
	"net/http"
	"testing"
	"time"
)

// FuzzVerify feeds arbitrary Signature-Input, Signature, Content-Digest and
// Signature-Certificate values to Verify: it must refuse them without panicking, and
// never accept a signature the key did not make.
func FuzzVerify(f *testing.F) {
	_, priv, _ := ed25519.GenerateKey(nil)
	s, err := NewSigner(SignerOptions{Key: Key{Signer: priv, KeyID: "k"}, Headers: map[string]string{AudienceHeader: audience}, Now: func() time.Time { return testNow }})
	if err != nil {
		f.Fatal(err)
	}
	req := testRequest(http.MethodGet, "/api?x=1", "")
	if err := s.Sign(req); err != nil {
		f.Fatal(err)
	}
	f.Add(req.Header.Get("Signature-Input"), req.Header.Get("Signature"), "", "")
	f.Add(`sig1=("@method";req "x");created=1;keyid="x509-sha256:00"`, "sig1=:AAAA:", "sha-256=:AA==:", ":AAAA:")
	f.Add(`a=(), b=("@query"), c=1`, `a=:=:, b=?1`, "sha-512=(1 2)", "x")
	other, _, _ := ed25519.GenerateKey(nil)
	f.Fuzz(func(t *testing.T, input, signature, digest, cert string) {
		r := testRequest(http.MethodGet, "/api?x=1", "")
		r.Header.Set(AudienceHeader, audience)
		r.Header.Set("Signature-Input", input)
		r.Header.Set("Signature", signature)
		if digest != "" {
			r.Header.Set("Content-Digest", digest)
		}
		if cert != "" {
			r.Header.Set(CertificateHeader, cert)
		}
		sig, err := Verify(r, testPolicy(), publicResolver(other))
		if err == nil {
			t.Fatalf("accepted %+v under a key that signed nothing", sig)
		}
	})
}
