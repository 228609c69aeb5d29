package execplugin

import (
	"os/exec"
	"strings"
)

// LookPath finds file as exec.LookPath does, in the PATH (and on Windows PATHEXT) of
// environ, NAME=VALUE entries where the last one wins, instead of the process's. A name
// with a path separator is not searched for: it is returned when it names an executable
// file. A name found only through a relative PATH entry is returned with an error that
// wraps exec.ErrDot, as exec.LookPath returns it, and must not be run.
//
// A program that runs a plugin on behalf of another process resolves the plugin's name in
// that process's environment: kplug exec-cache resolves the plugin it wraps in its client's
// PATH, not in one the client's configuration set for the plugin. Errors are *exec.Error.
func LookPath(file string, environ []string) (string, error) {
	return lookPath(file, getenv(environ, "PATH"), getenv(environ, "PATHEXT"))
}

// getenv returns the value of name in environ (the last entry wins; names compare
// case-insensitively on Windows), or "".
func getenv(environ []string, name string) string {
	value := ""
	for _, kv := range environ {
		if n, v, ok := strings.Cut(kv, "="); ok && envKey(n) == envKey(name) {
			value = v
		}
	}
	return value
}

// lookFunc resolves a bare name; nil means exec.LookPath in the process's PATH.
type lookFunc func(file string) (string, error)

func (f lookFunc) look(file string) (string, error) {
	if f == nil {
		return exec.LookPath(file)
	}
	return f(file)
}
