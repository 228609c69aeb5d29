//go:build unix

// Package bench runs kplug's image credential runtime beside the kubelet's own provider
// code (k8s.io/kubernetes/pkg/credentialprovider/plugin) on the same config, plugin and
// images, and checks that both give the same answers.
package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/kplug/kplug/imagecred"
	"github.com/kplug/kplug/internal/testkit/exectest"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/kubernetes/pkg/credentialprovider"
	kubeletplugin "k8s.io/kubernetes/pkg/credentialprovider/plugin"
)

// Two providers, each an exectest fake: "cached" answers with cacheDuration 1h for one
// registry, "uncached" with 0s for another, so every lookup of the latter executes unless
// concurrent lookups share one execution. The verbs are the fakes' environments.
const benchConfig = `apiVersion: kubelet.config.k8s.io/v1
kind: CredentialProviderConfig
providers:
- name: cached
  matchImages: ["cached.registry.io"]
  defaultCacheDuration: 1h
  apiVersion: credentialprovider.kubelet.k8s.io/v1
  env: %[1]s
- name: uncached
  matchImages: ["uncached.registry.io"]
  defaultCacheDuration: 0s
  apiVersion: credentialprovider.kubelet.k8s.io/v1
  env: %[2]s
`

const answer = `{"kind":"CredentialProviderResponse","apiVersion":"credentialprovider.kubelet.k8s.io/v1","cacheKeyType":"Registry","cacheDuration":"%s","auth":{"cached.registry.io":{"username":"u","password":"p"},"uncached.registry.io":{"username":"u","password":"p"}}}`

var (
	setupOnce  sync.Once
	setupErr   error
	fixtureDir string // made by the first fixture, removed by TestMain
)

// setup makes the fixture directory: the test binary as each provider's plugin, and the
// config, registered once with the kubelet, whose providers live in a process-wide
// registry. The kubelet keeps each provider's environment from then on, so the fake
// directory it names is a link in the fixture directory, pointed at each test's own fake.
func setup(fakes map[string]*exectest.Plugin) error {
	setupOnce.Do(func() {
		if fixtureDir, setupErr = os.MkdirTemp("", "kplug-bench-"); setupErr != nil {
			return
		}
		env := map[string]string{}
		for name, fake := range fakes {
			if setupErr = os.Symlink(fake.Path(), filepath.Join(fixtureDir, name)); setupErr != nil {
				return
			}
			var entries []string
			for _, e := range fake.Env() {
				k, v, _ := strings.Cut(e, "=")
				if k == exectest.Env {
					v = filepath.Join(fixtureDir, name+".fake")
				}
				entries = append(entries, fmt.Sprintf("{name: %s, value: %q}", k, v))
			}
			env[name] = "[" + strings.Join(entries, ", ") + "]"
		}
		config := filepath.Join(fixtureDir, "config.yaml")
		if setupErr = os.WriteFile(config, []byte(fmt.Sprintf(benchConfig, env["cached"], env["uncached"])), 0o600); setupErr != nil {
			return
		}
		setupErr = kubeletplugin.RegisterCredentialProviderPlugins(config, fixtureDir, nil, nil)
	})
	if setupErr != nil {
		return setupErr
	}
	for name, fake := range fakes {
		link := filepath.Join(fixtureDir, name+".fake")
		if err := os.Remove(link); err != nil && !os.IsNotExist(err) {
			return err
		}
		if err := os.Symlink(fake.Dir, link); err != nil {
			return err
		}
	}
	return nil
}

func TestMain(m *testing.M) {
	exectest.Main(nil)
	code := m.Run()
	if fixtureDir != "" {
		_ = os.RemoveAll(fixtureDir)
	}
	os.Exit(code)
}

// fixture returns tb's fake plugins, by provider name, a kplug Keyring and the kubelet's
// keyring, both on the bench config.
func fixture(tb testing.TB) (fakes map[string]*exectest.Plugin, kplug *imagecred.Keyring, kubelet credentialprovider.DockerKeyring) {
	tb.Helper()
	fakes = map[string]*exectest.Plugin{
		"cached":   exectest.New(tb).Stdout(fmt.Sprintf(answer, "1h")),
		"uncached": exectest.New(tb).Stdout(fmt.Sprintf(answer, "0s")),
	}
	if err := setup(fakes); err != nil {
		tb.Fatal(err)
	}
	kplug, err := imagecred.New(imagecred.Options{Config: benchKplugConfig(tb), BinDir: fixtureDir})
	if err != nil {
		tb.Fatal(err)
	}
	return fakes, kplug, kubeletplugin.NewExternalCredentialProviderDockerKeyring("", "", "", "")
}

func benchKplugConfig(tb testing.TB) *imagecred.Config {
	tb.Helper()
	cfg, err := imagecred.LoadConfig(filepath.Join(fixtureDir, "config.yaml"))
	if err != nil {
		tb.Fatal(err)
	}
	return cfg
}

// BenchmarkCacheHit is one lookup answered from the provider cache: the path every pull
// of an already-seen registry takes.
func BenchmarkCacheHit(b *testing.B) {
	_, kplug, kubelet := fixture(b)
	const image = "cached.registry.io/team/app"
	ctx := b.Context()
	b.Run("kubelet", func(b *testing.B) {
		if creds, ok := kubelet.Lookup(image); !ok || len(creds) != 1 {
			b.Fatalf("kubelet lookup: %v", creds)
		}
		b.ReportAllocs()
		for b.Loop() {
			kubelet.Lookup(image)
		}
	})
	b.Run("kplug", func(b *testing.B) {
		if creds, err := kplug.LookupRepository(ctx, image, nil); err != nil || len(creds) != 1 {
			b.Fatalf("kplug lookup: %v, %v", creds, err)
		}
		b.ReportAllocs()
		for b.Loop() {
			_, _ = kplug.LookupRepository(ctx, image, nil)
		}
	})
}

// BenchmarkConcurrentLookups is N simultaneous lookups of one image that the plugin says
// not to cache: how many times the plugin runs (execs/op) depends only on how well
// concurrent lookups share one execution. The goal is 1.
func BenchmarkConcurrentLookups(b *testing.B) {
	const n = 16
	const image = "uncached.registry.io/team/app"
	fakes, kplug, kubelet := fixture(b)
	ctx := b.Context()
	run := func(b *testing.B, lookup func()) {
		before := fakes["uncached"].Runs()
		for b.Loop() {
			var start, done sync.WaitGroup
			start.Add(1)
			for range n {
				done.Go(func() {
					start.Wait()
					lookup()
				})
			}
			start.Done()
			done.Wait()
		}
		b.ReportMetric(float64(fakes["uncached"].Runs()-before)/float64(b.N), "execs/op")
	}
	b.Run("kubelet", func(b *testing.B) { run(b, func() { kubelet.Lookup(image) }) })
	b.Run("kplug", func(b *testing.B) { run(b, func() { _, _ = kplug.LookupRepository(ctx, image, nil) }) })
}

// BenchmarkConcurrentFirstPull is N simultaneous lookups on a fresh runtime whose plugin
// allows caching, like the first pulls of a deployment's replicas on one node. kplug
// guarantees one execution; the kubelet's process-wide registry cannot be made fresh per
// iteration, so only kplug runs here.
func BenchmarkConcurrentFirstPull(b *testing.B) {
	const n = 16
	fakes, _, _ := fixture(b)
	cfg := benchKplugConfig(b)
	before := fakes["cached"].Runs()
	for b.Loop() {
		k, err := imagecred.New(imagecred.Options{Config: cfg, BinDir: fixtureDir})
		if err != nil {
			b.Fatal(err)
		}
		var wg sync.WaitGroup
		for range n {
			wg.Go(func() { _, _ = k.LookupRepository(b.Context(), "cached.registry.io/team/app", nil) })
		}
		wg.Wait()
	}
	b.ReportMetric(float64(fakes["cached"].Runs()-before)/float64(b.N), "execs/op")
}

// TestConfigHashMatchesKubelet compares imagecred's config hash with the one the kubelet
// exports after registering the same file.
func TestConfigHashMatchesKubelet(t *testing.T) {
	fixture(t)
	cfg := benchKplugConfig(t)
	families, err := legacyregistry.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var kubelet string
	for _, mf := range families {
		if mf.GetName() == imagecred.MetricConfigInfo {
			for _, l := range mf.GetMetric()[0].GetLabel() {
				if l.GetName() == "hash" {
					kubelet = l.GetValue()
				}
			}
		}
	}
	if kubelet == "" || cfg.Hash != kubelet {
		t.Errorf("config hash %q, kubelet %q", cfg.Hash, kubelet)
	}
}
