//go:build unix

package imagecred

import (
	"fmt"
	"os"
)

func checkPrivate(dir string, info os.FileInfo) error {
	if perm := info.Mode().Perm(); perm&0o077 != 0 {
		return fmt.Errorf("imagecred: cache directory %s has mode %v; it holds credentials and must be 0700 (chmod 700 %s)", dir, perm, dir)
	}
	return nil
}
