//go:build windows

package proxyplugin

import "io/fs"

// installedLike has no owner or mode to compare on Windows, where a program's directory
// is guarded by its ACL (Program Files, or the user's own profile): the build comparison
// still applies.
func installedLike(string, fs.FileInfo, string) error { return nil }
