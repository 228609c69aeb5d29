//go:build !windows

package execplugin

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
)

// lookPath is exec.LookPath of Unix with the PATH given: the working directory is never
// searched implicitly, and an empty or relative PATH entry gives exec.ErrDot.
func lookPath(file, pathList, _ string) (string, error) {
	if strings.Contains(file, "/") {
		if err := executable(file); err != nil {
			return "", &exec.Error{Name: file, Err: err}
		}
		return file, nil
	}
	for _, dir := range filepath.SplitList(pathList) {
		if dir == "" {
			dir = "." // an empty entry is the working directory, as in a shell
		}
		path := filepath.Join(dir, file)
		if executable(path) != nil {
			continue
		}
		if !filepath.IsAbs(path) {
			return path, &exec.Error{Name: file, Err: exec.ErrDot}
		}
		return path, nil
	}
	return "", &exec.Error{Name: file, Err: exec.ErrNotFound}
}

// executable reports why file cannot be executed, if it cannot.
func executable(file string) error {
	info, err := os.Stat(file)
	switch {
	case err != nil:
		return err
	case info.IsDir():
		return syscall.EISDIR
	case info.Mode().Perm()&0o111 == 0:
		return fs.ErrPermission
	}
	return nil
}
