package imagecred

import (
	"context"
	"maps"
	"time"

	"github.com/kplug/kplug/imagecred/plugin"
	"github.com/kplug/kplug/internal/flight"
)

// CacheOptions configures WithCache.
type CacheOptions struct {
	// Provider is the provider's name: entries are stored under it, so that one Cache can
	// serve several providers, and metrics are labelled with it.
	Provider string
	// Cache stores the answers; nil means a new in-memory cache.
	Cache Cache
	// DefaultTTL is the provider's defaultCacheDuration: how long an answer without a
	// cacheDuration is kept. Zero means such answers are not cached.
	DefaultTTL time.Duration
	// Now is the clock for expiry; nil means time.Now.
	Now func() time.Time
	// Metrics, if set, counts hits and misses.
	Metrics *Metrics
}

// WithCache returns a Provider that answers from a cache as the kubelet's provider does, and
// asks p only on a miss.
//
// An answer is looked up under the image, then its registry (host and port), then
// "<global>": the three cacheKeyTypes. A plugin's answer is stored under the key its
// cacheKeyType names, for its cacheDuration, or DefaultTTL when it has none; zero means
// not at all, and a negative duration is already expired. Failures are never stored. With
// a service account in the request, every key also holds the account, its annotations and,
// when the request already carries a token (cacheType Token), the token's hash.
//
// Concurrent requests for one image and service account share one call of p (a plugin
// run). That call belongs to none of them: it runs detached from their contexts (keeping
// their values), bounded only by what bounds p itself, such as Plugin's timeout. Each caller
// waits until the call ends or its own context does; in the second case it gets its
// context's error, while the call goes on for the others. So one caller giving up never
// fails another, and a caller's cancellation is never remembered as a plugin failure: not
// here, nor by a WithFailureCache inside.
//
// A p that WithCache returned is returned as it is: two caches would key, count and
// expire every answer twice.
func WithCache(p Provider, o CacheOptions) Provider {
	if c, ok := p.(*cachingProvider); ok {
		return c
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Cache == nil {
		o.Cache = NewMemoryCache(o.Now)
	}
	return &cachingProvider{next: p, opts: o, metrics: o.Metrics.provider(o.Provider)}
}

type cachingProvider struct {
	next    Provider
	opts    CacheOptions
	metrics providerMetrics
	flights flight.Group[*Response]
}

func (c *cachingProvider) Provide(ctx context.Context, req *Request) (*Response, error) {
	scope, err := scopeKey(req.ServiceAccount)
	if err != nil {
		return nil, err
	}
	if resp, ok, err := c.cached(req.Image, scope); err != nil || ok {
		return resp, err
	}
	c.metrics.miss()
	// The cacheKeyType is unknown until the plugin answers, so runs are shared per image:
	// concurrent requests for two images of one registry still run the plugin twice.
	key, err := cacheKey(req.Image, scope)
	if err != nil {
		return nil, err
	}
	return c.flights.Do(ctx, key, func(ctx context.Context) (*Response, error) {
		// A caller that missed the cache may reach the flight only after the run that
		// filled it has ended: look again, or it would run the plugin a second time.
		if resp, ok, err := c.cached(req.Image, scope); err != nil || ok {
			return resp, err
		}
		resp, err := c.next.Provide(ctx, req)
		if err != nil {
			return nil, err
		}
		return resp, c.store(req.Image, scope, resp)
	})
}

// cached looks the image up under its Image, Registry and Global keys, in that order.
func (c *cachingProvider) cached(image, scope string) (*Response, bool, error) {
	now := c.opts.Now()
	for _, k := range []struct {
		base string
		kind plugin.CacheKeyType
	}{{image, plugin.CacheImage}, {registryOf(image), plugin.CacheRegistry}, {globalCacheKey, plugin.CacheGlobal}} {
		key, err := cacheKey(k.base, scope)
		if err != nil {
			return nil, false, err
		}
		e, ok := c.opts.Cache.Get(c.opts.Provider, key)
		if !ok {
			continue
		}
		if e.expired(now) {
			c.opts.Cache.Delete(c.opts.Provider, key)
			continue
		}
		c.metrics.hit()
		return hitResponse(k.kind, e.ExpiresAt.Sub(now), e.Auth), true, nil
	}
	return nil, false, nil
}

// hitResponse is a cached answer, its cacheDuration what is left of it. The Response and
// its duration are allocated together: this is the path of every repeated pull.
func hitResponse(kind plugin.CacheKeyType, left time.Duration, auth map[string]AuthConfig) *Response {
	hit := &struct {
		resp Response
		left time.Duration
	}{Response{CacheKeyType: kind, Auth: auth}, left}
	hit.resp.CacheDuration = &hit.left
	return &hit.resp
}

// store keeps an answer under the key its cacheKeyType names, for as long as it says.
func (c *cachingProvider) store(image, scope string, resp *Response) error {
	var base string
	switch resp.CacheKeyType {
	case plugin.CacheImage:
		base = image
	case plugin.CacheRegistry:
		base = registryOf(image)
	case plugin.CacheGlobal:
		base = globalCacheKey
	default:
		return checkResponse(resp) // a provider that does not check its answers
	}
	ttl := c.opts.DefaultTTL
	if resp.CacheDuration != nil {
		ttl = *resp.CacheDuration
	}
	if ttl == 0 {
		return nil // cacheDuration 0, or absent with defaultCacheDuration 0: not cached
	}
	key, err := cacheKey(base, scope)
	if err != nil {
		return err
	}
	auth := maps.Clone(resp.Auth)
	if auth == nil {
		auth = map[string]AuthConfig{} // an empty answer is an answer, and is cached
	}
	c.opts.Cache.Put(c.opts.Provider, key, CacheEntry{Auth: auth, ExpiresAt: c.opts.Now().Add(ttl)})
	return nil
}
