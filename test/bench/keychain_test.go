//go:build unix

package bench

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/authn/k8schain"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeletv1 "k8s.io/kubelet/config/v1"

	"github.com/kplug/kplug/imagecred"
	"github.com/kplug/kplug/imagecred/keychain"
	"github.com/kplug/kplug/internal/testkit/exectest"
	"github.com/kplug/kplug/internal/testkit/registrytest"
)

// pullFixture is a registry that wants a password, holding one small image (2 layers of
// 1 KiB, so that authentication is a visible share of a pull), and the same puller
// credentials three ways: a provider plugin for kplug's keychain (the bench binary
// re-executed, answering with cacheDuration 1h), a dockerconfigjson pull secret for
// k8schain, and a static docker config for go-containerregistry's DefaultKeychain.
type pullFixture struct {
	ref      name.Reference
	fake     *exectest.Plugin
	provider kubeletv1.CredentialProvider
	binDir   string
	secrets  []corev1.Secret
}

func newPullFixture(b *testing.B) *pullFixture {
	b.Helper()
	reg := registrytest.Start(b)
	refStr := reg.Host + "/team/app:v1"
	reg.Push(b, refStr, 1024, 2)
	ref, err := name.ParseReference(refStr, name.Insecure)
	if err != nil {
		b.Fatal(err)
	}
	f := &pullFixture{ref: ref, binDir: b.TempDir()}
	f.fake = exectest.New(b).Stdout(fmt.Sprintf(`{"kind":"CredentialProviderResponse","apiVersion":"credentialprovider.kubelet.k8s.io/v1","cacheKeyType":"Registry","cacheDuration":"1h","auth":{%q:{"username":"puller","password":%q}}}`,
		reg.Host, reg.PullerPassword))
	if err := os.Symlink(f.fake.Path(), filepath.Join(f.binDir, "registry-login")); err != nil {
		b.Fatal(err)
	}
	f.provider = kubeletv1.CredentialProvider{
		Name: "registry-login", MatchImages: []string{reg.Host}, APIVersion: imagecred.APIVersionV1,
		DefaultCacheDuration: &metav1.Duration{Duration: time.Hour},
	}
	for _, e := range f.fake.Env() {
		k, v, _ := strings.Cut(e, "=")
		f.provider.Env = append(f.provider.Env, kubeletv1.ExecEnvVar{Name: k, Value: v})
	}
	dockerConfig := fmt.Sprintf(`{"auths":{%q:{"username":"puller","password":%q}}}`, reg.Host, reg.PullerPassword)
	f.secrets = []corev1.Secret{{
		ObjectMeta: metav1.ObjectMeta{Name: "pull", Namespace: "team"},
		Type:       corev1.SecretTypeDockerConfigJson,
		Data:       map[string][]byte{corev1.DockerConfigJsonKey: []byte(dockerConfig)},
	}}
	home := b.TempDir()
	if err := os.MkdirAll(filepath.Join(home, ".docker"), 0o700); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, ".docker", "config.json"), []byte(dockerConfig), 0o600); err != nil {
		b.Fatal(err)
	}
	b.Setenv("HOME", home)
	b.Setenv("DOCKER_CONFIG", filepath.Join(home, ".docker"))
	return f
}

// kplug is a keychain over a fresh Keyring: a new cache, so its first pull runs the plugin.
func (f *pullFixture) kplug(b *testing.B) authn.Keychain {
	k, err := imagecred.New(imagecred.Options{Config: &imagecred.Config{Providers: []kubeletv1.CredentialProvider{f.provider}}, BinDir: f.binDir})
	if err != nil {
		b.Fatal(err)
	}
	return keychain.New(k, keychain.Options{})
}

func (f *pullFixture) k8schain(b *testing.B) authn.Keychain {
	kc, err := k8schain.NewFromPullSecrets(b.Context(), f.secrets)
	if err != nil {
		b.Fatal(err)
	}
	return kc
}

// pull fetches the manifest, the config and every layer.
func (f *pullFixture) pull(b *testing.B, kc authn.Keychain) {
	img, err := remote.Image(f.ref, remote.WithAuthFromKeychain(kc))
	if err != nil {
		b.Fatal(err)
	}
	if _, err := img.RawConfigFile(); err != nil {
		b.Fatal(err)
	}
	layers, err := img.Layers()
	if err != nil {
		b.Fatal(err)
	}
	for _, l := range layers {
		rc, err := l.Compressed()
		if err != nil {
			b.Fatal(err)
		}
		_, err = io.Copy(io.Discard, rc)
		rc.Close()
		if err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkKeychainPull is one pull from the registry through each keychain. Cold: a new
// keychain per pull (kplug runs its provider plugin; k8schain parses its pull secret;
// DefaultKeychain reads the docker config on every Resolve, so it has no cold case of its
// own). Warm: one keychain for every pull (kplug answers from its cache).
func BenchmarkKeychainPull(b *testing.B) {
	f := newPullFixture(b)
	runs := func(b *testing.B, body func()) {
		before := f.fake.Runs()
		for b.Loop() {
			body()
		}
		b.ReportMetric(float64(f.fake.Runs()-before)/float64(b.N), "plugin-runs/op")
	}
	b.Run("cold/kplug", func(b *testing.B) { runs(b, func() { f.pull(b, f.kplug(b)) }) })
	b.Run("cold/k8schain", func(b *testing.B) { runs(b, func() { f.pull(b, f.k8schain(b)) }) })
	warmKplug, warmK8schain := f.kplug(b), f.k8schain(b)
	f.pull(b, warmKplug)
	b.Run("warm/kplug", func(b *testing.B) { runs(b, func() { f.pull(b, warmKplug) }) })
	b.Run("warm/k8schain", func(b *testing.B) { runs(b, func() { f.pull(b, warmK8schain) }) })
	b.Run("warm/default-keychain", func(b *testing.B) { runs(b, func() { f.pull(b, authn.DefaultKeychain) }) })
}

// BenchmarkKeychainResolve is the keychain's own share of a pull: one Resolve of the
// repository, on the same fixture.
func BenchmarkKeychainResolve(b *testing.B) {
	f := newPullFixture(b)
	repo := f.ref.Context()
	resolve := func(b *testing.B, kc authn.Keychain) {
		auth, err := kc.Resolve(repo)
		if err != nil || auth == authn.Anonymous {
			b.Fatalf("Resolve: %v, %v", auth, err)
		}
	}
	b.Run("cold/kplug", func(b *testing.B) {
		for b.Loop() {
			resolve(b, f.kplug(b))
		}
	})
	b.Run("cold/k8schain", func(b *testing.B) {
		for b.Loop() {
			resolve(b, f.k8schain(b))
		}
	})
	for _, kc := range []struct {
		name string
		kc   authn.Keychain
	}{{"kplug", f.kplug(b)}, {"k8schain", f.k8schain(b)}, {"default-keychain", authn.DefaultKeychain}} {
		resolve(b, kc.kc)
		b.Run("warm/"+kc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				resolve(b, kc.kc)
			}
		})
	}
}

// BenchmarkKeychainConcurrentPulls is 16 pulls of one image at once through a new
// keychain, as when a deployment's replicas start on one node: kplug runs the plugin once
// for all of them (plugin-runs/op 1).
func BenchmarkKeychainConcurrentPulls(b *testing.B) {
	const n = 16
	f := newPullFixture(b)
	run := func(b *testing.B, newKeychain func(*testing.B) authn.Keychain) {
		before := f.fake.Runs()
		for b.Loop() {
			kc := newKeychain(b)
			var wg sync.WaitGroup
			for range n {
				wg.Go(func() { f.pull(b, kc) })
			}
			wg.Wait()
		}
		b.ReportMetric(float64(f.fake.Runs()-before)/float64(b.N), "plugin-runs/op")
	}
	b.Run("kplug", func(b *testing.B) { run(b, f.kplug) })
	b.Run("k8schain", func(b *testing.B) { run(b, f.k8schain) })
}
