package imagecred

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/kplug/kplug/internal/privdir"
)

// maxDirCacheEntry bounds what Get reads: an entry is a plugin's auth map, and a plugin's
// output is capped at a few MiB.
const maxDirCacheEntry = 16 << 20

// DirCache is a Cache on disk, for short-lived processes such as docker credential helpers
// that run once per pull. Each entry is a file readable by its owner only (0600) in a
// private directory (see NewDirCache); file names are hashes of the keys. Entries are
// written atomically; a corrupt or unreadable entry, a symbolic link or anything but a
// regular file counts as a miss. Concurrent processes of one user may share a directory.
type DirCache struct {
	dir string
}

// NewDirCache creates dir (0700) if needed and returns a cache in it. Since entries hold
// registry credentials, it refuses a dir that is a symbolic link, that belongs to another
// user (who could read what is stored or plant entries), or that other users may write
// to; one that others may only read is narrowed to 0700.
func NewDirCache(dir string) (*DirCache, error) {
	if err := privdir.Ensure(dir); err != nil {
		return nil, fmt.Errorf("imagecred: cache directory: %w", err)
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
	data, err := privdir.ReadFile(c.file(provider, key), maxDirCacheEntry)
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
// The entry is written to a new file (O_EXCL, so never through a link) and renamed over
// the old one, which replaces a link rather than following it.
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
