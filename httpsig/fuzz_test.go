package httpsig

import (
	"crypto/ed25519"
	"net/http"
	"testing"
	"time"

	"github.com/dunglas/httpsfv"
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

// FuzzSignatureParams: the @signature-params line Verify writes from a received
// Signature-Input member is httpsfv's own serialization of it, whatever the member's
// parameters (the signer's serializer for integers and strings, httpsfv for the rest).
func FuzzSignatureParams(f *testing.F) {
	f.Add(`sig1=("@method" "@path" "x-k8s-audience");created=1800000000;keyid="x509-sha256:00";alg="ecdsa-p256-sha256";tag="kubernetes";nonce="n"`)
	f.Add(`sig1=("a\"b" "c\\d");keyid="q\"uo\\te";created=-5;expires=999999999999999`)
	f.Add(`sig1=();flag;tok=abc;dec=1.5;bin=:AAA=:;b=?0`)
	f.Add(`sig1=("x";p=1), sig2=("y");created=0`)
	f.Fuzz(func(t *testing.T, input string) {
		d, err := httpsfv.UnmarshalDictionary([]string{input})
		if err != nil {
			return
		}
		for _, label := range d.Names() {
			m, _ := d.Get(label)
			il, ok := m.(httpsfv.InnerList)
			if !ok {
				continue
			}
			// Verify gets this far only with components that are strings without
			// parameters (parseSignature).
			var components []string
			for _, it := range il.Items {
				if c, isString := it.Value.(string); isString && len(it.Params.Names()) == 0 {
					components = append(components, c)
				}
			}
			if len(components) != len(il.Items) {
				continue
			}
			want, wantErr := httpsfv.Marshal(il)
			got, gotErr := signatureParams(components, il)
			if (wantErr == nil) != (gotErr == nil) || got != want {
				t.Fatalf("member %s: signatureParams %q (%v), httpsfv %q (%v)", label, got, gotErr, want, wantErr)
			}
		}
	})
}
