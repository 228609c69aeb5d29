//go:build unix

package imagecred

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

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

func TestDirCacheRefusesASharedDirectory(t *testing.T) {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := NewDirCache(dir)
	if err == nil || !strings.Contains(err.Error(), "must be 0700") {
		t.Errorf("NewDirCache on a 0755 directory: %v", err)
	}
}
