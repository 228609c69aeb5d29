package imagecred

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kplug/kplug/internal/diskstore"
	"github.com/kplug/kplug/internal/testkit/localuser"
)

// Issue 12 suspicion (confirmed): cache directories were checked for mode but not owner, so a directory another user created first was used.
//
// Another local user creates the cache directory (0700, as a private one looks) and plants
// an entry with credentials of their choosing; root then uses it as its cache.
func TestSecurityImageCredentialCacheRefusesAnotherUsersDirectory(t *testing.T) {
	attacker := localuser.New(t)
	dir := filepath.Join(attacker.Home, "cache")
	entry := entryFile(&DirCache{store: &diskstore.Store{Dir: dir}}, "p", "key")
	planted, err := json.Marshal(CacheEntry{Auth: map[string]AuthConfig{"registry.io": {Username: "attacker", Password: "planted"}}, ExpiresAt: time.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(attacker.Home, "planted")
	if err := os.WriteFile(src, planted, 0o644); err != nil { // the attacker reads it
		t.Fatal(err)
	}
	attacker.Sh(t, fmt.Sprintf("mkdir -m 700 %q && mv %q %q", dir, src, entry))

	c, err := NewDirCache(dir)
	want := "imagecred: cache directory: " + dir + " belongs to uid " + strconv.Itoa(attacker.UID) + ", not to this user (uid 0)"
	if err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("NewDirCache on %s's directory: %v; want %s...", attacker, err, want)
	}
	if c != nil {
		if e, ok := c.Get("p", "key"); ok {
			t.Errorf("the planted entry was served: %+v", e)
		}
		c.Put("p", "other", CacheEntry{Auth: map[string]AuthConfig{"registry.io": {Username: "root", Password: "secret"}}, ExpiresAt: time.Now().Add(time.Hour)})
	}
	if files, _ := os.ReadDir(dir); len(files) != 1 {
		t.Errorf("%d files in %s's directory, want only the planted one", len(files), attacker)
	}
}
