package execplugin

import (
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// lookPath is exec.LookPath of Windows with PATH and PATHEXT given. Like Go's, it tries the
// extensions of PATHEXT (.com, .exe, .bat and .cmd without one) and reports a file found in
// the working directory, which Windows searches first, with exec.ErrDot; unlike Go's, it
// never returns such a file without that error, whatever NoDefaultCurrentDirectoryInExePath
// says.
func lookPath(file, pathList, pathext string) (string, error) {
	exts := extensions(pathext)
	if strings.ContainsAny(file, `:\/`) {
		found, err := withExtension(file, exts)
		if err != nil {
			return "", &exec.Error{Name: file, Err: err}
		}
		return found, nil
	}
	if found, err := withExtension(filepath.Join(".", file), exts); err == nil {
		return found, &exec.Error{Name: file, Err: exec.ErrDot}
	}
	for _, dir := range filepath.SplitList(pathList) {
		if dir == "" {
			continue
		}
		found, err := withExtension(filepath.Join(dir, file), exts)
		if err != nil {
			continue
		}
		if !filepath.IsAbs(found) {
			return found, &exec.Error{Name: file, Err: exec.ErrDot}
		}
		return found, nil
	}
	return "", &exec.Error{Name: file, Err: exec.ErrNotFound}
}

// extensions are PATHEXT's, lowercased, or Windows' default set.
func extensions(pathext string) []string {
	var exts []string
	for _, e := range strings.Split(strings.ToLower(pathext), ";") {
		if e == "" {
			continue
		}
		if e[0] != '.' {
			e = "." + e
		}
		exts = append(exts, e)
	}
	if len(exts) == 0 {
		exts = []string{".com", ".exe", ".bat", ".cmd"}
	}
	return exts
}

// withExtension returns file when it already has one of exts and is a file, else the
// first file+ext that is one.
func withExtension(file string, exts []string) (string, error) {
	if ext := strings.ToLower(filepath.Ext(file)); ext != "" {
		for _, e := range exts {
			if e == ext {
				if err := isFile(file); err == nil {
					return file, nil
				}
			}
		}
	}
	for _, e := range exts {
		if err := isFile(file + e); err == nil {
			return file + e, nil
		}
	}
	return "", fs.ErrNotExist
}

func isFile(path string) error {
	info, err := os.Stat(path)
	if err != nil {
		return err
	}
	if info.IsDir() {
		return errors.New("is a directory")
	}
	return nil
}
