//go:build windows

package privdir

import (
	"io/fs"
	"os"
)

const (
	noFollow = 0
	nonBlock = 0
)

// checkOwner accepts any directory on Windows: access is governed by ACLs, and a user's
// profile and temp directories are private by default.
func checkOwner(string, fs.FileInfo, bool) error { return nil }

func isLoop(error) bool { return false }

func clearNonBlock(*os.File) error { return nil }

// Ancestors is not checked on Windows, where directories carry ACLs rather than owners
// and modes; see the Unix version.
func Ancestors(string, int) error { return nil }
