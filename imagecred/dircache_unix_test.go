//go:build unix

package imagecred

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// entryFile is the file that holds an entry.
func entryFile(c *DirCache, provider, key string) string {
	return c.store.Path(storeKey(provider, key))
}

func TestDirCache(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cache")
	c, err := NewDirCache(dir)
	if err != nil {
		t.Fatal(err)
	}
	e := CacheEntry{Auth: map[string]AuthConfig{"registry.io": {Username: "u", Password: "p"}}, ExpiresAt: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	c.Put("p", "key", e)
	// Another process (a new DirCache on the same directory) sees the entry.
	c2, err := NewDirCache(dir)
	if err != nil {
		t.Fatal(err)
	}
	got, ok := c2.Get("p", "key")
	if !ok || !cmp.Equal(e, got) {
		t.Errorf("Get = %+v, %v; want %+v", got, ok, e)
	}
	if _, ok := c2.Get("q", "key"); ok {
		t.Error("an entry of provider p was returned for q")
	}
	info, _ := os.Stat(dir)
	files, _ := os.ReadDir(dir)
	if info.Mode().Perm() != 0o700 || len(files) != 1 {
		t.Fatalf("dir mode %v with %d files, want 0700 with 1", info.Mode().Perm(), len(files))
	}
	fi, _ := files[0].Info()
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("entry mode %v, want 0600", fi.Mode().Perm())
	}
	c2.Delete("p", "key")
	if _, ok := c.Get("p", "key"); ok {
		t.Error("entry survived Delete")
	}
}

func TestDirCacheDirectory(t *testing.T) {
	// A directory others may read is narrowed; one they may write to is refused.
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := NewDirCache(dir); err != nil {
		t.Fatalf("NewDirCache on a 0755 directory: %v", err)
	}
	if info, _ := os.Stat(dir); info.Mode().Perm() != 0o700 {
		t.Errorf("a 0755 directory is now %v, want 0700", info.Mode().Perm())
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	if _, err := NewDirCache(dir); err == nil || !strings.Contains(err.Error(), "other users can write to it") {
		t.Errorf("NewDirCache on a 0777 directory: %v", err)
	}
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	if _, err := NewDirCache(link); err == nil || !strings.Contains(err.Error(), "is a symbolic link") {
		t.Errorf("NewDirCache on a symbolic link: %v", err)
	}
}

func TestDirCacheEntriesAreRegularFiles(t *testing.T) {
	c, err := NewDirCache(filepath.Join(t.TempDir(), "cache"))
	if err != nil {
		t.Fatal(err)
	}
	e := CacheEntry{Auth: map[string]AuthConfig{"registry.io": {Username: "u", Password: "p"}}}
	c.Put("p", "real", e)
	// A link to a real entry and a FIFO are misses, and a FIFO does not block Get.
	if err := os.Symlink(entryFile(c, "p", "real"), entryFile(c, "p", "link")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(entryFile(c, "p", "fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"link", "fifo"} {
		if got, ok := c.Get("p", key); ok {
			t.Errorf("Get(%s) = %+v, want a miss", key, got)
		}
	}
	// Put replaces the link instead of writing through it.
	c.Put("p", "link", CacheEntry{})
	if got, ok := c.Get("p", "real"); !ok || !cmp.Equal(got, e) {
		t.Errorf("the link's target changed to %+v", got)
	}
	if info, err := os.Lstat(entryFile(c, "p", "link")); err != nil || !info.Mode().IsRegular() || info.Mode().Perm() != 0o600 {
		t.Errorf("the replaced entry: %v, %v; want a 0600 regular file", info.Mode(), err)
	}
}
