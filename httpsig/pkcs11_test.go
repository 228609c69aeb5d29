//go:build cgo

package httpsig_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/kplug/kplug/httpsig"
	"github.com/kplug/kplug/internal/testkit/softhsm"
	"github.com/kplug/kplug/keys"
)

// TestPKCS11Keys signs with keys that never leave a SoftHSM2 token: ECDSA P-256, whose
// PKCS#11 signatures come back as ASN.1 DER and must go on the wire as r||s, and RSA-2048
// under RSASSA-PSS with SHA-512 and a 64-byte salt.
func TestPKCS11Keys(t *testing.T) {
	tok, pinFile := softhsm.NewTestToken(t, "httpsig-test")
	for _, tc := range []struct{ kind, alg string }{{"ecdsa-p256", "ecdsa-p256-sha256"}, {"rsa-2048", "rsa-pss-sha512"}} {
		t.Run(tc.kind, func(t *testing.T) {
			pub, err := tok.Generate(tc.kind, "key-"+tc.kind)
			if err != nil {
				t.Fatal(err)
			}
			key, closer, err := keys.OpenSigner(tok.URI("key-"+tc.kind, pinFile), keys.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = closer.Close() }()
			s, err := httpsig.NewSigner(httpsig.SignerOptions{
				Key:     httpsig.Key{Signer: key, KeyID: "token-key"},
				Headers: map[string]string{httpsig.AudienceHeader: "https://cluster.example"},
			})
			if err != nil {
				t.Fatal(err)
			}
			if s.Algorithm() != tc.alg {
				t.Fatalf("Algorithm() = %q, want %q", s.Algorithm(), tc.alg)
			}
			req, _ := http.NewRequest(http.MethodPost, "https://cluster.example/api/v1/namespaces/default/configmaps", strings.NewReader(`{}`))
			req.Header.Set("User-Agent", "test")
			if err := s.Sign(req); err != nil {
				t.Fatal(err)
			}
			policy := httpsig.Policy{RequiredHeaders: map[string][]string{httpsig.AudienceHeader: {"https://cluster.example"}}}
			if _, err := httpsig.Verify(req, policy, func(*httpsig.Signature) (any, error) { return pub, nil }); err != nil {
				t.Error(err)
			}
		})
	}
}
