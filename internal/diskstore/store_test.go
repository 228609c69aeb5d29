package diskstore

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestStore(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "store")
	s := &Store{Dir: dir, LockTimeout: 100 * time.Millisecond}
	var doc struct{ N int }
	if err := s.Load("a", &doc); !errors.Is(err, ErrNoEntry) {
		t.Errorf("Load of a missing key: %v, want ErrNoEntry", err)
	}
	ctx := t.Context()
	l, err := s.Lock(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Save(struct{ N int }{7}); err != nil {
		t.Fatal(err)
	}
	// Another holder waits for LockTimeout, then says which lock and why.
	_, err = s.Lock(ctx, "a")
	wantErr := fmt.Sprintf("waited 100ms for the cache lock %s, held by another process", filepath.Join(dir, s.ID("a")+".lock"))
	if err == nil || err.Error() != wantErr {
		t.Errorf("second Lock: %v, want %q", err, wantErr)
	}
	if err := l.Unlock(); err != nil {
		t.Fatal(err)
	}
	if err := s.Load("a", &doc); err != nil || doc.N != 7 {
		t.Errorf("Load: %v, %+v", err, doc)
	}
	// Entries lists documents only: not lock files, not writes in progress, not files
	// someone else put there.
	for _, name := range []string{".tmp-123", "notes.json", "a.b.json", strings.Repeat("A", 32) + ".json"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("{}"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	entries, err := s.Entries()
	if err != nil || len(entries) != 1 || entries[0].ID != s.ID("a") || string(entries[0].Data) != `{"N":7}` {
		t.Errorf("Entries: %v, %+v", err, entries)
	}
	if err := s.Remove("../escape"); err == nil || err.Error() != `invalid cache entry id "../escape"` {
		t.Errorf("Remove of a path: %v", err)
	}
	if err := s.Remove(entries[0].ID); err != nil {
		t.Fatal(err)
	}
	if err := s.Load("a", &doc); !errors.Is(err, ErrNoEntry) {
		t.Errorf("Load after Remove: %v", err)
	}
	// A corrupt document is an error for Load, which callers treat as a miss.
	if err := os.WriteFile(filepath.Join(dir, s.ID("b")+".json"), []byte(`{"N":`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := s.Load("b", &doc); err == nil || !strings.HasPrefix(err.Error(), "corrupt cache entry ") {
		t.Errorf("Load of a corrupt entry: %v", err)
	}
	if entries, err := (&Store{Dir: filepath.Join(dir, "missing")}).Entries(); err != nil || entries != nil {
		t.Errorf("Entries of a missing directory: %v, %v", entries, err)
	}
	// RemoveTemp removes writes a crashed process left, once they are old enough.
	if err := s.RemoveTemp(time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, ".tmp-123")); err != nil {
		t.Errorf("RemoveTemp(1h) removed a fresh write: %v", err)
	}
	if err := s.RemoveTemp(0); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, ".tmp-123")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("RemoveTemp(0) left the write: %v", err)
	}
}

func TestStoreRemoveIf(t *testing.T) {
	t.Parallel()
	s := &Store{Dir: filepath.Join(t.TempDir(), "store")}
	ctx := t.Context()
	for _, key := range []string{"keep", "drop", "busy"} {
		l, err := s.Lock(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Save(key); err != nil {
			t.Fatal(err)
		}
		if key != "busy" {
			_ = l.Unlock()
			continue
		}
		defer l.Unlock() //nolint:errcheck // held to the end: another process at work
	}
	dropDrop := func(b []byte) bool { return string(b) == `"drop"` || string(b) == `"busy"` }
	for key, want := range map[string]bool{"keep": false, "drop": true, "busy": false} {
		removed, err := s.RemoveIf(s.ID(key), dropDrop)
		if err != nil || removed != want {
			t.Errorf("RemoveIf(%s) = %v, %v; want %v", key, removed, err, want)
		}
	}
	var v string
	if err := s.Load("busy", &v); err != nil || v != "busy" {
		t.Errorf("an entry whose lock is held was touched: %q, %v", v, err)
	}
	if err := s.Load("drop", &v); !errors.Is(err, ErrNoEntry) {
		t.Errorf("the dropped entry is still there: %v", err)
	}
	if _, err := s.RemoveIf("notes", dropDrop); err == nil {
		t.Error("RemoveIf accepted an id that is not one")
	}
}
