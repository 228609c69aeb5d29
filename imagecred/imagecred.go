package imagecred

import (
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	kubeletv1 "k8s.io/kubelet/config/v1"
)

// Options configures New.
type Options struct {
	// Config is the configuration (see LoadConfig); New validates it.
	Config *Config
	// BinDir holds the plugin binaries; a provider runs BinDir/name.
	BinDir string
	// ServiceAccounts reads service accounts and requests tokens for providers with
	// tokenAttributes; nil makes such providers fail when a pod with a service account is
	// passed to Lookup (and skip it without one, unless it is required).
	ServiceAccounts ServiceAccounts
	// Timeout bounds each plugin run, and each TokenRequest; zero means DefaultTimeout. On
	// timeout the plugin's process group is killed.
	Timeout time.Duration
	// Cache stores answers for every provider; nil means a new in-memory cache.
	Cache Cache
	// FailureCacheTTL, if positive, makes a failing plugin's error the answer for that
	// long for the same request instead of running the plugin again; FailureCacheSize
	// bounds how many failures are remembered (zero means DefaultFailureCacheSize).
	FailureCacheTTL  time.Duration
	FailureCacheSize int
	// Metrics, if set, receives the kubelet's metrics and kplug's cache counters (see
	// NewMetrics); nil records nothing.
	Metrics *Metrics
	// PluginStderr receives what plugins write to stderr; nil discards it (the tail is
	// still part of errors).
	PluginStderr io.Writer
	// PluginStderrShown says that PluginStderr reaches whoever reads the errors (a CLI
	// printing both to one terminal): error messages then leave the plugin's stderr out,
	// which the errors' Stderr fields keep (execplugin.Runner.StderrShown).
	PluginStderrShown bool
	// Environ is the plugins' base environment; nil means the process's.
	Environ func() []string
	// Now is the clock used for cache expiry; nil means time.Now.
	Now func() time.Time
}

// New checks the options as the kubelet does when it registers its plugins (the bin
// directory and each provider's binary exist and are executable, the config is valid) and
// returns a Keyring whose providers are each a Plugin under the kubelet's decorators, from
// the inside out:
//
//	Plugin                   run the plugin, decode and check its answer
//	WithFailureCache         only with FailureCacheTTL
//	WithServiceAccountToken  here for cacheType ServiceAccount: a token only on a miss
//	WithCache                Image, Registry and Global keys; one run for concurrent requests
//	WithServiceAccountToken  here for cacheType Token: the token's hash in every key
//
// The Keyring puts the pod's service account and its annotations in each request.
func New(o Options) (*Keyring, error) {
	if o.Config == nil {
		return nil, errors.New("imagecred: no configuration")
	}
	if err := checkBinDir(o.BinDir); err != nil {
		return nil, err
	}
	if err := o.Config.Validate(); err != nil {
		return nil, err
	}
	o.Metrics.SetConfigHash(o.Config.Hash)
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Cache == nil {
		o.Cache = NewMemoryCache(o.Now)
	}
	entries := make([]KeyringEntry, 0, len(o.Config.Providers))
	for _, c := range o.Config.Providers {
		exec, err := NewPlugin(c, PluginOptions{
			BinDir: o.BinDir, Timeout: o.Timeout, Stderr: o.PluginStderr, StderrShown: o.PluginStderrShown,
			Environ: o.Environ, Metrics: o.Metrics,
		})
		if err != nil {
			return nil, err
		}
		entries = append(entries, KeyringEntry{
			Config: c, Provider: decorate(c, exec, o), Path: exec.Path(), ServiceAccounts: o.ServiceAccounts,
		})
	}
	return NewKeyring(entries...), nil
}

// decorate stacks the kubelet's behaviour around a provider's source, innermost first.
func decorate(c kubeletv1.CredentialProvider, source Provider, o Options) Provider {
	p := WithFailureCache(source, FailureCacheOptions{TTL: o.FailureCacheTTL, Size: o.FailureCacheSize, Now: o.Now})
	cache := CacheOptions{Provider: c.Name, Cache: o.Cache, Now: o.Now, Metrics: o.Metrics}
	if c.DefaultCacheDuration != nil {
		cache.DefaultTTL = c.DefaultCacheDuration.Duration
	}
	ta := c.TokenAttributes
	if ta == nil || ta.ServiceAccountTokenAudience == "" {
		return WithCache(p, cache)
	}
	tokens := ServiceAccountTokenOptions{
		Audience: ta.ServiceAccountTokenAudience, CacheType: ta.CacheType,
		ServiceAccounts: o.ServiceAccounts, Timeout: o.Timeout,
	}
	if ta.CacheType == kubeletv1.TokenServiceAccountTokenCacheType {
		return WithServiceAccountToken(WithCache(p, cache), tokens)
	}
	return WithCache(WithServiceAccountToken(p, tokens), cache)
}

func checkBinDir(dir string) error {
	_, err := os.Stat(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("imagecred: plugin binary directory %s did not exist", dir)
	case err != nil:
		return fmt.Errorf("imagecred: error inspecting binary directory %s: %w", dir, err)
	}
	return nil
}
