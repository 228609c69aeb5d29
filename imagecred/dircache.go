package imagecred

import (
	"encoding/json"
	"fmt"

	"github.com/kplug/kplug/internal/diskstore"
	"github.com/kplug/kplug/internal/privdir"
)

// DirCache is a Cache on disk, for short-lived processes such as docker credential helpers
// that run once per pull. It is kplug's one on-disk store (the same as exec credential
// caches use): each entry is a 0600 file in a private directory (see NewDirCache), named
// after a hash of its key and written atomically; a corrupt or unreadable entry, a
// symbolic link or anything but a regular file counts as a miss. Concurrent processes of
// one user may share a directory.
type DirCache struct {
	store *diskstore.Store
}

// NewDirCache creates dir (0700) if needed and returns a cache in it. Since entries hold
// registry credentials, it refuses a dir that is a symbolic link, that belongs to another
// user (who could read what is stored or plant entries), or that other users may write
// to; one that others may only read is narrowed to 0700.
func NewDirCache(dir string) (*DirCache, error) {
	if err := privdir.Ensure(dir); err != nil {
		return nil, fmt.Errorf("imagecred: cache directory: %w", err)
	}
	return &DirCache{store: &diskstore.Store{Dir: dir}}, nil
}

// storeKey is provider and key in one string; the provider name is length-prefixed so
// that no (provider, key) pair collides with another.
func storeKey(provider, key string) string {
	return string((&keyBuilder{}).str(provider).b) + key
}

// Get implements Cache.
func (c *DirCache) Get(provider, key string) (CacheEntry, bool) {
	var e CacheEntry
	if c.store.Load(storeKey(provider, key), &e) != nil {
		return CacheEntry{}, false
	}
	return e, true
}

// Put implements Cache. A failure to write only costs a later plugin run, so it is ignored.
func (c *DirCache) Put(provider, key string, e CacheEntry) {
	_ = c.store.Save(storeKey(provider, key), e)
}

// Delete implements Cache.
func (c *DirCache) Delete(provider, key string) { _ = c.store.Delete(storeKey(provider, key)) }

// Entries returns every entry of the directory, expired ones too; an entry that does not
// decode is skipped, as Get treats it as a miss. It implements CacheLister.
func (c *DirCache) Entries() ([]CacheEntry, error) {
	found, err := c.store.Entries()
	if err != nil {
		return nil, fmt.Errorf("imagecred: cache directory: %w", err)
	}
	entries := make([]CacheEntry, 0, len(found))
	for _, f := range found {
		var e CacheEntry
		if json.Unmarshal(f.Data, &e) == nil {
			entries = append(entries, e)
		}
	}
	return entries, nil
}
