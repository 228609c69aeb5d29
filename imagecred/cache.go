package imagecred

import (
	"sync"
	"time"
)

// CacheEntry is one cached provider answer.
type CacheEntry struct {
	Auth map[string]AuthConfig `json:"auth"`
	// ExpiresAt is the last instant the entry is valid: it expires when now is after it.
	ExpiresAt time.Time `json:"expiresAt"`
}

func (e CacheEntry) expired(now time.Time) bool { return now.After(e.ExpiresAt) }

// Cache stores provider answers under the kubelet's keys. Keys are opaque byte strings; the
// provider name is passed separately so that one Cache can serve every provider.
// Implementations must be safe for concurrent use. Get may return an expired entry; the
// caller checks ExpiresAt and calls Delete.
type Cache interface {
	Get(provider, key string) (CacheEntry, bool)
	Put(provider, key string, e CacheEntry)
	Delete(provider, key string)
}

// memoryCache is the default Cache. Like the kubelet's, it purges expired entries at most
// every purgeInterval, on a write.
type memoryCache struct {
	now       func() time.Time
	mu        sync.Mutex
	entries   map[[2]string]CacheEntry
	lastPurge time.Time
}

const purgeInterval = 15 * time.Minute

// NewMemoryCache returns an in-memory Cache; now is the clock used to purge expired entries
// (nil means time.Now).
func NewMemoryCache(now func() time.Time) Cache {
	if now == nil {
		now = time.Now
	}
	return &memoryCache{now: now, entries: map[[2]string]CacheEntry{}}
}

func (c *memoryCache) Get(provider, key string) (CacheEntry, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[[2]string{provider, key}]
	return e, ok
}

func (c *memoryCache) Put(provider, key string, e CacheEntry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	if now.Sub(c.lastPurge) >= purgeInterval {
		for k, old := range c.entries {
			if old.expired(now) {
				delete(c.entries, k)
			}
		}
		c.lastPurge = now
	}
	c.entries[[2]string{provider, key}] = e
}

func (c *memoryCache) Delete(provider, key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.entries, [2]string{provider, key})
}

// failureCache remembers recent plugin failures for a bounded number of keys, so that a
// broken plugin is not re-executed on every pull (opt-in; the kubelet has none).
type failureCache struct {
	ttl   time.Duration
	size  int
	mu    sync.Mutex
	items map[string]failure
	order []string // insertion order, oldest first, for eviction
}

type failure struct {
	err   error
	until time.Time
}

func (f *failureCache) get(key string, now time.Time) error {
	if f == nil {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if it, ok := f.items[key]; ok && !now.After(it.until) {
		return it.err
	}
	return nil
}

func (f *failureCache) put(key string, err error, now time.Time) {
	if f == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.items[key]; !ok {
		for len(f.order) >= f.size {
			delete(f.items, f.order[0])
			f.order = f.order[1:]
		}
		f.order = append(f.order, key)
	}
	f.items[key] = failure{err: err, until: now.Add(f.ttl)}
}
