//go:build unix

// Package bench runs kplug's image credential runtime beside the kubelet's own provider
// code (k8s.io/kubernetes/pkg/credentialprovider/plugin) on the same config, plugin and
// images, and checks that both give the same answers.
package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/kplug/kplug/imagecred"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/kubernetes/pkg/credentialprovider"
	kubeletplugin "k8s.io/kubernetes/pkg/credentialprovider/plugin"
)

// Two providers from one shell-script plugin: "cached" answers with cacheDuration 1h for
// one registry, "uncached" with 0s for another, so every lookup of the latter executes
// unless concurrent lookups share one execution.
const benchConfig = `apiVersion: kubelet.config.k8s.io/v1
kind: CredentialProviderConfig
providers:
- name: cached
  matchImages: ["cached.registry.io"]
  defaultCacheDuration: 1h
  apiVersion: credentialprovider.kubelet.k8s.io/v1
  env: [{name: CACHE_DURATION, value: 1h}, {name: EXEC_LOG, value: "%[1]s/cached.log"}]
- name: uncached
  matchImages: ["uncached.registry.io"]
  defaultCacheDuration: 0s
  apiVersion: credentialprovider.kubelet.k8s.io/v1
  env: [{name: CACHE_DURATION, value: 0s}, {name: EXEC_LOG, value: "%[1]s/uncached.log"}]
`

const pluginScript = `#!/bin/sh
cat > /dev/null
echo x >> "$EXEC_LOG"
printf '{"kind":"CredentialProviderResponse","apiVersion":"credentialprovider.kubelet.k8s.io/v1","cacheKeyType":"Registry","cacheDuration":"%s","auth":{"cached.registry.io":{"username":"u","password":"p"},"uncached.registry.io":{"username":"u","password":"p"}}}' "$CACHE_DURATION"
`

// fixtureDir is the directory setup made, removed by TestMain.
var fixtureDir string

var setup = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "kplug-bench-")
	if err != nil {
		return "", err
	}
	fixtureDir = dir
	for _, name := range []string{"cached", "uncached"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(pluginScript), 0o700); err != nil {
			return "", err
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "config.yaml"), []byte(fmt.Sprintf(benchConfig, dir)), 0o600); err != nil {
		return "", err
	}
	// The kubelet's providers live in a process-wide registry: register them once.
	if err := kubeletplugin.RegisterCredentialProviderPlugins(filepath.Join(dir, "config.yaml"), dir, nil, nil); err != nil {
		return "", err
	}
	return dir, nil
})

func TestMain(m *testing.M) {
	code := m.Run()
	if fixtureDir != "" {
		_ = os.RemoveAll(fixtureDir)
	}
	os.Exit(code)
}

func fixture(tb testing.TB) (dir string, kplug *imagecred.Keyring, kubelet credentialprovider.DockerKeyring) {
	tb.Helper()
	dir, err := setup()
	if err != nil {
		tb.Fatal(err)
	}
	cfg, err := imagecred.LoadConfig(filepath.Join(dir, "config.yaml"))
	if err != nil {
		tb.Fatal(err)
	}
	kplug, err = imagecred.New(imagecred.Options{Config: cfg, BinDir: dir})
	if err != nil {
		tb.Fatal(err)
	}
	return dir, kplug, kubeletplugin.NewExternalCredentialProviderDockerKeyring("", "", "", "")
}

func execs(tb testing.TB, dir, provider string) int {
	data, err := os.ReadFile(filepath.Join(dir, provider+".log"))
	if err != nil && !os.IsNotExist(err) {
		tb.Fatal(err)
	}
	return strings.Count(string(data), "\n")
}

// BenchmarkCacheHit is one lookup answered from the provider cache: the path every pull
// of an already-seen registry takes.
func BenchmarkCacheHit(b *testing.B) {
	_, kplug, kubelet := fixture(b)
	const image = "cached.registry.io/team/app"
	ctx := context.Background()
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
	dir, kplug, kubelet := fixture(b)
	ctx := context.Background()
	run := func(b *testing.B, lookup func()) {
		before := execs(b, dir, "uncached")
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
		b.ReportMetric(float64(execs(b, dir, "uncached")-before)/float64(b.N), "execs/op")
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
	dir, _, _ := fixture(b)
	cfg, err := imagecred.LoadConfig(filepath.Join(dir, "config.yaml"))
	if err != nil {
		b.Fatal(err)
	}
	before := execs(b, dir, "cached")
	for b.Loop() {
		k, err := imagecred.New(imagecred.Options{Config: cfg, BinDir: dir})
		if err != nil {
			b.Fatal(err)
		}
		var wg sync.WaitGroup
		for range n {
			wg.Go(func() { _, _ = k.LookupRepository(context.Background(), "cached.registry.io/team/app", nil) })
		}
		wg.Wait()
	}
	b.ReportMetric(float64(execs(b, dir, "cached")-before)/float64(b.N), "execs/op")
}

// TestConfigHashMatchesKubelet compares imagecred's config hash with the one the kubelet
// exports after registering the same file.
func TestConfigHashMatchesKubelet(t *testing.T) {
	dir, _, _ := fixture(t)
	cfg, err := imagecred.LoadConfig(filepath.Join(dir, "config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
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
