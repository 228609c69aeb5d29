package diskstore

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
	"strings"
	"time"

	"github.com/gofrs/flock"

	"github.com/kplug/kplug/internal/privdir"
)

// Store keeps JSON documents in files, one per key, for caches shared by processes: 0600
// files in a private directory, written atomically (a reader sees the old document or the
// new one, never a part) but not synced to disk, with a file lock per key for
// read-modify-write. A file is named after a hash of its key, so keys may hold anything.
// The zero value is unusable: Dir is required. A Store is safe for concurrent use by
// goroutines and processes of one user.
//
// Every method checks Dir before it reads or writes: it must be a real directory (not a
// symbolic link) that belongs to the user and that no other user may write to, since
// another user who owned it could read the credentials stored or plant their own. Entries
// are read only when they are regular files, never through a link or from a FIFO.
type Store struct {
	// Dir holds the entries; it is created 0700 if missing, and narrowed to 0700 if it
	// exists with read or search permission for others. A Dir of another user's, or
	// writable by others, is an error.
	Dir string
	// LockTimeout bounds the wait for another process's lock. Zero means 5 minutes, long
	// enough for a browser login.
	LockTimeout time.Duration
}

// Entry files end in entrySuffix; lock files in lockSuffix; writes in progress start with
// tmpPrefix.
const (
	entrySuffix = ".json"
	lockSuffix  = ".lock"
	tmpPrefix   = ".tmp-"
)

// ErrNoEntry says a key has no stored document.
var ErrNoEntry = errors.New("no cache entry")

// maxEntry bounds the size of a document read back: a plugin's output is capped at a few
// MiB, and an entry holds one.
const maxEntry = 16 << 20

// Locked is a key of a Store whose file lock is held. It is not safe for concurrent use;
// call Unlock when done.
type Locked struct {
	name string
	lock *flock.Flock
}

// Lock takes key's file lock, waiting for another process that holds it until ctx ends or
// LockTimeout passes.
func (s *Store) Lock(ctx context.Context, key string) (*Locked, error) {
	if err := s.prepare(); err != nil {
		return nil, err
	}
	name := s.Path(key)
	lock := flock.New(strings.TrimSuffix(name, entrySuffix)+lockSuffix, flock.SetPermissions(0o600))
	lockCtx, cancel := context.WithTimeout(ctx, s.lockTimeout())
	defer cancel()
	ok, err := lock.TryLockContext(lockCtx, 20*time.Millisecond)
	if err != nil || !ok {
		if errors.Is(lockCtx.Err(), context.DeadlineExceeded) && ctx.Err() == nil {
			return nil, fmt.Errorf("waited %v for the cache lock %s, held by another process", s.lockTimeout(), lock.Path())
		}
		return nil, fmt.Errorf("waiting for the cache lock %s: %w", lock.Path(), errors.Join(err, lockCtx.Err()))
	}
	return &Locked{name: name, lock: lock}, nil
}

// Load decodes key's document into v without taking the lock; writes are atomic, so the
// document is whole. It returns ErrNoEntry when there is none (or no directory yet), an
// error for a directory that fails the check, or a decoding error for a corrupt entry,
// which callers treat as a miss: the next Save replaces it.
func (s *Store) Load(key string, v any) error {
	if err := s.check(); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return ErrNoEntry
		}
		return err
	}
	return load(s.Path(key), v)
}

// Save replaces key's document with v, atomically, without taking the lock: for a cache
// whose last writer may win.
func (s *Store) Save(key string, v any) error {
	if err := s.prepare(); err != nil {
		return err
	}
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return writeAtomic(s.Path(key), b)
}

// Delete removes key's document without taking the lock; a missing one is not an error.
func (s *Store) Delete(key string) error {
	if err := s.check(); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	return removeEntry(s.Path(key))
}

// Load decodes the locked key's document into v, as Store.Load.
func (l *Locked) Load(v any) error { return load(l.name, v) }

// Save replaces the locked key's document with v, atomically.
func (l *Locked) Save(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return writeAtomic(l.name, b)
}

// Delete removes the locked key's document; a missing one is not an error.
func (l *Locked) Delete() error { return removeEntry(l.name) }

// Unlock releases the lock. The lock file stays: removing it could let two processes hold
// locks on different files for one key.
func (l *Locked) Unlock() error { return l.lock.Unlock() }

// Entry is one document found by Entries.
type Entry struct {
	// ID names the entry within the Store (a hash of its key); pass it to Remove.
	ID   string
	Data []byte
	// Modified is when the document was last written.
	Modified time.Time
}

// Entries returns every document in the Store, in ID order. A missing directory has none.
func (s *Store) Entries() ([]Entry, error) {
	if err := s.check(); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		return nil, err
	}
	files, err := os.ReadDir(s.Dir)
	if err != nil {
		return nil, fmt.Errorf("reading the cache directory: %w", err)
	}
	var out []Entry
	for _, f := range files {
		id, ok := strings.CutSuffix(f.Name(), entrySuffix)
		if !ok || !validID(id) || !f.Type().IsRegular() {
			continue // not an entry: a write in progress, a lock, a file someone put there
		}
		b, err := privdir.ReadFile(filepath.Join(s.Dir, f.Name()), maxEntry)
		if errors.Is(err, fs.ErrNotExist) {
			continue // removed meanwhile
		}
		if err != nil {
			return nil, fmt.Errorf("reading a cache entry: %w", err)
		}
		var mod time.Time
		if info, err := f.Info(); err == nil {
			mod = info.ModTime()
		}
		out = append(out, Entry{ID: id, Data: b, Modified: mod})
	}
	return out, nil
}

// Remove deletes the entry with id (from Entries); a missing one is not an error.
func (s *Store) Remove(id string) error {
	if !validID(id) {
		return fmt.Errorf("invalid cache entry id %q", id)
	}
	return removeEntry(filepath.Join(s.Dir, id+entrySuffix))
}

// RemoveIf deletes the entry with id if drop, given its document, says so. It holds the
// entry's lock meanwhile, so that a process about to write it loses nothing, and skips an
// entry whose lock another process holds. It reports whether it removed the entry.
func (s *Store) RemoveIf(id string, drop func(data []byte) bool) (bool, error) {
	if !validID(id) {
		return false, fmt.Errorf("invalid cache entry id %q", id)
	}
	if err := s.check(); err != nil {
		return false, err
	}
	name := filepath.Join(s.Dir, id+entrySuffix)
	lock := flock.New(filepath.Join(s.Dir, id+lockSuffix), flock.SetPermissions(0o600))
	ok, err := lock.TryLock()
	if err != nil || !ok {
		return false, err
	}
	defer lock.Unlock() //nolint:errcheck // closing the file releases the lock anyway
	b, err := privdir.ReadFile(name, maxEntry)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil || !drop(b) {
		return false, err
	}
	return true, removeEntry(name)
}

// RemoveTemp deletes the files of writes in progress older than age: what a process that
// crashed while writing left behind (they hold credentials too).
func (s *Store) RemoveTemp(age time.Duration) error {
	matches, err := filepath.Glob(filepath.Join(s.Dir, tmpPrefix+"*"))
	if err != nil {
		return err
	}
	var errs []error
	for _, m := range matches {
		if info, err := os.Lstat(m); err == nil && time.Since(info.ModTime()) >= age {
			errs = append(errs, removeEntry(m))
		}
	}
	return errors.Join(errs...)
}

// validID reports whether id is one that ID returns: 32 lower-case hex digits.
func validID(id string) bool {
	if len(id) != 32 {
		return false
	}
	for _, c := range id {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// ID returns the id Entries reports for key's entry.
func (s *Store) ID(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:16])
}

// Path is the file that holds key's document.
func (s *Store) Path(key string) string {
	return filepath.Join(s.Dir, s.ID(key)+entrySuffix)
}

// prepare creates the directory, or checks an existing one: entries hold credentials, so
// only the owner may list, read or replace them (see Store).
func (s *Store) prepare() error {
	if s.Dir == "" {
		return errors.New("the cache directory is not set")
	}
	if err := privdir.Ensure(s.Dir); err != nil {
		return fmt.Errorf("cache directory: %w", err)
	}
	return nil
}

// check is prepare for a directory that need not exist: it creates nothing, and a missing
// directory is an error that wraps fs.ErrNotExist.
func (s *Store) check() error {
	if s.Dir == "" {
		return errors.New("the cache directory is not set")
	}
	if err := privdir.Check(s.Dir); err != nil {
		return fmt.Errorf("cache directory: %w", err)
	}
	return nil
}

func (s *Store) lockTimeout() time.Duration {
	if s.LockTimeout > 0 {
		return s.LockTimeout
	}
	return 5 * time.Minute
}

func load(name string, v any) error {
	b, err := privdir.ReadFile(name, maxEntry)
	if errors.Is(err, fs.ErrNotExist) {
		return ErrNoEntry
	}
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("corrupt cache entry %s: %w", name, err)
	}
	return nil
}

func removeEntry(name string) error {
	err := os.Remove(name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

// writeAtomic writes b to a new file (0600, O_EXCL: never through a link) and renames it
// to name, which replaces whatever is there, a link included, rather than following it.
func writeAtomic(name string, b []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(name), tmpPrefix+"*")
	if err != nil {
		return err
	}
	// Not synced to disk: a cache needs no durability. After a crash an entry may be
	// missing or unreadable, which is a miss; a sync per write would serialise every
	// process that records itself in an entry behind the disk.
	_, werr := tmp.Write(b)
	cerr := tmp.Close()
	if err := errors.Join(werr, cerr); err != nil {
		_ = os.Remove(tmp.Name())
		return err
	}
	if err := os.Rename(tmp.Name(), name); err != nil {
		_ = os.Remove(tmp.Name())
		return err
	}
	return nil
}
