package imagecred_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeletv1 "k8s.io/kubelet/config/v1"

	"github.com/kplug/kplug/imagecred"
	"github.com/kplug/kplug/imagecred/plugin"
)

// The pipeline by hand: a validated configuration, an in-process plugin as the source, the
// kubelet's cache around it, a Keyring over it, and the credentials as docker config JSON.
// New builds the same from a config file, with each plugin run from a bin directory.
func Example() {
	// Configuration, as in a kubelet CredentialProviderConfig, validated once.
	cfg := &imagecred.Config{Providers: []kubeletv1.CredentialProvider{{
		Name:                 "static",
		MatchImages:          []string{"*.registry.io"},
		DefaultCacheDuration: &metav1.Duration{Duration: 10 * time.Minute},
		APIVersion:           imagecred.APIVersionV1,
	}}}
	if err := cfg.Validate(); err != nil {
		fmt.Println(err)
		return
	}
	static := cfg.Providers[0]

	// Source: an SDK plugin, called in-process instead of run as a binary.
	var runs atomic.Int32
	answer := func(_ context.Context, req *plugin.Request) (*plugin.Response, error) {
		runs.Add(1)
		registry, _, _ := strings.Cut(req.Image, "/")
		return &plugin.Response{
			CacheKeyType: plugin.CacheRegistry,
			Auth:         map[string]plugin.AuthConfig{registry: {Username: "robot", Password: "s3cret"}},
		}, nil
	}
	p := imagecred.FuncProvider(answer) // a Provider, like Plugin

	// Decorator: the kubelet's cache; the answer is for the whole registry.
	p = imagecred.WithCache(p, imagecred.CacheOptions{Provider: static.Name, DefaultTTL: static.DefaultCacheDuration.Duration})

	// Keyring: matchImages, then the kubelet's merge.
	keyring := imagecred.NewKeyring(imagecred.KeyringEntry{Config: static, Provider: p})
	for _, image := range []string{"a.registry.io/team/app:v1", "a.registry.io/team/other", "quay.io/app"} {
		creds, err := keyring.Lookup(context.Background(), image, nil)
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("%s: %d credentials\n", image, len(creds))
		if image == "a.registry.io/team/app:v1" {
			_, _ = os.Stdout.Write(imagecred.DockerConfigJSON(creds))
		}
	}
	fmt.Println("plugin runs:", runs.Load())
	// Output:
	// a.registry.io/team/app:v1: 1 credentials
	// {"auths":{"a.registry.io":{"username":"robot","password":"s3cret","auth":"cm9ib3Q6czNjcmV0"}}}
	// a.registry.io/team/other: 1 credentials
	// quay.io/app: 0 credentials
	// plugin runs: 1
}

// Providers see the normalised repository, and matchImages patterns match it label by label.
func ExampleMatchImage() {
	image, _ := imagecred.NormalizeImage("123456789012.dkr.ecr.eu-west-1.amazonaws.com/team/app:v1")
	fmt.Println(image)
	for _, pattern := range []string{"*.dkr.ecr.*.amazonaws.com", "*.amazonaws.com", "123456789012.dkr.ecr.eu-west-1.amazonaws.com/team"} {
		ok, _ := imagecred.MatchImage(pattern, image)
		fmt.Println(pattern, ok)
	}
	// Output:
	// 123456789012.dkr.ecr.eu-west-1.amazonaws.com/team/app
	// *.dkr.ecr.*.amazonaws.com true
	// *.amazonaws.com false
	// 123456789012.dkr.ecr.eu-west-1.amazonaws.com/team true
}
