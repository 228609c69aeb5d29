package imagecred

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// DirCache is a Cache on disk, for short-lived processes such as docker credential helpers
// that run once per pull. Each entry is a file readable by its owner only (0600) in a
// directory only the owner can enter (0700); file names are hashes of the keys. Entries are
// written atomically; a corrupt or unreadable entry counts as a miss. Concurrent processes
// may share a directory.
type DirCache struct {
	dir string
}

// NewDirCache creates dir (0700) if needed and returns a cache in it. It fails when dir is
// accessible to others, since entries hold registry credentials.
func NewDirCache(dir string) (*DirCache, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("imagecred: cache directory: %w", err)
	}
	info, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("imagecred: cache directory: %w", err)
	}
	if err := checkPrivate(dir, info); err != nil {
		return nil, err
	}
	return &DirCache{dir: dir}, nil
}

func (c *DirCache) file(provider, key string) string {
	h := sha256.New()
	// The provider name is length-prefixed so that no (provider, key) pair collides with another.
	h.Write((&keyBuilder{}).str(provider).b)
	h.Write([]byte(key))
	return filepath.Join(c.dir, hex.EncodeToString(h.Sum(nil))+".json")
}

// Get implements Cache.
func (c *DirCache) Get(provider, key string) (CacheEntry, bool) {
	data, err := os.ReadFile(c.file(provider, key))
	if err != nil {
		return CacheEntry{}, false
	}
	var e CacheEntry
	if json.Unmarshal(data, &e) != nil {
		return CacheEntry{}, false
	}
	return e, true
}

// Put implements Cache. A failure to write only costs a later plugin run, so it is ignored.
func (c *DirCache) Put(provider, key string, e CacheEntry) {
	data, err := json.Marshal(e)
	if err != nil {
		return
	}
	tmp, err := os.CreateTemp(c.dir, ".entry-*")
	if err != nil {
		return
	}
	defer os.Remove(tmp.Name()) // no-op after a successful rename
	if _, err := tmp.Write(data); err != nil {
		_ = tmp.Close()
		return
	}
	if tmp.Close() != nil {
		return
	}
	_ = os.Rename(tmp.Name(), c.file(provider, key))
}

// Delete implements Cache.
func (c *DirCache) Delete(provider, key string) { _ = os.Remove(c.file(provider, key)) }
