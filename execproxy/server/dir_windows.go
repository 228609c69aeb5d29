//go:build windows

package server

import "errors"

// ensurePrivateDir is not implemented on Windows yet: AF_UNIX socket permissions there
// need an explicit security descriptor, and named pipes an SDDL.
func ensurePrivateDir(string) error {
	return errors.New("exec proxy: serving on Windows is not supported yet")
}
