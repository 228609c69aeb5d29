package privdir

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// ErrNotRegular is wrapped by the errors of Open, OpenFile and OpenLinked for a path that
// is not a regular file (a FIFO, a device, a directory).
var ErrNotRegular = errors.New("not a regular file")

// Ensure makes dir a private directory: it creates a missing dir (and missing parents)
// with mode 0700, or checks an existing one. An existing dir must be a directory, not a
// symbolic link, and owned by the effective user. If group or others may read or enter it
// but not write to it, it is narrowed to 0700; if they may write to it, nothing in it can
// be trusted and Ensure fails. Errors name the directory and say how to fix it.
func Ensure(dir string) error {
	if dir == "" {
		return errors.New("the directory is not set")
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o700); err != nil {
		return err
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	return Check(dir)
}

// Check is Ensure for a directory that must already exist: it creates nothing, but it
// narrows a directory that others may only read.
func Check(dir string) error { return check(dir, true) }

// Verify is Check that changes nothing: a directory that group or others may read, but
// not write, is accepted as it is (files created in it are 0600 all the same). It is for
// a directory another program chose, such as the directory of the lock file a client
// names, which kplug must not modify.
func Verify(dir string) error { return check(dir, false) }

func check(dir string, narrow bool) error {
	info, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	if info.Mode()&fs.ModeSymlink != 0 {
		return fmt.Errorf("%s is a symbolic link; a private directory must be a real directory (remove it and retry)", dir)
	}
	if !info.IsDir() {
		return fmt.Errorf("%s is not a directory (remove it and retry)", dir)
	}
	return checkOwner(dir, info, narrow)
}

// Create creates a new file named path with mode 0600 for writing. It fails if anything
// already exists at path, a symbolic link included, so it never writes through a link
// another user planted. The directory must have passed Ensure.
func Create(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|noFollow, 0o600) //nolint:gosec // O_EXCL|O_NOFOLLOW in a checked directory
}

// Replace is Create for a file that may exist from an earlier run: an existing regular
// file is removed first; anything else at path (a link, a FIFO, a directory) is refused.
func Replace(path string) (*os.File, error) {
	switch info, err := os.Lstat(path); {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return nil, err
	case !info.Mode().IsRegular():
		return nil, fmt.Errorf("%s exists and is not a regular file (%v); refusing to replace it", path, info.Mode().Type())
	default:
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
	}
	return Create(path)
}

// Open opens path for reading only if it is a regular file: a symbolic link is not
// followed, and a FIFO or device is refused without blocking on it.
func Open(path string) (*os.File, error) {
	return OpenFile(path, os.O_RDONLY)
}

// OpenFile is Open with other access flags (os.O_RDWR, say); O_CREATE is not allowed.
func OpenFile(path string, flag int) (*os.File, error) {
	if flag&os.O_CREATE != 0 {
		return nil, errors.New("privdir: OpenFile does not create files; use Create")
	}
	return openRegular(path, flag|noFollow)
}

// OpenLinked opens for reading a file of the user's that kplug only reads, such as another
// program's configuration, which people often keep elsewhere and link to (a dotfiles
// manager's links in the home directory): a symbolic link is followed, but only to a
// regular file, and a FIFO or device is refused without blocking on it. Bound what you
// read from it: the file is not kplug's.
func OpenLinked(path string) (*os.File, error) {
	return openRegular(path, os.O_RDONLY)
}

// openRegular opens path with flag if it is a regular file, without blocking on a FIFO.
func openRegular(path string, flag int) (*os.File, error) {
	f, err := os.OpenFile(path, flag|nonBlock, 0) //nolint:gosec // callers choose whether links are followed, and the file must be regular
	if err != nil {
		if isLoop(err) {
			return nil, fmt.Errorf("%s is a symbolic link, which is not followed", path)
		}
		return nil, err
	}
	info, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	if !info.Mode().IsRegular() {
		_ = f.Close()
		return nil, fmt.Errorf("%s is %w (%v)", path, ErrNotRegular, info.Mode().Type())
	}
	if err := clearNonBlock(f); err != nil {
		_ = f.Close()
		return nil, err
	}
	return f, nil
}

// ReadLinked reads a regular file with OpenLinked's rules (a link is followed to a regular
// file; a FIFO or device is refused without blocking): at most limit bytes, a larger file
// being an error that says so.
func ReadLinked(path string, limit int64) ([]byte, error) {
	f, err := OpenLinked(path)
	if err != nil {
		return nil, err
	}
	return readAtMost(f, path, limit)
}

// ReadFile reads a regular file with Open's rules; a file over limit bytes is an error.
func ReadFile(path string, limit int64) ([]byte, error) {
	f, err := Open(path)
	if err != nil {
		return nil, err
	}
	return readAtMost(f, path, limit)
}

// readAtMost reads f, opened at path, and closes it: at most limit bytes.
func readAtMost(f *os.File, path string, limit int64) ([]byte, error) {
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, limit)
	}
	return b, nil
}
