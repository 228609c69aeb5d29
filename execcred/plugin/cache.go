package plugin

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/kplug/kplug/execcred/wire"
	"github.com/kplug/kplug/internal/diskstore"
)

// Cache keeps credentials in files, so that separate runs of a plugin (one per kubectl
// invocation) share them. Entries are 0600 files in a 0700 directory, written atomically;
// a file lock makes concurrent runs wait for the one that is fetching, which then serves
// them all. Answers that must never be written down (wire.Status.Unstorable: signing
// material, KEP-6308, above all) pass through uncached. The zero value is unusable: Dir is
// required. A Cache is safe for concurrent use by goroutines and processes of one user.
//
// Dir must be a real directory that belongs to the user and that no other user may write
// to; it is created 0700 if missing, and narrowed to 0700 if others may only read it.
type Cache struct {
	// Dir holds the entries; it is created 0700 if missing.
	Dir string
	// Skew treats an entry as expired this long before its expirationTimestamp, so that a
	// client never receives a credential about to expire. Zero means 10 seconds.
	Skew time.Duration
	// TTL is how long a credential without expirationTimestamp is kept. Zero means it is
	// not cached at all.
	TTL time.Duration
	// LockTimeout bounds the wait for another process's fetch. Zero means 5 minutes, long
	// enough for a browser login.
	LockTimeout time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// DefaultCacheDir returns <user cache dir>/<name>, e.g. ~/.cache/<name> on Linux.
func DefaultCacheDir(name string) (string, error) {
	base, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("plugin: no user cache directory: %w", err)
	}
	return filepath.Join(base, name), nil
}

type entry struct {
	Status  *wire.Status `json:"status"`
	Expires time.Time    `json:"expires"`
}

// Do returns the credential cached under key if it is still valid, or else takes the
// key's file lock, looks again (another process may have just fetched it), and calls fetch.
// A successful result is stored, unless it must never be written down
// (wire.Status.Unstorable: signing material, an exec proxy answer, fields the SDK does not
// know), which is returned uncached, as `kplug exec-cache` does; a failed one never is.
func (c *Cache) Do(ctx context.Context, key string, fetch func(context.Context) (*wire.Status, error)) (*wire.Status, error) {
	if c.Dir == "" {
		return nil, errors.New("plugin: Cache.Dir is empty")
	}
	store := c.store()
	var e entry
	if store.Load(key, &e) == nil && c.valid(e) {
		return e.Status, nil
	}
	locked, err := store.Lock(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("plugin: %w", err)
	}
	defer func() { _ = locked.Unlock() }()
	e = entry{}
	if locked.Load(&e) == nil && c.valid(e) {
		return e.Status, nil
	}
	s, err := fetch(ctx)
	if err != nil {
		return nil, err
	}
	if s.Unstorable() != "" {
		return s, nil
	}
	if exp, ok := c.expiry(s); ok {
		if err := locked.Save(entry{Status: s, Expires: exp}); err != nil {
			return s, fmt.Errorf("plugin: storing the credential: %w", err)
		}
	}
	return s, nil
}

// Wrap returns f with its answers cached under key: the decorator form of Do, for Main,
// Run or Source. When the client says the credential was rejected (info.Response, sent by
// v1alpha1 clients), the entry is dropped first, so that f runs. A client that asks for
// signing material (info.HTTPSignature; wire.Info.Uncached) is answered by f alone: that
// answer is never stored, and one stored for other clients is not the answer to it.
func (c *Cache) Wrap(key string, f Func) Func {
	return func(ctx context.Context, info *Info) (*wire.Status, error) {
		if info.Uncached() != "" {
			return f(ctx, info)
		}
		if info.Response != nil {
			if err := c.Delete(key); err != nil {
				return nil, err
			}
		}
		return c.Do(ctx, key, func(ctx context.Context) (*wire.Status, error) { return f(ctx, info) })
	}
}

// Delete drops the entry for key, e.g. after the server rejected it (v1alpha1 response).
func (c *Cache) Delete(key string) error {
	if err := c.store().Delete(key); err != nil {
		return fmt.Errorf("plugin: %w", err)
	}
	return nil
}

func (c *Cache) store() *diskstore.Store {
	return &diskstore.Store{Dir: c.Dir, LockTimeout: c.LockTimeout}
}

// valid says whether e may be served: whole, and not within Skew of its expiry.
func (c *Cache) valid(e entry) bool {
	return e.Status != nil && c.now().Add(c.skew()).Before(e.Expires)
}

// expiry says until when s may be served from the cache.
func (c *Cache) expiry(s *wire.Status) (time.Time, bool) {
	if s.ExpirationTimestamp != nil {
		return s.ExpirationTimestamp.Time, true
	}
	if c.TTL > 0 {
		return c.now().Add(c.TTL), true
	}
	return time.Time{}, false
}

func (c *Cache) now() time.Time {
	if c.Now != nil {
		return c.Now()
	}
	return time.Now()
}

func (c *Cache) skew() time.Duration {
	if c.Skew > 0 {
		return c.Skew
	}
	return 10 * time.Second
}
