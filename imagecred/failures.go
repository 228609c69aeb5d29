package imagecred

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// DefaultFailureCacheSize is how many failures WithFailureCache remembers when
// FailureCacheOptions.Size is zero.
const DefaultFailureCacheSize = 1024

// FailureCacheOptions configures WithFailureCache.
type FailureCacheOptions struct {
	// TTL is how long a failure is the answer to the same request.
	TTL time.Duration
	// Size bounds how many failures are remembered, the oldest forgotten first; zero means
	// DefaultFailureCacheSize.
	Size int
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

var errFailureCached = errors.New("the plugin failed recently; not running it again yet")

// WithFailureCache returns a Provider that remembers p's failures for o.TTL and answers
// the same request (image, service account, annotations and token) with the remembered
// error instead of asking p again, so that a broken plugin is not run on every pull. The
// kubelet has no such cache; it is opt-in. An error while the caller's context has ended
// is the caller's and is not remembered. A TTL of zero or less returns p itself, and so
// does a p that WithFailureCache returned.
func WithFailureCache(p Provider, o FailureCacheOptions) Provider {
	if _, ok := p.(*failureCache); ok || o.TTL <= 0 {
		return p
	}
	if o.Size <= 0 {
		o.Size = DefaultFailureCacheSize
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &failureCache{next: p, opts: o, items: map[string]failure{}}
}

type failureCache struct {
	next  Provider
	opts  FailureCacheOptions
	mu    sync.Mutex
	items map[string]failure
	order []string // insertion order, oldest first, for eviction
}

type failure struct {
	err   error
	until time.Time
}

func (f *failureCache) Provide(ctx context.Context, req *Request) (*Response, error) {
	scope, err := scopeKey(req.ServiceAccount)
	if err != nil {
		return nil, err
	}
	key, err := cacheKey(req.Image, scope)
	if err != nil {
		return nil, err
	}
	if err := f.get(key, f.opts.Now()); err != nil {
		return nil, fmt.Errorf("%w: %w", errFailureCached, err)
	}
	resp, err := f.next.Provide(ctx, req)
	if err != nil && ctx.Err() == nil {
		f.put(key, err, f.opts.Now())
	}
	return resp, err
}

func (f *failureCache) get(key string, now time.Time) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if it, ok := f.items[key]; ok && !now.After(it.until) {
		return it.err
	}
	return nil
}

func (f *failureCache) put(key string, err error, now time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.items[key]; !ok {
		for len(f.order) >= f.opts.Size {
			delete(f.items, f.order[0])
			f.order = f.order[1:]
		}
		f.order = append(f.order, key)
	}
	f.items[key] = failure{err: err, until: now.Add(f.opts.TTL)}
}
