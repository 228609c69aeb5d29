package imagecred

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kplug/kplug/execplugin"
)

// DefaultTimeout bounds one plugin run, as the kubelet's hard-coded minute does.
const DefaultTimeout = time.Minute

// Options configures New.
type Options struct {
	// Config is a validated configuration (see LoadConfig); New validates it again.
	Config *Config
	// BinDir holds the plugin binaries; a provider runs BinDir/name.
	BinDir string
	// ServiceAccounts reads service accounts and requests tokens for providers with
	// tokenAttributes; nil makes such providers fail when a pod with a service account is
	// passed to Lookup (and skip it without one, unless it is required).
	ServiceAccounts ServiceAccounts
	// Timeout bounds each plugin run; zero means DefaultTimeout. On timeout the plugin's
	// process group is killed.
	Timeout time.Duration
	// Cache stores answers; nil means a new in-memory cache.
	Cache Cache
	// FailureCacheTTL, if positive, makes a failing plugin's error the answer for that
	// long for the same request instead of running the plugin again; FailureCacheSize
	// bounds how many failures are remembered (zero means 1024).
	FailureCacheTTL  time.Duration
	FailureCacheSize int
	// Registerer receives the metrics; nil means they are not exported.
	Registerer prometheus.Registerer
	// PluginStderr receives what plugins write to stderr; nil discards it (the tail is
	// still part of errors).
	PluginStderr io.Writer
	// Environ is the plugins' base environment; nil means os.Environ.
	Environ func() []string
	// Now is the clock used for cache expiry; nil means time.Now.
	Now func() time.Time
}

// Keyring answers which credentials to use for an image, running the configured providers.
// Create one with New. It is safe for concurrent use.
type Keyring struct {
	providers []*provider
	locations *locationCache
}

// New checks the options as the kubelet does when it registers its plugins (the bin
// directory and each provider's binary exist and are executable, the config is valid) and
// returns a Keyring.
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
	m, err := newMetrics(o.Registerer)
	if err != nil {
		return nil, fmt.Errorf("imagecred: register metrics: %w", err)
	}
	m.setConfigHash(o.Config.Hash)
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Cache == nil {
		o.Cache = NewMemoryCache(o.Now)
	}
	if o.PluginStderr == nil {
		o.PluginStderr = io.Discard
	}
	var failures *failureCache
	if o.FailureCacheTTL > 0 {
		if o.FailureCacheSize <= 0 {
			o.FailureCacheSize = 1024
		}
		failures = &failureCache{ttl: o.FailureCacheTTL, size: o.FailureCacheSize, items: map[string]failure{}}
	}
	runner := &execplugin.Runner{Environ: o.Environ, Stderr: o.PluginStderr}

	k := &Keyring{locations: &locationCache{}}
	for _, c := range o.Config.Providers {
		path, err := checkBinary(c.Name, filepath.Join(o.BinDir, c.Name))
		if err != nil {
			return nil, err
		}
		p := &provider{
			cfg: c, path: path, timeout: o.Timeout, runner: runner, cache: o.Cache,
			failures: failures, accounts: o.ServiceAccounts, metrics: m.forProvider(c.Name), now: o.Now,
		}
		for _, m := range c.MatchImages {
			if l, err := parseLocation(m); err == nil {
				p.patterns = append(p.patterns, l)
			}
		}
		if c.DefaultCacheDuration != nil {
			p.defaultTTL = c.DefaultCacheDuration.Duration
		}
		k.providers = append(k.providers, p)
	}
	return k, nil
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

// checkBinary finds a provider's binary as the kubelet does, with exec.LookPath, which on
// Windows also tries the executable extensions (name.exe), and returns the path to run.
func checkBinary(name, path string) (string, error) {
	found, err := exec.LookPath(path)
	switch {
	case errors.Is(err, os.ErrNotExist) || errors.Is(err, exec.ErrNotFound):
		return "", fmt.Errorf("imagecred: provider %q: plugin binary executable %s did not exist", name, path)
	case err != nil:
		return "", fmt.Errorf("imagecred: provider %q: error inspecting binary executable %s: %w", name, path, err)
	}
	return found, nil
}

// Lookup normalises image as the kubelet does (see NormalizeImage) and returns the
// credentials for it; see LookupRepository.
func (k *Keyring) Lookup(ctx context.Context, image string, pod *Pod) ([]Credential, error) {
	repo, err := NormalizeImage(image)
	if err != nil {
		return nil, err
	}
	return k.LookupRepository(ctx, repo, pod)
}

// LookupRepository asks every provider whose matchImages match repo, in config order,
// and returns the credentials in the order the kubelet tries them: the most specific auth
// key first, providers in config order within a key, and the index.docker.io credentials
// for a Docker Hub image that nothing else matches. repo is a normalised repository (see
// NormalizeImage) or a bare registry host ("registry.io:5000"), as a docker credential
// helper is asked about; a host gets the index.docker.io credentials only if it is
// docker.io, index.docker.io or has neither '.' nor ':', as the kubelet decides for the
// images of that host. pod may be nil.
//
// A provider that fails contributes nothing, as in the kubelet; its error is returned,
// joined with the others', next to whatever the other providers returned.
func (k *Keyring) LookupRepository(ctx context.Context, repo string, pod *Pod) ([]Credential, error) {
	parsed, err := k.locations.parse(repo)
	if err != nil {
		return nil, fmt.Errorf("imagecred: invalid repository %q: %w", repo, err)
	}
	var (
		kr   = keyring{locations: k.locations}
		errs []error
	)
	for _, p := range k.providers {
		ans, err := p.provide(ctx, repo, parsed, pod)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if ans != nil {
			kr.add(p.cfg.Name, ans.sa, ans.auth)
		}
	}
	return kr.lookup(repo), errors.Join(errs...)
}
