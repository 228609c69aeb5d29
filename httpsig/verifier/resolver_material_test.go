package verifier

import (
	"crypto/ed25519"
	"crypto/x509"
	"errors"
	"strings"
	"testing"

	"github.com/kplug/kplug/httpsig/resolverapi"
)

// TestResolverAnswerMaterial: an answer is used when its algorithm fits its material (a
// public key for an asymmetric algorithm, a secret or a derived key for hmac-sha256) and
// refused as unusable when it does not. Regression: the test of fit was inverted, so every
// well-formed answer was refused (503, "does not fit the material it sent") and every
// misfit accepted.
func TestResolverAnswerMaterial(t *testing.T) {
	t.Parallel()
	pub, _, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	public := &resolverapi.ResolveKeyResponse_PublicKey{PublicKey: der}
	secret := &resolverapi.ResolveKeyResponse_Secret{Secret: []byte("0123456789abcdef0123456789abcdef")}
	derived := &resolverapi.ResolveKeyResponse_DerivedKey{DerivedKey: &resolverapi.DerivedKey{Key: []byte("root")}}
	r := &resolverClient{cfg: &resolverAuthenticator{name: "r"}}
	for _, tc := range []struct {
		name      string
		algorithm string
		material  any
		fits      bool
	}{
		{"hmac secret", "hmac-sha256", secret, true},
		{"hmac derived key", "hmac-sha256", derived, true},
		{"ed25519 public key", "ed25519", public, true},
		{"hmac with a public key", "hmac-sha256", public, false},
		{"ed25519 with a secret", "ed25519", secret, false},
		{"ecdsa with a derived key", "ecdsa-p256-sha256", derived, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := &resolverapi.ResolveKeyResponse{Algorithm: tc.algorithm, User: &resolverapi.UserInfo{Username: "alice"}}
			switch m := tc.material.(type) {
			case *resolverapi.ResolveKeyResponse_PublicKey:
				resp.Material = m
			case *resolverapi.ResolveKeyResponse_Secret:
				resp.Material = m
			case *resolverapi.ResolveKeyResponse_DerivedKey:
				resp.Material = m
			}
			k, err := r.check(resp)
			if tc.fits {
				if err != nil || k.algorithm != tc.algorithm || k.user.Username != "alice" {
					t.Fatalf("check = %+v, %v; want the key accepted", k, err)
				}
				return
			}
			var bad *badAnswer
			if !errors.As(err, &bad) || !strings.Contains(err.Error(), `algorithm "`+tc.algorithm+`" does not fit the material it sent`) {
				t.Fatalf("check = %+v, %v; want an unusable answer: algorithm %q does not fit the material it sent", k, err, tc.algorithm)
			}
		})
	}
}
