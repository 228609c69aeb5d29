//go:build unix

package keychain_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/crane"
	"github.com/google/go-containerregistry/pkg/name"
	ggcrv1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kubeletv1 "k8s.io/kubelet/config/v1"

	"github.com/kplug/kplug/imagecred"
	"github.com/kplug/kplug/imagecred/keychain"
	"github.com/kplug/kplug/internal/testkit/exectest"
	"github.com/kplug/kplug/internal/testkit/poll"
	"github.com/kplug/kplug/internal/testkit/registrytest"
)

// answer is a provider plugin's answer giving the registry's puller credentials for host,
// for the whole registry, cached an hour.
func answer(host string, puller authn.Basic) string {
	return fmt.Sprintf(`{"kind":"CredentialProviderResponse","apiVersion":"credentialprovider.kubelet.k8s.io/v1","cacheKeyType":"Registry","cacheDuration":"1h","auth":{%q:{"username":%q,"password":%q}}}`,
		host, puller.Username, puller.Password)
}

// installProvider puts a fake plugin named name into a new bin directory and returns
// the provider's configuration (matching match) and the directory.
func installProvider(t *testing.T, fake *exectest.Plugin, name, match string) (kubeletv1.CredentialProvider, string) {
	t.Helper()
	dir := t.TempDir()
	if err := os.Symlink(fake.Path(), filepath.Join(dir, name)); err != nil {
		t.Fatal(err)
	}
	c := kubeletv1.CredentialProvider{
		Name: name, MatchImages: []string{match}, APIVersion: imagecred.APIVersionV1,
		DefaultCacheDuration: &metav1.Duration{Duration: time.Minute},
	}
	for _, e := range fake.Env() {
		k, v, _ := strings.Cut(e, "=")
		c.Env = append(c.Env, kubeletv1.ExecEnvVar{Name: k, Value: v})
	}
	return c, dir
}

func newKeyring(t *testing.T, o imagecred.Options, providers ...kubeletv1.CredentialProvider) *imagecred.Keyring {
	t.Helper()
	o.Config = &imagecred.Config{Providers: providers}
	k, err := imagecred.New(o)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func reference(t *testing.T, ref string) name.Reference {
	t.Helper()
	r, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// pull fetches the image's manifest, config and every layer, as a runtime does.
func pull(ctx context.Context, r name.Reference, kc authn.Keychain) (ggcrv1.Hash, error) {
	img, err := remote.Image(r, remote.WithContext(ctx), remote.WithAuthFromKeychain(kc))
	if err != nil {
		return ggcrv1.Hash{}, err
	}
	if _, err := img.RawConfigFile(); err != nil {
		return ggcrv1.Hash{}, err
	}
	layers, err := img.Layers()
	if err != nil {
		return ggcrv1.Hash{}, err
	}
	for _, l := range layers {
		rc, err := l.Compressed()
		if err != nil {
			return ggcrv1.Hash{}, err
		}
		_, err = io.Copy(io.Discard, rc)
		rc.Close()
		if err != nil {
			return ggcrv1.Hash{}, err
		}
	}
	return img.Digest()
}

// TestKeychainPull pulls from a registry that wants a password with go-containerregistry's
// own clients, remote.Image and crane, given only the Keychain: the provider plugin runs
// once, and its answer serves both clients from the Keyring's cache.
func TestKeychainPull(t *testing.T) {
	reg := registrytest.Start(t)
	ref := reg.Host + "/team/app:v1"
	pushed := reg.Push(t, ref, 1024, 2)
	fake := exectest.New(t).Stdout(answer(reg.Host, reg.Puller()))
	provider, binDir := installProvider(t, fake, "registry-login", reg.Host)
	kc := keychain.New(newKeyring(t, imagecred.Options{BinDir: binDir}, provider), keychain.Options{})
	r := reference(t, ref)

	if _, err := remote.Image(r); err == nil {
		t.Fatal("an anonymous pull succeeded; the registry does not check credentials")
	}
	got, err := pull(t.Context(), r, kc)
	if err != nil || got != pushed {
		t.Fatalf("remote.Image through the keychain: %v, %v; want %v", got, err, pushed)
	}
	img, err := crane.Pull(ref, crane.Insecure, crane.WithAuthFromKeychain(kc))
	if err != nil {
		t.Fatalf("crane.Pull through the keychain: %v", err)
	}
	if d, err := img.Digest(); err != nil || d != pushed {
		t.Errorf("crane pulled %v, %v; want %v", d, err, pushed)
	}
	if n := fake.Runs(); n != 1 {
		t.Errorf("the plugin ran %d times for two pulls of one registry, want 1 (its answer is cached)", n)
	}
	// The plugin was asked about the repository, normalised as the kubelet does.
	if calls := fake.Calls(); !strings.Contains(calls[0].Stdin, `"image":"`+reg.Host+`/team/app"`) {
		t.Errorf("the plugin read %s", calls[0].Stdin)
	}
}

// TestKeychainComposesWithDefaultKeychain puts the Keychain beside go-containerregistry's
// DefaultKeychain reading a docker config that holds a wrong password for the registry:
// whichever comes first in NewMultiKeychain answers, and a registry the providers do not
// match falls through to the docker config.
func TestKeychainComposesWithDefaultKeychain(t *testing.T) {
	reg := registrytest.Start(t)
	ref := reg.Host + "/team/app:v1"
	pushed := reg.Push(t, ref, 512, 1)
	other := registrytest.Start(t)
	otherRef := other.Host + "/team/other:v1"
	otherPushed := other.Push(t, otherRef, 512, 1)

	dockerDir := t.TempDir()
	config := fmt.Sprintf(`{"auths":{%q:{"username":"puller","password":"wrong"},%q:{"username":"puller","password":%q}}}`,
		reg.Host, other.Host, other.PullerPassword)
	if err := os.WriteFile(filepath.Join(dockerDir, "config.json"), []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("HOME", t.TempDir())
	t.Setenv("DOCKER_CONFIG", dockerDir)

	fake := exectest.New(t).Stdout(answer(reg.Host, reg.Puller()))
	provider, binDir := installProvider(t, fake, "registry-login", reg.Host)
	kc := keychain.New(newKeyring(t, imagecred.Options{BinDir: binDir}, provider), keychain.Options{})

	if got, err := pull(t.Context(), reference(t, ref), authn.NewMultiKeychain(kc, authn.DefaultKeychain)); err != nil || got != pushed {
		t.Errorf("providers first: %v, %v; want %v", got, err, pushed)
	}
	if _, err := pull(t.Context(), reference(t, ref), authn.NewMultiKeychain(authn.DefaultKeychain, kc)); err == nil {
		t.Error("docker config first: the pull succeeded with the config's wrong password")
	}
	if got, err := pull(t.Context(), reference(t, otherRef), authn.NewMultiKeychain(kc, authn.DefaultKeychain)); err != nil || got != otherPushed {
		t.Errorf("a registry no provider matches: %v, %v; want the docker config's credentials to pull %v", got, err, otherPushed)
	}
	if reg.SawPassword(other.PullerPassword) || other.SawPassword(reg.PullerPassword) {
		t.Error("a registry received the other registry's password")
	}
}

// TestKeychainConcurrentPullsRunThePluginOnce starts N pulls of one image at once while
// the plugin's only run is held: every pull waits for that run, and it is the only one.
func TestKeychainConcurrentPullsRunThePluginOnce(t *testing.T) {
	const n = 16
	reg := registrytest.Start(t)
	ref := reg.Host + "/team/app:v1"
	pushed := reg.Push(t, ref, 1024, 2)
	fake := exectest.New(t).Stdout(answer(reg.Host, reg.Puller())).Hold()
	provider, binDir := installProvider(t, fake, "registry-login", reg.Host)
	counting := &countingKeychain{Keychain: keychain.New(newKeyring(t, imagecred.Options{BinDir: binDir}, provider), keychain.Options{})}
	r := reference(t, ref)

	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		wg.Go(func() {
			got, err := pull(t.Context(), r, counting)
			if err == nil && got != pushed {
				err = fmt.Errorf("pulled %v, want %v", got, pushed)
			}
			errs <- err
		})
	}
	// Every pull has asked for credentials while the plugin's run is held.
	poll.Until(t, "every pull to ask while the plugin runs", func() bool { return counting.resolves.Load() == n && fake.Runs() == 1 })
	fake.Release()
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if runs := fake.Runs(); runs != 1 {
		t.Errorf("%d concurrent pulls ran the plugin %d times, want 1", n, runs)
	}
}

type countingKeychain struct {
	*keychain.Keychain
	resolves atomic.Int32
}

func (c *countingKeychain) Resolve(r authn.Resource) (authn.Authenticator, error) {
	c.resolves.Add(1)
	return c.Keychain.Resolve(r)
}

// ResolveContext counts too: go-containerregistry calls it when a keychain has it.
func (c *countingKeychain) ResolveContext(ctx context.Context, r authn.Resource) (authn.Authenticator, error) {
	c.resolves.Add(1)
	return c.Keychain.ResolveContext(ctx, r)
}

// TestKeychainServiceAccount resolves for a pod: a provider with tokenAttributes gets the
// pod's token for its audience and the configured annotation; without a pod it does not
// run, the failure goes to OnError, and Resolve falls through with Anonymous.
func TestKeychainServiceAccount(t *testing.T) {
	fake := exectest.New(t).Stdout(`{"kind":"CredentialProviderResponse","apiVersion":"credentialprovider.kubelet.k8s.io/v1","cacheKeyType":"Registry",` +
		`"auth":{"registry.example":{"username":"sa-user","password":"{{index .Request "serviceAccountToken"}}"}}}`)
	provider, binDir := installProvider(t, fake, "workload-identity", "registry.example")
	yes := true
	provider.TokenAttributes = &kubeletv1.ServiceAccountTokenAttributes{
		ServiceAccountTokenAudience: "registry.example", CacheType: kubeletv1.TokenServiceAccountTokenCacheType,
		RequireServiceAccount: &yes, RequiredServiceAccountAnnotationKeys: []string{"registry.example/role"},
	}
	accounts := &staticAccounts{annotations: map[string]string{"registry.example/role": "puller", "unrelated": "x"}}
	keyring := newKeyring(t, imagecred.Options{BinDir: binDir, ServiceAccounts: accounts}, provider)
	repo, err := name.NewRepository("registry.example/team/app")
	if err != nil {
		t.Fatal(err)
	}

	pod := &imagecred.Pod{Namespace: "team", Name: "app-1", UID: "pod-uid", ServiceAccountName: "puller"}
	auth, err := keychain.New(keyring, keychain.Options{Pod: pod}).Resolve(repo)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := authn.Authorization(t.Context(), auth)
	if err != nil || cfg.Username != "sa-user" || cfg.Password != "token-for-registry.example-bound-to-app-1" {
		t.Errorf("for the pod: %+v, %v; want sa-user with the pod's token", cfg, err)
	}
	if calls := fake.Calls(); len(calls) != 1 || !strings.Contains(calls[0].Stdin, `"serviceAccountAnnotations":{"registry.example/role":"puller"}`) {
		t.Errorf("the plugin read %+v; want one request with the configured annotation only", calls)
	}

	var failures []error
	auth, err = keychain.New(keyring, keychain.Options{OnError: func(err error) { failures = append(failures, err) }}).Resolve(repo)
	if err != nil || auth != authn.Anonymous {
		t.Errorf("without a pod: %v, %v; want Anonymous", auth, err)
	}
	if len(failures) != 1 || !errors.Is(failures[0], imagecred.ErrNoServiceAccount) {
		t.Errorf("OnError got %v, want %v", failures, imagecred.ErrNoServiceAccount)
	}
	if fake.Runs() != 1 {
		t.Errorf("the plugin ran without a service account")
	}
}

// staticAccounts is one service account with annotations; its tokens name the audience
// and the pod, so that a test sees which token a plugin got.
type staticAccounts struct{ annotations map[string]string }

func (a *staticAccounts) ServiceAccount(context.Context, string, string) (*imagecred.ServiceAccount, error) {
	return &imagecred.ServiceAccount{UID: types.UID("sa-uid"), Annotations: a.annotations}, nil
}

func (a *staticAccounts) Token(_ context.Context, req imagecred.TokenRequest) (string, error) {
	return "token-for-" + req.Audience + "-bound-to-" + req.PodName, nil
}

// TestKeychainProviderFailure: a failing plugin is reported to OnError, and Resolve returns
// Anonymous, so that a MultiKeychain goes on to its next keychain as the kubelet goes on
// to its other credentials.
func TestKeychainProviderFailure(t *testing.T) {
	fake := exectest.New(t).Exit(3).Stderr("registry login failed")
	provider, binDir := installProvider(t, fake, "broken", "registry.example")
	var failures atomic.Pointer[error]
	kc := keychain.New(newKeyring(t, imagecred.Options{BinDir: binDir}, provider), keychain.Options{
		OnError: func(err error) { failures.Store(&err) },
	})
	repo, err := name.NewRepository("registry.example/team/app")
	if err != nil {
		t.Fatal(err)
	}
	auth, err := authn.NewMultiKeychain(kc, fixed{}).Resolve(repo)
	if err != nil || auth != (fixed{}).auth() {
		t.Errorf("MultiKeychain: %v, %v; want the next keychain's answer", auth, err)
	}
	var perr *imagecred.ProviderError
	if got := failures.Load(); got == nil || !errors.As(*got, &perr) || perr.Provider != "broken" || !strings.Contains(perr.Error(), "registry login failed") {
		t.Errorf("OnError got %v, want the provider's failure", got)
	}
}

type fixed struct{}

var fixedAuth = &authn.Basic{Username: "next"}

func (fixed) auth() authn.Authenticator                           { return fixedAuth }
func (fixed) Resolve(authn.Resource) (authn.Authenticator, error) { return fixedAuth, nil }

// TestKeychainResource: what providers are asked about for each kind of target.
func TestKeychainResource(t *testing.T) {
	fake := exectest.New(t).Stdout(`{"kind":"CredentialProviderResponse","apiVersion":"credentialprovider.kubelet.k8s.io/v1","cacheKeyType":"Image","cacheDuration":"0s","auth":{}}`)
	provider, binDir := installProvider(t, fake, "any", "*")
	provider.MatchImages = []string{"docker.io", "registry.example:5000", "*.example"}
	kc := keychain.New(newKeyring(t, imagecred.Options{BinDir: binDir}, provider), keychain.Options{})
	for _, tc := range []struct {
		target authn.Resource
		asked  string
	}{
		{mustRepo(t, "nginx"), "docker.io/library/nginx"},
		{mustRepo(t, "index.docker.io/team/app"), "docker.io/team/app"},
		{mustRegistry(t, "index.docker.io"), "docker.io"},
		{mustRegistry(t, "registry.example:5000"), "registry.example:5000"},
		{mustRepo(t, "registry.example:5000/team/app"), "registry.example:5000/team/app"},
	} {
		before := fake.Runs()
		if auth, err := kc.Resolve(tc.target); err != nil || auth != authn.Anonymous {
			t.Errorf("Resolve(%s) = %v, %v", tc.target, auth, err)
		}
		calls := fake.Calls()
		if len(calls) != before+1 || !strings.Contains(calls[before].Stdin, `"image":"`+tc.asked+`"`) {
			t.Errorf("Resolve(%s) asked %v, want %q", tc.target, calls[before:], tc.asked)
		}
	}
}

func mustRepo(t *testing.T, s string) authn.Resource {
	t.Helper()
	r, err := name.NewRepository(s)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func mustRegistry(t *testing.T, s string) authn.Resource {
	t.Helper()
	r, err := name.NewRegistry(s)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// A Resource that is not one of go-containerregistry's names is normalised as the kubelet
// normalises an image.
type plainResource struct{ repo, registry string }

func (r plainResource) String() string      { return r.repo }
func (r plainResource) RegistryStr() string { return r.registry }

func TestKeychainPlainResource(t *testing.T) {
	fake := exectest.New(t).Stdout(`{"kind":"CredentialProviderResponse","apiVersion":"credentialprovider.kubelet.k8s.io/v1","cacheKeyType":"Image","cacheDuration":"0s","auth":{}}`)
	provider, binDir := installProvider(t, fake, "any", "docker.io")
	kc := keychain.New(newKeyring(t, imagecred.Options{BinDir: binDir}, provider), keychain.Options{})
	if _, err := kc.Resolve(plainResource{"nginx", "index.docker.io"}); err != nil {
		t.Fatal(err)
	}
	if calls := fake.Calls(); len(calls) != 1 || !strings.Contains(calls[0].Stdin, `"image":"docker.io/library/nginx"`) {
		t.Errorf("asked %v", calls)
	}
	if _, err := kc.Resolve(plainResource{"Not A Repository", "x"}); err == nil || !strings.Contains(err.Error(), "keychain: imagecred: invalid image") {
		t.Errorf("invalid repository: %v", err)
	}
}
