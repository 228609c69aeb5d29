//go:build unix

package plugin

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kplug/kplug/execcred/wire"
)

// A cache directory of another user's (here uid 65534) is refused: Cache.Do neither
// serves what was planted there nor fetches.
func TestCacheRefusesAnotherUsersDirectory(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to give a directory to another user")
	}
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "cache")
	planted := &Cache{Dir: dir, TTL: time.Hour}
	if _, err := planted.Do(t.Context(), "key", func(context.Context) (*wire.Status, error) {
		return &wire.Status{Token: "planted"}, nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	fetched := false
	st, err := (&Cache{Dir: dir, TTL: time.Hour}).Do(t.Context(), "key", func(context.Context) (*wire.Status, error) {
		fetched = true
		return &wire.Status{Token: "fresh"}, nil
	})
	want := "plugin: cache directory: " + dir + " belongs to uid 65534, not to this user (uid 0)"
	if err == nil || !strings.HasPrefix(err.Error(), want) || st != nil || fetched {
		t.Errorf("Cache.Do: %+v, %v (fetched %v); want %s..., no fetch", st, err, fetched, want)
	}
}
