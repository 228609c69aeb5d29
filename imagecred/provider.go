package imagecred

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	"k8s.io/apimachinery/pkg/types"
	kubeletv1 "k8s.io/kubelet/config/v1"
	"k8s.io/kubelet/pkg/apis/credentialprovider"

	"github.com/kplug/kplug/execplugin"
	"github.com/kplug/kplug/internal/flight"
)

// provider is one configured plugin with its cache and single-flight group.
type provider struct {
	cfg        kubeletv1.CredentialProvider
	patterns   []location // cfg.MatchImages that parse; the others never match
	path       string     // binDir/name
	timeout    time.Duration
	runner     *execplugin.Runner
	cache      Cache
	failures   *failureCache
	accounts   ServiceAccounts
	metrics    providerMetrics
	now        func() time.Time
	flights    flight.Group[*credentialprovider.CredentialProviderResponse]
	defaultTTL time.Duration
}

// answer is what a provider contributes to a lookup.
type answer struct {
	auth map[string]AuthConfig
	sa   *ServiceAccountCoordinates
}

// ProviderError says which provider failed for which image, and why.
type ProviderError struct {
	Provider string
	Path     string // the plugin binary
	Image    string
	Err      error
}

func (e *ProviderError) Error() string {
	return fmt.Sprintf("imagecred: provider %q (%s) for image %q: %v", e.Provider, e.Path, e.Image, e.Err)
}

func (e *ProviderError) Unwrap() error { return e.Err }

// Errors a provider returns, wrapped in a *ProviderError, when it did not run its plugin.
var (
	ErrNoServiceAccount       = errors.New("the provider requires a service account and the pod has none (pass the pod)")
	ErrRequiredAnnotation     = errors.New("the service account lacks a required annotation")
	ErrTokenEchoed            = errors.New("the plugin returned the service account token as a password, which is only allowed with tokenAttributes.cacheType Token")
	ErrInvalidCacheKeyType    = errors.New("the plugin did not return a valid cacheKeyType")
	errFailureCached          = errors.New("the plugin failed recently; not running it again yet")
	errServiceAccountsMissing = errors.New("the provider needs service-account tokens but no Kubernetes client was configured (pass a kubeconfig)")
)

func (p *provider) matches(image location) bool {
	for _, m := range p.patterns {
		if ok, _ := m.match(image); ok {
			return true
		}
	}
	return false
}

// saRequest is the service-account side of one call: the key dimension, what the plugin
// gets, and the coordinates reported with the credentials.
type saRequest struct {
	key         string
	token       string
	tokenHash   string
	annotations map[string]string
	coords      *ServiceAccountCoordinates
}

// provide returns the provider's credentials for a normalised image, or nil when the
// provider does not match it.
func (p *provider) provide(ctx context.Context, image string, parsed location, pod *Pod) (*answer, error) {
	if !p.matches(parsed) {
		return nil, nil
	}
	ans, err := p.provideMatched(ctx, image, pod)
	if err != nil {
		return nil, &ProviderError{Provider: p.cfg.Name, Path: p.path, Image: image, Err: err}
	}
	return ans, nil
}

func (p *provider) provideMatched(ctx context.Context, image string, pod *Pod) (*answer, error) {
	sa, err := p.serviceAccount(ctx, pod)
	if err != nil {
		return nil, err
	}
	// With cacheType ServiceAccount the key does not depend on the token, so a cache hit
	// needs no TokenRequest (the kubelet requests a token first on every pull).
	if sa.coords != nil && p.cfg.TokenAttributes.CacheType != kubeletv1.TokenServiceAccountTokenCacheType {
		if auth, ok, err := p.cached(image, sa.key); err != nil || ok {
			return &answer{auth: auth, sa: sa.coords}, err
		}
	}
	if sa.coords != nil {
		if err := p.requestToken(ctx, pod, sa); err != nil {
			return nil, err
		}
	}
	if auth, ok, err := p.cached(image, sa.key); err != nil || ok {
		return &answer{auth: auth, sa: sa.coords}, err
	}
	p.metrics.misses.Inc()

	sfKey := image
	if sa.coords != nil {
		if sfKey, err = singleFlightKey(image, sa.tokenHash, sa.annotations); err != nil {
			return nil, err
		}
	}
	if err := p.failures.get(sfKey, p.now()); err != nil {
		return nil, fmt.Errorf("%w: %w", errFailureCached, err)
	}
	// One run for all concurrent callers, bounded by the plugin timeout and by no caller's
	// context (package flight): an error here is the plugin's, or this caller's ctx.Err().
	resp, err := p.flights.Do(ctx, sfKey, func(ctx context.Context) (*credentialprovider.CredentialProviderResponse, error) {
		return p.exec(ctx, image, sa.token, sa.annotations)
	})
	if err != nil {
		if ctx.Err() == nil {
			p.failures.put(sfKey, err, p.now())
		}
		return nil, err
	}
	auth, err := p.store(image, sa, resp)
	if err != nil {
		return nil, err
	}
	return &answer{auth: auth, sa: sa.coords}, nil
}

// serviceAccount reads the pod's service account and the configured annotations. It
// returns an empty request when the provider does not use tokens, or when the pod has no
// service account and one is not required.
func (p *provider) serviceAccount(ctx context.Context, pod *Pod) (*saRequest, error) {
	ta := p.cfg.TokenAttributes
	sa := &saRequest{}
	if ta == nil || ta.ServiceAccountTokenAudience == "" {
		return sa, nil
	}
	if pod == nil || pod.ServiceAccountName == "" {
		if ta.RequireServiceAccount != nil && *ta.RequireServiceAccount {
			return nil, ErrNoServiceAccount
		}
		return sa, nil
	}
	if p.accounts == nil {
		return nil, errServiceAccountsMissing
	}
	acct, err := p.accounts.ServiceAccount(ctx, pod.Namespace, pod.ServiceAccountName)
	if err != nil {
		return nil, err
	}
	sa.annotations = map[string]string{}
	for _, k := range ta.RequiredServiceAccountAnnotationKeys {
		v, ok := acct.Annotations[k]
		if !ok {
			return nil, fmt.Errorf("%w: service account %s/%s has no annotation %q", ErrRequiredAnnotation, pod.Namespace, pod.ServiceAccountName, k)
		}
		sa.annotations[k] = v
	}
	for _, k := range ta.OptionalServiceAccountAnnotationKeys {
		if v, ok := acct.Annotations[k]; ok {
			sa.annotations[k] = v
		}
	}
	sa.coords = &ServiceAccountCoordinates{UID: string(acct.UID), Namespace: pod.Namespace, Name: pod.ServiceAccountName}
	sa.key, err = serviceAccountKey(pod.Namespace, pod.ServiceAccountName, string(acct.UID), sa.annotations, "")
	return sa, err
}

func (p *provider) requestToken(ctx context.Context, pod *Pod, sa *saRequest) error {
	token, err := p.accounts.Token(ctx, TokenRequest{
		Namespace:         pod.Namespace,
		ServiceAccount:    pod.ServiceAccountName,
		ServiceAccountUID: types.UID(sa.coords.UID),
		Audience:          p.cfg.TokenAttributes.ServiceAccountTokenAudience,
		PodName:           pod.Name,
		PodUID:            pod.UID,
	})
	if err != nil {
		return err
	}
	sa.token, sa.tokenHash = token, hashToken(token)
	if p.cfg.TokenAttributes.CacheType == kubeletv1.TokenServiceAccountTokenCacheType {
		var err error
		sa.key, err = serviceAccountKey(pod.Namespace, pod.ServiceAccountName, sa.coords.UID, sa.annotations, sa.tokenHash)
		return err
	}
	return nil
}

// cached looks the image up under its Image, Registry and Global keys, in that order.
func (p *provider) cached(image, saKey string) (map[string]AuthConfig, bool, error) {
	now := p.now()
	for _, base := range []string{image, registryOf(image), globalCacheKey} {
		key, err := cacheKey(base, saKey)
		if err != nil {
			return nil, false, err
		}
		e, ok := p.cache.Get(p.cfg.Name, key)
		if !ok {
			continue
		}
		if e.expired(now) {
			p.cache.Delete(p.cfg.Name, key)
			continue
		}
		p.metrics.hits.Inc()
		return e.Auth, true, nil
	}
	return nil, false, nil
}

// exec runs the plugin once and decodes its answer.
func (p *provider) exec(ctx context.Context, image, token string, annotations map[string]string) (*credentialprovider.CredentialProviderResponse, error) {
	req, err := encodeRequest(p.cfg.APIVersion, image, token, annotations)
	if err != nil {
		return nil, err
	}
	env := make([]string, 0, len(p.cfg.Env))
	for _, e := range p.cfg.Env {
		env = append(env, e.Name+"="+e.Value)
	}
	start := time.Now()
	res, err := p.runner.Run(ctx, execplugin.Command{
		Path:    p.path,
		Args:    p.cfg.Args,
		Env:     env,
		Stdin:   execplugin.BytesStdin(req),
		Timeout: p.timeout,
	})
	p.metrics.duration.Observe(time.Since(start).Seconds())
	if err != nil {
		var canceled *execplugin.CanceledError
		if !errors.As(err, &canceled) {
			p.metrics.errors.Inc()
		}
		return nil, err
	}
	return decodeResponse(p.cfg.APIVersion, res.Stdout)
}

// store checks the answer, caches it as the response says and returns its credentials.
func (p *provider) store(image string, sa *saRequest, resp *credentialprovider.CredentialProviderResponse) (map[string]AuthConfig, error) {
	auth := make(map[string]AuthConfig, len(resp.Auth))
	for k, v := range resp.Auth {
		if sa.token != "" && v.Password == sa.token && p.cfg.TokenAttributes.CacheType != kubeletv1.TokenServiceAccountTokenCacheType {
			return nil, ErrTokenEchoed
		}
		auth[k] = AuthConfig{Username: v.Username, Password: v.Password}
	}
	var base string
	switch resp.CacheKeyType {
	case credentialprovider.ImagePluginCacheKeyType:
		base = image
	case credentialprovider.RegistryPluginCacheKeyType:
		base = registryOf(image)
	case credentialprovider.GlobalPluginCacheKeyType:
		base = globalCacheKey
	default:
		return nil, fmt.Errorf("%w: %q", ErrInvalidCacheKeyType, resp.CacheKeyType)
	}
	ttl := p.defaultTTL
	if resp.CacheDuration != nil {
		ttl = resp.CacheDuration.Duration
	}
	if ttl == 0 {
		return auth, nil // cacheDuration 0, or absent with defaultCacheDuration 0: not cached
	}
	key, err := cacheKey(base, sa.key)
	if err != nil {
		return nil, err
	}
	p.cache.Put(p.cfg.Name, key, CacheEntry{Auth: maps.Clone(auth), ExpiresAt: p.now().Add(ttl)})
	return auth, nil
}
