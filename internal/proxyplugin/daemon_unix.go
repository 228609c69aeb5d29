//go:build unix

package proxyplugin

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// installedLike checks that the daemon program at path (fi) is as closed to others as
// kplug (self) should be: owned by kplug's owner, and neither it nor its directory
// writable by other users.
func installedLike(path string, fi fs.FileInfo, self string) error {
	sfi, err := os.Stat(self)
	if err != nil {
		return err
	}
	dfi, err := os.Stat(filepath.Dir(path))
	if err != nil {
		return err
	}
	st, ok1 := fi.Sys().(*syscall.Stat_t)
	sst, ok2 := sfi.Sys().(*syscall.Stat_t)
	switch {
	case !ok1 || !ok2:
		return fmt.Errorf("%s: no owner to compare", path)
	case st.Uid != sst.Uid:
		return fmt.Errorf("%s is owned by uid %d, kplug by uid %d", path, st.Uid, sst.Uid)
	case fi.Mode().Perm()&0o022 != 0:
		return fmt.Errorf("%s is writable by other users (mode %v)", path, fi.Mode().Perm())
	case dfi.Mode().Perm()&0o022 != 0:
		return fmt.Errorf("%s is writable by other users (mode %v), so %s could be replaced", filepath.Dir(path), dfi.Mode().Perm(), filepath.Base(path))
	}
	return nil
}
