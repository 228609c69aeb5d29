package execproxy

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/kplug/kplug/internal/filelock"
	"github.com/kplug/kplug/internal/privdir"
)

// Lock is the client's lock file: held exclusively for the client's lifetime, released by
// the kernel when the client dies, however it dies. Exec proxies exit when they can take it.
// Its descriptor is close-on-exec, so the plugin and every other child of the client do
// not inherit the lock (a child holding it would keep the proxy alive after the client).
type Lock struct {
	Path string
	f    *os.File
}

// NewLock creates a lock file (0600) with a fresh name in dir and locks it. dir is created
// 0700 if missing; an existing dir must be a directory (not a link) of this user's that
// other users cannot write to, or NewLock fails before writing anything in it. Lock files
// that clients killed with SIGKILL left behind are removed.
func NewLock(dir string) (*Lock, error) {
	if err := privdir.Ensure(dir); err != nil {
		return nil, fmt.Errorf("exec proxy: runtime directory: %w (kplug uses $XDG_RUNTIME_DIR/kplug, else $TMPDIR/kplug-<uid>)", err)
	}
	removeStaleLocks(dir)
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, "client-"+hex.EncodeToString(b)+".lock")
	f, err := privdir.Create(path)
	if err != nil {
		return nil, fmt.Errorf("exec proxy: creating the lock file: %w", err)
	}
	ok, err := filelock.TryLock(f)
	if err != nil || !ok {
		_ = f.Close()
		_ = os.Remove(path)
		return nil, fmt.Errorf("exec proxy: locking %s: %w", path, errors.Join(err, errors.New("lock is held")))
	}
	return &Lock{Path: path, f: f}, nil
}

// Close releases the lock, which tells the proxy to exit, and removes the lock file and
// the files the proxy kept beside it.
func (l *Lock) Close() error {
	err := filelock.Unlock(l.f)
	_ = l.f.Close()
	matches, _ := filepath.Glob(l.Path + ".*")
	for _, m := range append(matches, l.Path) {
		if strings.HasPrefix(m, l.Path) {
			_ = os.Remove(m)
		}
	}
	return err
}

// RuntimeDir is where kplug keeps sockets and lock files: $XDG_RUNTIME_DIR/kplug when
// set (pass os.Getenv("XDG_RUNTIME_DIR")), else a per-user directory in the temp dir.
// The name is only where to look: NewLock and the proxy check the directory they find there.
func RuntimeDir(xdgRuntimeDir string) string {
	if xdgRuntimeDir != "" {
		return filepath.Join(xdgRuntimeDir, "kplug")
	}
	return filepath.Join(os.TempDir(), fmt.Sprintf("kplug-%d", os.Getuid()))
}

// staleAfter keeps a lock file that was just created, and may not be locked yet, from
// being taken for a stale one.
const staleAfter = time.Minute

// removeStaleLocks removes lock files that nobody holds, and the files beside them.
// Anything but a regular file is skipped, without opening it (a FIFO would block the open).
func removeStaleLocks(dir string) {
	matches, _ := filepath.Glob(filepath.Join(dir, "client-*.lock"))
	for _, m := range matches {
		info, err := os.Lstat(m)
		if err != nil || !info.Mode().IsRegular() || time.Since(info.ModTime()) < staleAfter {
			continue
		}
		f, err := privdir.Open(m)
		if err != nil {
			continue
		}
		if ok, err := filelock.TryRLock(f); err == nil && ok { // nobody holds it exclusively
			_ = (&Lock{Path: m, f: f}).Close()
			continue
		}
		_ = f.Close()
	}
}
