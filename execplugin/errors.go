package execplugin

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// NotFoundError says the plugin binary does not exist where the command points or on PATH.
// InstallHint is the configured hint (possibly empty); it is not part of Error so that the
// caller decides how, and how often, to print it.
type NotFoundError struct {
	Command string // as configured
	// Path is the absolute path tried; empty for a failed PATH lookup, except for a name
	// found only through a relative PATH entry (Err wraps exec.ErrDot), where it is the
	// relative path found.
	Path        string
	InstallHint string
	Err         error
}

func (e *NotFoundError) Error() string {
	switch {
	case errors.Is(e.Err, errDot) && strings.ContainsAny(filepath.Clean(e.Path), pathSeparators()):
		return fmt.Sprintf("plugin %q not found: it is only in %s, through a relative PATH entry, which is not searched; give its path, e.g. .%c%s",
			e.Command, e.Path, filepath.Separator, filepath.Clean(e.Path))
	case errors.Is(e.Err, errDot):
		return fmt.Sprintf("plugin %q not found: it is only in the current directory, which is not searched; give its path, e.g. ./%s", e.Command, e.Command)
	case e.Path == "":
		return fmt.Sprintf("plugin %q not found: no executable %q in PATH", e.Command, e.Command)
	default:
		return fmt.Sprintf("plugin %q not found: %s does not exist", e.Command, e.Path)
	}
}

func (e *NotFoundError) Unwrap() error { return e.Err }

// NotExecutableError says the plugin path exists but cannot be executed: it is a directory,
// lacks execute permission, names a missing interpreter, or is not a program for this OS.
type NotExecutableError struct {
	Command string
	Path    string
	Reason  string
	Err     error
}

func (e *NotExecutableError) Error() string {
	if e.Command == e.Path { // an absolute command: say the path once
		return fmt.Sprintf("plugin %q cannot be executed: %s", e.Command, e.Reason)
	}
	return fmt.Sprintf("plugin %q cannot be executed: %s: %s", e.Command, e.Path, e.Reason)
}

func (e *NotExecutableError) Unwrap() error { return e.Err }

// EnvTooLargeError says the operating system refused to start the plugin because its
// environment (or one variable in it) is too large (E2BIG). Largest names the biggest
// variable, which is usually KUBERNETES_EXEC_INFO carrying a CA bundle.
type EnvTooLargeError struct {
	Command     string
	Path        string
	Total       int // bytes in all environment entries
	Largest     string
	LargestSize int // bytes in the largest entry, name included
	Err         error
}

func (e *EnvTooLargeError) Error() string {
	return fmt.Sprintf("plugin %q could not start: its environment is too large for the operating system (%s in all); the largest variable is %s (%s)",
		e.Command, byteSize(e.Total), e.Largest, byteSize(e.LargestSize))
}

func (e *EnvTooLargeError) Unwrap() error { return e.Err }

// ExitError says the plugin ran and failed: it exited with a non-zero code or was killed by
// a signal it did not get from us. Code is -1 when Signal is set.
type ExitError struct {
	Command string
	Path    string
	Code    int
	Signal  os.Signal // nil unless the plugin died by a signal
	Stderr  string    // the last bytes the plugin wrote to stderr
	// StderrShown leaves Stderr out of the message: the user has seen it (Runner.StderrShown).
	StderrShown bool
	// Stdout is what the plugin wrote to stdout before it failed, up to the output cap.
	// Callers must not use it as an answer; a wrapper may pass it on as it was.
	Stdout   []byte
	Duration time.Duration
}

func (e *ExitError) Error() string {
	what := fmt.Sprintf("exited with code %d", e.Code)
	if e.Signal != nil {
		what = fmt.Sprintf("was killed by signal %v", e.Signal)
	}
	return fmt.Sprintf("plugin %q %s%s", e.Command, what, stderrSuffix(e.Stderr, e.StderrShown))
}

// TimeoutError says the plugin ran longer than its timeout and was killed with its process group.
type TimeoutError struct {
	Command string
	Path    string
	Timeout time.Duration
	Stderr  string
	// StderrShown leaves Stderr out of the message: the user has seen it (Runner.StderrShown).
	StderrShown bool
}

func (e *TimeoutError) Error() string {
	return fmt.Sprintf("plugin %q timed out after %v and was killed%s", e.Command, e.Timeout, stderrSuffix(e.Stderr, e.StderrShown))
}

// OutputTooLargeError says the plugin wrote more than the stdout cap; it was killed and
// nothing it wrote is used.
type OutputTooLargeError struct {
	Command string
	Path    string
	Limit   int
}

func (e *OutputTooLargeError) Error() string {
	return fmt.Sprintf("plugin %q wrote more than %s to stdout and was killed", e.Command, byteSize(e.Limit))
}

// OutputHeldError says the plugin exited but something it started kept its stdout open past
// the grace period. The process group was killed; the output may be incomplete and is not used.
type OutputHeldError struct {
	Command string
	Path    string
	Grace   time.Duration
}

func (e *OutputHeldError) Error() string {
	return fmt.Sprintf("plugin %q exited, but a process it started kept its stdout open for more than %v; it was killed and the output discarded (a daemon the plugin starts must close stdin, stdout and stderr)", e.Command, e.Grace)
}

// CanceledError says the caller's context ended while the plugin ran; the plugin and its
// process group were killed. It unwraps to the context's error.
type CanceledError struct {
	Command string
	Err     error
}

func (e *CanceledError) Error() string {
	return fmt.Sprintf("plugin %q was stopped: %v", e.Command, e.Err)
}

func (e *CanceledError) Unwrap() error { return e.Err }

// maxStderrInMessage bounds how much of the stderr tail goes into an error message; the
// whole tail stays available in the error's Stderr field.
const maxStderrInMessage = 1024

// stderrSuffix ends an error message with the plugin's stderr tail, or, when the user has
// already seen it, points there.
func stderrSuffix(tail string, shown bool) string {
	tail = strings.TrimSpace(tail)
	if tail == "" {
		return ""
	}
	if shown {
		return " (its stderr is above)"
	}
	if len(tail) > maxStderrInMessage {
		tail = tail[len(tail)-maxStderrInMessage:]
		if i := strings.IndexByte(tail, '\n'); i >= 0 {
			tail = tail[i+1:] // start at a whole line
		}
		tail = "...\n" + tail
	}
	return ": " + tail
}

func byteSize(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/1024)
	default:
		return fmt.Sprintf("%d bytes", n)
	}
}
