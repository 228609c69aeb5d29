package verifier

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"errors"
	"strings"
	"testing"

	"github.com/kplug/kplug/httpsig/resolverapi"
)

// TestResolverAnswerMaterialFitsAlgorithm: an answer whose material is what its algorithm
// verifies with is taken, and only such an answer. Regression: check compared "no public
// key" with "not hmac-sha256", so it refused every answer that fit (a secret or derived
// key for hmac-sha256, a public key for ECDSA) as "does not fit the material it sent",
// and took those that did not; the e2e test of docs/http-signatures.md's AWS how-to got
// 503 for every request.
func TestResolverAnswerMaterialFitsAlgorithm(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKIXPublicKey(key.Public())
	if err != nil {
		t.Fatal(err)
	}
	public := &resolverapi.ResolveKeyResponse_PublicKey{PublicKey: der}
	secret := &resolverapi.ResolveKeyResponse_Secret{Secret: []byte("a secret of thirty-two bytes....")}
	derived := &resolverapi.ResolveKeyResponse_DerivedKey{DerivedKey: &resolverapi.DerivedKey{Key: []byte("root")}}
	r := &resolverClient{cfg: &resolverAuthenticator{name: "keys"}}
	for _, tc := range []struct {
		name      string
		algorithm string
		material  any
		fits      bool
	}{
		{"public key, ecdsa-p256-sha256", "ecdsa-p256-sha256", public, true},
		{"secret, hmac-sha256", "hmac-sha256", secret, true},
		{"derived key, hmac-sha256", "hmac-sha256", derived, true},
		{"public key, hmac-sha256", "hmac-sha256", public, false},
		{"secret, ecdsa-p256-sha256", "ecdsa-p256-sha256", secret, false},
		{"derived key, ed25519", "ed25519", derived, false},
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
				if err != nil || k.user.Username != "alice" {
					t.Fatalf("check: %+v, %v; want the key taken", k, err)
				}
				return
			}
			var bad *badAnswer
			if !errors.As(err, &bad) || !strings.Contains(err.Error(), `algorithm "`+tc.algorithm+`" does not fit the material it sent`) {
				t.Fatalf("check: %v; want the answer refused as not fitting", err)
			}
		})
	}
}
