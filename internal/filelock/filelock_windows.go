//go:build windows

package filelock

import (
	"errors"
	"os"

	"golang.org/x/sys/windows"
)

// TryLock takes an exclusive lock on f without waiting. It reports false when another open
// of the file holds a lock.
func TryLock(f *os.File) (bool, error) { return try(f, windows.LOCKFILE_EXCLUSIVE_LOCK) }

// TryRLock takes a shared lock on f without waiting. It reports false when another open of
// the file holds an exclusive lock.
func TryRLock(f *os.File) (bool, error) { return try(f, 0) }

func try(f *os.File, how uint32) (bool, error) {
	err := windows.LockFileEx(windows.Handle(f.Fd()), how|windows.LOCKFILE_FAIL_IMMEDIATELY, 0, 1, 0, &windows.Overlapped{})
	if errors.Is(err, windows.ERROR_LOCK_VIOLATION) {
		return false, nil
	}
	return err == nil, err
}

// Unlock releases a lock TryLock took on f.
func Unlock(f *os.File) error {
	return windows.UnlockFileEx(windows.Handle(f.Fd()), 0, 1, 0, &windows.Overlapped{})
}
