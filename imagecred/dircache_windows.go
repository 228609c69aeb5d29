//go:build windows

package imagecred

import "os"

// checkPrivate accepts any directory on Windows, where access is governed by ACLs that
// os.FileMode does not show; the user's profile directories are private by default.
func checkPrivate(string, os.FileInfo) error { return nil }
