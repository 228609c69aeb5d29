package httpsig_test

import (
	"crypto/ed25519"
	"fmt"
	"net/http"
	"strings"

	"github.com/kplug/kplug/httpsig"
)

// A client signs a request for one cluster; the server verifies it against its policy and
// the key the keyid names.
func Example() {
	key := ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize)) // a real key is generated or loaded
	signer, err := httpsig.NewSigner(httpsig.SignerOptions{
		Key:     httpsig.Key{Signer: key, KeyID: "team-a/laptop-7"},
		Headers: map[string]string{httpsig.AudienceHeader: "https://prod.example"},
	})
	if err != nil {
		panic(err)
	}
	req, _ := http.NewRequest(http.MethodPost, "https://prod.example:6443/api/v1/namespaces/default/configmaps",
		strings.NewReader(`{"kind":"ConfigMap"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "kubectl/v1.36.3")
	if err := signer.Sign(req); err != nil {
		panic(err)
	}
	covered, _, _ := strings.Cut(req.Header.Get("Signature-Input"), ";")
	fmt.Println(covered)

	policy := httpsig.Policy{RequiredHeaders: map[string][]string{httpsig.AudienceHeader: {"https://prod.example"}}}
	sig, err := httpsig.Verify(req, policy, func(s *httpsig.Signature) (any, error) {
		if s.KeyID != "team-a/laptop-7" {
			return nil, fmt.Errorf("unknown key")
		}
		return key.Public(), nil
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("accepted", sig.KeyID, sig.Algorithm)
	// Output:
	// sig1=("@method" "@authority" "@path" "@query" "content-digest" "content-type" "user-agent" "x-k8s-audience")
	// accepted team-a/laptop-7 ed25519
}
