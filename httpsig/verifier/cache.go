package verifier

import (
	"container/list"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
)

// DefaultCacheSize bounds the validated certificates an Authenticator remembers.
const DefaultCacheSize = 4096

// certCache remembers, per leaf certificate digest, the user a validated certificate
// mapped to, until the certificate (or its issuer) expires; at most size entries, the
// least recently used going first. It is safe for concurrent use.
type certCache struct {
	mu      sync.Mutex
	size    int
	order   *list.List // of *cacheEntry, most recently used first
	entries map[[32]byte]*list.Element
}

type cacheEntry struct {
	digest        [32]byte
	authenticator string
	user          *authenticationv1.UserInfo
	expires       time.Time
}

func newCertCache(size int) *certCache {
	return &certCache{size: size, order: list.New(), entries: map[[32]byte]*list.Element{}}
}

// get returns the user remembered for digest under authenticator, if it has not expired.
func (c *certCache) get(digest [32]byte, authenticator string, now time.Time) (*authenticationv1.UserInfo, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.entries[digest]
	if !ok {
		return nil, false
	}
	e := el.Value.(*cacheEntry)
	if !now.Before(e.expires) || e.authenticator != authenticator {
		c.order.Remove(el)
		delete(c.entries, digest)
		return nil, false
	}
	c.order.MoveToFront(el)
	return e.user, true
}

func (c *certCache) put(digest [32]byte, authenticator string, user *authenticationv1.UserInfo, expires time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.entries[digest]; ok {
		c.order.Remove(el)
	}
	c.entries[digest] = c.order.PushFront(&cacheEntry{digest: digest, authenticator: authenticator, user: user, expires: expires})
	for c.order.Len() > c.size {
		last := c.order.Back()
		c.order.Remove(last)
		delete(c.entries, last.Value.(*cacheEntry).digest)
	}
}

func (c *certCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.order.Len()
}
