package plugin

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/gofrs/flock"

	"github.com/kplug/kplug/execcred"
)

// Cache keeps credentials in files, so that separate runs of a plugin (one per kubectl
// invocation) share them. Entries are 0600 files in a 0700 directory, written atomically;
// a file lock makes concurrent runs wait for the one that is fetching, which then serves
// them all. The zero value is unusable: Dir is required. A Cache is safe for concurrent use
// by goroutines and processes.
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
	Status  *execcred.Status `json:"status"`
	Expires time.Time        `json:"expires"`
}

// Do returns the credential cached under key if it is still valid, or else takes the
// key's file lock, looks again (another process may have just fetched it), and calls fetch.
// A successful result is stored; a failed one never is.
func (c *Cache) Do(ctx context.Context, key string, fetch func(context.Context) (*execcred.Status, error)) (*execcred.Status, error) {
	if c.Dir == "" {
		return nil, errors.New("plugin: Cache.Dir is empty")
	}
	if err := os.MkdirAll(c.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("plugin: cache directory: %w", err)
	}
	name := c.fileName(key)
	if s := c.read(name); s != nil {
		return s, nil
	}
	lock := flock.New(name+".lock", flock.SetPermissions(0o600))
	lockCtx, cancel := context.WithTimeout(ctx, c.lockTimeout())
	defer cancel()
	ok, err := lock.TryLockContext(lockCtx, 50*time.Millisecond)
	if err != nil || !ok {
		return nil, fmt.Errorf("plugin: waiting for the cache lock %s: %w", lock.Path(), errors.Join(err, lockCtx.Err()))
	}
	defer func() { _ = lock.Unlock() }()
	if s := c.read(name); s != nil {
		return s, nil
	}
	s, err := fetch(ctx)
	if err != nil {
		return nil, err
	}
	if exp, ok := c.expiry(s); ok {
		if err := writeAtomic(name, entry{Status: s, Expires: exp}); err != nil {
			return s, fmt.Errorf("plugin: storing the credential: %w", err)
		}
	}
	return s, nil
}

// Delete drops the entry for key, e.g. after the server rejected it (v1alpha1 response).
func (c *Cache) Delete(key string) error {
	err := os.Remove(c.fileName(key))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

func (c *Cache) fileName(key string) string {
	sum := sha256.Sum256([]byte(key))
	return filepath.Join(c.Dir, hex.EncodeToString(sum[:16])+".json")
}

// read returns a valid entry's status, or nil for a missing, corrupt or expired entry.
func (c *Cache) read(name string) *execcred.Status {
	b, err := os.ReadFile(name) //nolint:gosec // the name is our own hash
	if err != nil {
		return nil
	}
	var e entry
	if json.Unmarshal(b, &e) != nil || e.Status == nil {
		return nil
	}
	if !c.now().Add(c.skew()).Before(e.Expires) {
		return nil
	}
	return e.Status
}

// expiry says until when s may be served from the cache.
func (c *Cache) expiry(s *execcred.Status) (time.Time, bool) {
	if s.ExpirationTimestamp != nil {
		return s.ExpirationTimestamp.Time, true
	}
	if c.TTL > 0 {
		return c.now().Add(c.TTL), true
	}
	return time.Time{}, false
}

func writeAtomic(name string, e entry) error {
	b, err := json.Marshal(e)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(name), ".tmp-*") // created 0600
	if err != nil {
		return err
	}
	_, werr := tmp.Write(b)
	serr := tmp.Sync()
	cerr := tmp.Close()
	if err := errors.Join(werr, serr, cerr); err != nil {
		_ = os.Remove(tmp.Name())
		return err
	}
	if err := os.Rename(tmp.Name(), name); err != nil {
		_ = os.Remove(tmp.Name())
		return err
	}
	return nil
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

func (c *Cache) lockTimeout() time.Duration {
	if c.LockTimeout > 0 {
		return c.LockTimeout
	}
	return 5 * time.Minute
}
