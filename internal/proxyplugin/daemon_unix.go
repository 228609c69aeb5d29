//go:build unix

package proxyplugin

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/kplug/kplug/internal/privdir"
)

// installedLike checks that the daemon program at path (fi) is as closed to others as
// kplug (self) should be: owned by kplug's owner, not writable by other users, and in a
// directory none of whose ancestors another user could rename or replace (each owned by
// root or kplug's owner, and not writable by others unless sticky), so that the file
// checked is the file started.
func installedLike(path string, fi fs.FileInfo, self string) error {
	sfi, err := os.Stat(self)
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
	}
	if err := privdir.Ancestors(filepath.Dir(path), int(sst.Uid)); err != nil {
		return fmt.Errorf("%s: %w", filepath.Base(path), err)
	}
	return nil
}
