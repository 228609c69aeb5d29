//go:build unix

package imagecred

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeletv1 "k8s.io/kubelet/config/v1"

	"github.com/kplug/kplug/internal/testkit/exectest"
)

// fixture is a bin directory of fake plugins, a clock, a metrics registry and fake
// service accounts, from which tests build Keyrings.
type fixture struct {
	t        *testing.T
	dir      string
	clock    *clock
	reg      *prometheus.Registry
	accounts *fakeAccounts
	fakes    map[string]*exectest.Plugin
}

func newFixture(t *testing.T) *fixture {
	return &fixture{
		t: t, dir: t.TempDir(), clock: &clock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)},
		reg: prometheus.NewRegistry(), accounts: newFakeAccounts(), fakes: map[string]*exectest.Plugin{},
	}
}

// provider installs a fake plugin called name that prints response, an exectest template
// ({{index .Request "serviceAccountToken"}} is the token it was given).
func (f *fixture) provider(name, response string, matchImages ...string) kubeletv1.CredentialProvider {
	f.t.Helper()
	fake := exectest.New(f.t).Stdout(response)
	if err := os.Symlink(fake.Path(), filepath.Join(f.dir, name)); err != nil {
		f.t.Fatal(err)
	}
	f.fakes[name] = fake
	if len(matchImages) == 0 {
		matchImages = []string{"*.registry.io", "registry.io"}
	}
	c := kubeletv1.CredentialProvider{
		Name: name, MatchImages: matchImages, APIVersion: APIVersionV1,
		DefaultCacheDuration: &metav1.Duration{Duration: 10 * time.Minute},
	}
	for _, e := range fake.Env() {
		k, v, _ := strings.Cut(e, "=")
		c.Env = append(c.Env, kubeletv1.ExecEnvVar{Name: k, Value: v})
	}
	return c
}

// fake is the plugin installed as name.
func (f *fixture) fake(name string) *exectest.Plugin { return f.fakes[name] }

func (f *fixture) execs(name string) int { return f.fakes[name].Runs() }

// requests are the requests plugin name read, one per run, without their newlines.
func (f *fixture) requests(name string) []string {
	var reqs []string
	for _, c := range f.fakes[name].Calls() {
		reqs = append(reqs, strings.TrimSuffix(c.Stdin, "\n"))
	}
	return reqs
}

func (f *fixture) keyring(o Options, providers ...kubeletv1.CredentialProvider) *Keyring {
	f.t.Helper()
	o.Config = &Config{Providers: providers, Hash: "sha256:test"}
	o.BinDir = f.dir
	o.Now = f.clock.now
	m, err := NewMetrics(f.reg)
	if err != nil {
		f.t.Fatal(err)
	}
	o.Metrics = m
	if o.ServiceAccounts == nil {
		o.ServiceAccounts = f.accounts
	}
	k, err := New(o)
	if err != nil {
		f.t.Fatal(err)
	}
	return k
}

func (f *fixture) lookup(k *Keyring, image string, pod *Pod) []Credential {
	f.t.Helper()
	creds, err := k.Lookup(f.t.Context(), image, pod)
	if err != nil {
		f.t.Fatalf("Lookup(%q): %v", image, err)
	}
	return creds
}

// waiters is how many callers wait for the plugin run of the keyring's first provider for
// image (a request without a service account).
func waiters(t *testing.T, k *Keyring, image string) int {
	key, err := cacheKey(image, "")
	if err != nil {
		t.Fatal(err)
	}
	return k.entries[0].Provider.(*cachingProvider).flights.Waiters(key)
}
