//go:build unix

package server

import (
	"fmt"
	"os"
	"syscall"
)

// ensurePrivateDir creates dir 0700, or checks that an existing one is a directory owned by
// this user that nobody else can enter.
func ensurePrivateDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("exec proxy: socket directory: %w", err)
	}
	info, err := os.Stat(dir)
	if err != nil {
		return err
	}
	st, ok := info.Sys().(*syscall.Stat_t)
	switch {
	case !info.IsDir():
		return fmt.Errorf("exec proxy: socket directory %s is not a directory", dir)
	case ok && int(st.Uid) != os.Geteuid():
		return fmt.Errorf("exec proxy: socket directory %s belongs to uid %d, not to this user", dir, st.Uid)
	case info.Mode().Perm()&0o077 != 0:
		return fmt.Errorf("exec proxy: socket directory %s has mode %v; it must be 0700", dir, info.Mode().Perm())
	}
	return nil
}
