//go:build !(darwin || dragonfly || freebsd || linux || netbsd || openbsd || windows)

package filelock

import (
	"fmt"
	"os"
	"runtime"
)

var errUnsupported = fmt.Errorf("file locks are not supported on %s", runtime.GOOS)

// TryLock fails: this platform has no supported file lock.
func TryLock(*os.File) (bool, error) { return false, errUnsupported }

// TryRLock fails: this platform has no supported file lock.
func TryRLock(*os.File) (bool, error) { return false, errUnsupported }

// Unlock fails: this platform has no supported file lock.
func Unlock(*os.File) error { return errUnsupported }
