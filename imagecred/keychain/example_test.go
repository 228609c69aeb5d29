package keychain_test

import (
	"context"
	"fmt"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeletv1 "k8s.io/kubelet/config/v1"

	"github.com/kplug/kplug/imagecred"
	"github.com/kplug/kplug/imagecred/keychain"
	"github.com/kplug/kplug/imagecred/plugin"
)

// A Keyring as the kubelet would build it (here with an in-process plugin; imagecred.New
// builds one from a CredentialProviderConfig and a bin directory), as a go-containerregistry
// keychain in front of another. Pass the result to remote.WithAuthFromKeychain or
// crane.WithAuthFromKeychain; authn.DefaultKeychain is the usual fallback.
func Example() {
	provider := kubeletv1.CredentialProvider{
		Name:                 "registry-robot",
		MatchImages:          []string{"*.registry.example"},
		DefaultCacheDuration: &metav1.Duration{Duration: 10 * time.Minute},
		APIVersion:           imagecred.APIVersionV1,
	}
	robot := func(context.Context, *plugin.Request) (*plugin.Response, error) {
		return &plugin.Response{
			CacheKeyType: plugin.CacheRegistry,
			Auth:         map[string]plugin.AuthConfig{"*.registry.example": {Username: "robot", Password: "s3cret"}},
		}, nil
	}
	keyring := imagecred.NewKeyring(imagecred.KeyringEntry{
		Config:   provider,
		Provider: imagecred.WithCache(imagecred.FuncProvider(robot), imagecred.CacheOptions{Provider: provider.Name, DefaultTTL: 10 * time.Minute}),
	})

	kc := authn.NewMultiKeychain(
		keychain.New(keyring, keychain.Options{}), // the kubelet's providers first
		fallback{}, // then, say, authn.DefaultKeychain
	)
	for _, ref := range []string{"eu.registry.example/team/app:v1", "quay.io/team/app:v1"} {
		r, err := name.ParseReference(ref)
		if err != nil {
			fmt.Println(err)
			return
		}
		auth, err := kc.Resolve(r.Context())
		if err != nil {
			fmt.Println(err)
			return
		}
		cfg, err := authn.Authorization(context.Background(), auth)
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("%s: %s\n", r.Context().RegistryStr(), cfg.Username)
	}
	// Output:
	// eu.registry.example: robot
	// quay.io: from-the-docker-config
}

// fallback stands for authn.DefaultKeychain, which reads the user's docker config.
type fallback struct{}

func (fallback) Resolve(authn.Resource) (authn.Authenticator, error) {
	return &authn.Basic{Username: "from-the-docker-config", Password: "x"}, nil
}
