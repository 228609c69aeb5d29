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

	"github.com/gofrs/flock"
)

// Lock is the client's lock file: held exclusively for the client's lifetime, released by
// the kernel when the client dies, however it dies. Exec proxies exit when they can take it.
type Lock struct {
	Path string
	fl   *flock.Flock
}

// NewLock creates a lock file (0600) with a fresh name in dir (0700) and locks it. Lock
// files that clients killed with SIGKILL left behind are removed.
func NewLock(dir string) (*Lock, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("exec proxy: runtime directory: %w", err)
	}
	removeStaleLocks(dir)
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, "client-"+hex.EncodeToString(b)+".lock")
	fl := flock.New(path, flock.SetPermissions(0o600))
	ok, err := fl.TryLock()
	if err != nil || !ok {
		return nil, fmt.Errorf("exec proxy: locking %s: %w", path, errors.Join(err, errors.New("lock is held")))
	}
	return &Lock{Path: path, fl: fl}, nil
}

// Close releases the lock, which tells the proxy to exit, and removes the lock file and
// the files the proxy kept beside it.
func (l *Lock) Close() error {
	err := l.fl.Unlock()
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
func removeStaleLocks(dir string) {
	matches, _ := filepath.Glob(filepath.Join(dir, "client-*.lock"))
	for _, m := range matches {
		info, err := os.Stat(m)
		if err != nil || time.Since(info.ModTime()) < staleAfter {
			continue
		}
		fl := flock.New(m)
		if ok, err := fl.TryLock(); err == nil && ok {
			_ = (&Lock{Path: m, fl: fl}).Close()
		}
	}
}
