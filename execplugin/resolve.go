package execplugin

import (
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
)

var errDot = exec.ErrDot

// Resolve returns the absolute path Run would execute for command: an absolute path as it
// is, a path with a separator relative to baseDir (the working directory when empty), a
// bare name through PATH. Errors are *NotFoundError or *NotExecutableError.
func Resolve(command, baseDir string) (string, error) { return resolve(command, baseDir, "", nil) }

// ResolveIn is Resolve with a bare name looked up in the PATH of environ (see LookPath)
// instead of the process's.
func ResolveIn(command, baseDir string, environ []string) (string, error) {
	return resolve(command, baseDir, "", func(file string) (string, error) { return LookPath(file, environ) })
}

// resolve turns a configured command into the absolute path to execute. An absolute path is
// used as it is; a path with a separator in it is taken relative to baseDir (the working
// directory when baseDir is empty); a bare name is looked up by lookPath (in PATH), never in
// the current directory.
func resolve(command, baseDir, hint string, lookPath lookFunc) (string, error) {
	if command == "" {
		return "", &NotFoundError{Command: command, Err: errors.New("empty command")}
	}
	if !strings.ContainsAny(command, pathSeparators()) {
		p, err := lookPath.look(command)
		if err != nil {
			tried := "" // a failed PATH lookup tried no one path...
			if errors.Is(err, errDot) {
				tried = p // ...but one found through a relative PATH entry names it
			}
			return "", &NotFoundError{Command: command, Path: tried, InstallHint: hint, Err: err}
		}
		return filepath.Abs(p)
	}
	p := command
	if !filepath.IsAbs(p) {
		p = filepath.Join(baseDir, p)
	}
	p, err := filepath.Abs(p)
	if err != nil {
		return "", &NotFoundError{Command: command, Path: command, InstallHint: hint, Err: err}
	}
	info, err := os.Stat(p)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "", &NotFoundError{Command: command, Path: p, InstallHint: hint, Err: err}
	case err != nil:
		return "", &NotExecutableError{Command: command, Path: p, Reason: err.Error(), Err: err}
	case info.IsDir():
		return "", &NotExecutableError{Command: command, Path: p, Reason: "is a directory"}
	case !info.Mode().IsRegular():
		return "", &NotExecutableError{Command: command, Path: p, Reason: "is not a regular file"}
	case runtime.GOOS != "windows" && info.Mode().Perm()&0o111 == 0:
		return "", &NotExecutableError{Command: command, Path: p, Reason: "permission denied (the file is not marked executable)", Err: fs.ErrPermission}
	}
	return p, nil
}

func pathSeparators() string {
	if runtime.GOOS == "windows" {
		return `/\`
	}
	return "/"
}
