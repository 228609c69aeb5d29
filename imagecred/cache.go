package imagecred

import (
	"sync"
	"time"
)

// CacheEntry is one cached provider answer: the credentials, without the cacheKeyType and
// cacheDuration that decided its key and expiry.
type CacheEntry struct {
	Auth map[string]AuthConfig `json:"auth"`
	// ExpiresAt is the last instant the entry is valid: it expires when now is after it.
	ExpiresAt time.Time `json:"expiresAt"`
}

func (e CacheEntry) expired(now time.Time) bool { return now.After(e.ExpiresAt) }

// Cache is where WithCache stores provider answers, under the kubelet's keys: the in-memory
// NewMemoryCache, or DirCache for processes that live for one pull. Keys are opaque byte
// strings; the provider name is passed separately so that one Cache can serve every
// provider. Implementations must be safe for concurrent use. Get may return an expired
// entry; the caller checks ExpiresAt and calls Delete.
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
