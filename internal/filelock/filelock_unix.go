//go:build darwin || dragonfly || freebsd || linux || netbsd || openbsd

package filelock

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// TryLock takes an exclusive lock on f without waiting. It reports false when another open
// of the file holds a lock. Over NFS, f must be open for writing.
func TryLock(f *os.File) (bool, error) { return try(f, unix.LOCK_EX) }

// TryRLock takes a shared lock on f without waiting. It reports false when another open of
// the file holds an exclusive lock. It is how a watcher asks whether a lock is still held:
// it needs f open only for reading.
func TryRLock(f *os.File) (bool, error) { return try(f, unix.LOCK_SH) }

func try(f *os.File, how int) (bool, error) {
	err := unix.Flock(int(f.Fd()), how|unix.LOCK_NB)
	if errors.Is(err, unix.EWOULDBLOCK) {
		return false, nil
	}
	return err == nil, err
}

// Unlock releases a lock TryLock took on f.
func Unlock(f *os.File) error {
	return unix.Flock(int(f.Fd()), unix.LOCK_UN)
}
