package modify_test

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"net/http"
	"time"

	"github.com/kplug/kplug/execproxy/modify"
)

func ExampleNewHTTPSig() {
	key := ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize)) // a fixed key, for the example only
	sign, err := modify.NewHTTPSig(modify.HTTPSigOptions{
		Key:   key,
		KeyID: "dave-laptop",
		Now:   func() time.Time { return time.Unix(1795000000, 0) },
	})
	if err != nil {
		panic(err)
	}
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, "https://k8s.example.com/api/v1/namespaces/default/pods?limit=1", nil)
	req.Header.Set("Impersonate-User", "alice")
	if err := sign(req); err != nil {
		panic(err)
	}
	fmt.Println(req.Header.Get("Signature-Input"))
	// Output: kplug=("@method" "@authority" "@path" "@query" "impersonate-user");created=1795000000;keyid="dave-laptop";alg="ed25519"
}
