//go:build unix

package server

import (
	"fmt"

	"github.com/kplug/kplug/internal/privdir"
)

// ensurePrivateDir creates dir 0700, or checks that an existing one is a directory (not a
// link) owned by this user that nobody else can write to, and narrows it to 0700.
func ensurePrivateDir(dir string) error {
	if err := privdir.Ensure(dir); err != nil {
		return fmt.Errorf("exec proxy: socket directory: %w", err)
	}
	return nil
}
