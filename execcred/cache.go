package execcred

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/kplug/kplug/internal/flight"
)

// CacheOptions configure WithCache.
type CacheOptions struct {
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// WithCache returns src under the decorator that keeps its credential, as client-go's exec
// authenticator keeps a plugin's: until strictly after its expiry (a credential without
// one, for the life of the cache), and until a caller asks to replace it (a Rejection), once
// per credential generation: callers that ask to replace a credential already replaced get
// the current one. A failed refresh keeps the old credential.
//
// Any number of concurrent callers cause one call to src, under the cancellation policy
// every kplug cache shares: that call belongs to no caller (it gets the first caller's
// context values but not its cancellation or deadline, so a plugin is bounded by its own
// timeout, PluginOptions.Timeout); each caller waits until the call ends or its own context ends,
// and in the second case gets its context's error, which is neither cached nor seen by
// the others.
//
// The result is safe for concurrent use. A src that WithCache returned is returned as it
// is: one cache is enough, and a second would hide the first one's generations.
func WithCache(src Source, o CacheOptions) Source {
	if src == nil {
		panic("execcred: WithCache of a nil Source")
	}
	if c, ok := src.(*cache); ok {
		return c
	}
	return &cache{Source: src, Now: o.Now}
}

// cache is WithCache's decorator.
type cache struct {
	Source Source
	// Now is the clock; nil means time.Now.
	Now func() time.Time

	mu    sync.Mutex
	cred  *Credential
	group flight.Group[*Credential]
}

// Credential returns the cached credential, or calls Source for a new one.
func (c *cache) Credential(ctx context.Context, rejected *Rejection) (*Credential, error) {
	if cur, ok := c.current(rejected); ok {
		return cur, nil
	}
	cred, err := c.group.Do(ctx, "", func(ctx context.Context) (*Credential, error) {
		// A caller that found no credential may reach the flight only after the run that
		// fetched one has ended: look again, or it would run the plugin a second time.
		if cur, ok := c.current(rejected); ok {
			return cur, nil
		}
		cred, err := c.Source.Credential(ctx, rejected)
		if err != nil {
			return nil, err
		}
		c.mu.Lock()
		c.cred = cred
		c.mu.Unlock()
		return cred, nil
	})
	if err != nil && ctx.Err() != nil {
		return nil, fmt.Errorf("execcred: waiting for the credential plugin: %w", ctx.Err())
	}
	return cred, err
}

// current returns the cached credential if it may be served: there is one, the caller
// does not reject it, and it has not expired.
func (c *cache) current(rejected *Rejection) (*Credential, bool) {
	c.mu.Lock()
	cur := c.cred
	c.mu.Unlock()
	if cur == nil || rejected != nil && rejected.Credential == cur {
		return nil, false
	}
	return cur, cur.Expiry.IsZero() || !cur.ExpiredAt(c.now())
}

func (c *cache) now() time.Time {
	if c.Now != nil {
		return c.Now()
	}
	return time.Now()
}
