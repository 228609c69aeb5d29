//go:build unix

package diskstore

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestStoreRefusesAnotherUsersDirectory: a directory of another user's (here uid 65534)
// is refused by every path in, with nothing read from it or written to it.
func TestStoreRefusesAnotherUsersDirectory(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to give a directory to another user")
	}
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "cache")
	s := &Store{Dir: dir}
	if err := s.Save("key", "planted"); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadDir(dir)

	want := "cache directory: " + dir + " belongs to uid 65534, not to this user (uid 0)"
	check := func(what string, err error) {
		t.Helper()
		if err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("%s: %v; want %s...", what, err, want)
		}
	}
	var v string
	check("Load", s.Load("key", &v))
	check("Save", s.Save("key", "mine"))
	_, err := s.Lock(t.Context(), "key")
	check("Lock", err)
	entries, err := s.Entries()
	check("Entries", err)
	if entries != nil || v != "" {
		t.Errorf("read %q and %d entries from another user's directory", v, len(entries))
	}
	if after, _ := os.ReadDir(dir); len(after) != len(before) {
		t.Errorf("%d files in the directory, was %d", len(after), len(before))
	}
}

// TestStoreEntriesAreRegularFiles: a link or a FIFO in place of an entry is not read (and
// a FIFO does not block), and Save replaces a link instead of writing through it.
func TestStoreEntriesAreRegularFiles(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "cache")
	s := &Store{Dir: dir}
	l, err := s.Lock(t.Context(), "target")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock() //nolint:errcheck // a test
	if err := l.Save(map[string]int{"n": 1}); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(s.Path("target"), s.Path("link")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(s.Path("fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	var v map[string]int
	for _, key := range []string{"link", "fifo"} {
		if err := s.Load(key, &v); err == nil {
			t.Errorf("Load(%s) read %v", key, v)
		}
	}
	entries, err := s.Entries()
	if err != nil || len(entries) != 1 || entries[0].ID != s.ID("target") {
		t.Errorf("Entries: %+v, %v; want the one regular entry", entries, err)
	}
	ll, err := s.Lock(t.Context(), "link")
	if err != nil {
		t.Fatal(err)
	}
	defer ll.Unlock() //nolint:errcheck // a test
	if err := ll.Save(map[string]int{"n": 2}); err != nil {
		t.Fatal(err)
	}
	if err := s.Load("target", &v); err != nil || v["n"] != 1 {
		t.Errorf("the link's target: %v, %v; want it unchanged", v, err)
	}
	if info, err := os.Lstat(s.Path("link")); err != nil || !info.Mode().IsRegular() || info.Mode().Perm() != 0o600 {
		t.Errorf("the saved entry: %v, %v; want a 0600 regular file", info.Mode(), err)
	}
}
