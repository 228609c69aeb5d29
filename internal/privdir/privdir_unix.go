//go:build unix

package privdir

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"
)

const (
	noFollow = syscall.O_NOFOLLOW
	nonBlock = syscall.O_NONBLOCK
)

func checkOwner(dir string, info fs.FileInfo, narrow bool) error {
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Errorf("%s: cannot read its owner", dir)
	}
	// The advice suits a directory kplug chose; Verify's callers give their own.
	ownerHint, modeHint := "; remove it, or set a directory of your own", "; remove it and retry"
	if !narrow {
		ownerHint, modeHint = "", ""
	}
	if uid := os.Geteuid(); int(st.Uid) != uid {
		return fmt.Errorf("%s belongs to uid %d, not to this user (uid %d): another user may have created it%s", dir, st.Uid, uid, ownerHint)
	}
	perm := info.Mode().Perm()
	if perm&0o022 != 0 {
		return fmt.Errorf("%s has mode %v: other users can write to it, so nothing in it can be trusted%s", dir, perm, modeHint)
	}
	if perm&0o077 != 0 && narrow {
		if err := os.Chmod(dir, 0o700); err != nil { //nolint:gosec // a directory: 0700 is owner-only
			return fmt.Errorf("%s has mode %v and cannot be made private (chmod 700 %s): %w", dir, perm, dir, err)
		}
	}
	return nil
}

func isLoop(err error) bool { return errors.Is(err, syscall.ELOOP) }

// clearNonBlock puts a file opened with O_NONBLOCK (so that a FIFO could not block the
// open) back into blocking mode, for ordinary reads and writes.
func clearNonBlock(f *os.File) error {
	flags, err := unix.FcntlInt(f.Fd(), unix.F_GETFL, 0)
	if err != nil {
		return err
	}
	_, err = unix.FcntlInt(f.Fd(), unix.F_SETFL, flags&^unix.O_NONBLOCK)
	return err
}

// Ancestors checks dir and every directory above it: each must be a directory owned by root
// or by uid, and closed to other users' writes unless sticky, so that nobody else can
// rename or replace anything on the way to what dir holds. Ensure and Check look at the
// directory itself; Ancestors is for what must also not be moved from under it, a socket
// others connect to or a program that is started. A relative dir is checked from the root
// down to it, not only up to the working directory. A symbolic link on the way (a home or
// cache directory kept elsewhere) is followed: the link must be root's or uid's, and what
// it points to is checked the same way.
func Ancestors(dir string, uid int) error {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	for {
		info, err := os.Lstat(dir)
		if err != nil {
			return err
		}
		st, ok := info.Sys().(*syscall.Stat_t)
		switch {
		case !ok:
			return fmt.Errorf("%s: cannot read its owner", dir)
		case st.Uid != 0 && int64(st.Uid) != int64(uid):
			return fmt.Errorf("%s is owned by uid %d, neither root nor uid %d, so what is in it could be replaced", dir, st.Uid, uid)
		case info.Mode()&fs.ModeSymlink != 0:
			// The link itself can be replaced only by its owner (checked here) or by who
			// may write the directory it is in (checked next); where it leads, now.
			target, err := filepath.EvalSymlinks(dir)
			if err != nil {
				return err
			}
			if err := Ancestors(target, uid); err != nil {
				return fmt.Errorf("%s links to %s: %w", dir, target, err)
			}
		case !info.IsDir():
			return fmt.Errorf("%s is not a directory", dir)
		case info.Mode().Perm()&0o022 != 0 && info.Mode()&fs.ModeSticky == 0:
			return fmt.Errorf("%s is writable by other users (mode %v), so what is in it could be replaced", dir, info.Mode().Perm())
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return nil
		}
		dir = parent
	}
}
