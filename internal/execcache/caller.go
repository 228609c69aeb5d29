package execcache

import (
	"errors"
	"fmt"
	"strings"

	"github.com/kplug/kplug/execcred/wire"
)

// Caller is how the client process started, read from the operating system: its
// environment and arguments as they were then. client-go runs exec-cache with the client's
// environment plus the exec block's env, and the last value of a name wins, so exec-cache
// cannot tell from its own environment which PATH, KUBERC or HOME the client has: the exec
// block, which comes from the kubeconfig the credential plugin policy guards against, can
// set them all. The Caller's environment has none of the exec block's entries.
//
// The zero Caller is unknown: Err is set, and a Caller is never used without checking it.
type Caller struct {
	Environ []string
	Args    []string
	// Err says why the client could not be read; Environ and Args are then nil.
	Err error
}

// maxPluginDepth bounds how many exec plugins CallerOf passes on its way up to the
// client: exec-cache wrapping exec-cache is two.
const maxPluginDepth = 8

// CallerOf reads process pid (os.Getppid()) and, when pid is itself an exec plugin, its
// ancestors, up to the client: the nearest process that is not an exec plugin. client-go
// gives every plugin KUBERNETES_EXEC_INFO after the exec block's env, so a process whose
// environment holds it was started by a client for an exec block, and that exec block's env
// is in it: exec-cache wrapping exec-cache would otherwise take the outer one, whose
// environment the kubeconfig chose, for the client. A process is read only when it runs as
// the same user; Linux and macOS are supported, other systems give an unknown Caller.
func CallerOf(pid int) Caller {
	for range maxPluginDepth {
		if pid <= 0 {
			return Caller{Err: fmt.Errorf("the client process is outside this pid namespace (parent pid %d)", pid)}
		}
		args, env, err := readCaller(pid)
		if err != nil {
			return Caller{Err: fmt.Errorf("reading the client process %d: %w", pid, err)}
		}
		if lookupEnv(env, wire.InfoEnv) == "" {
			return Caller{Environ: env, Args: args}
		}
		parent, err := parentOf(pid)
		if err != nil {
			return Caller{Err: fmt.Errorf("process %d is an exec plugin, and its parent cannot be read: %w", pid, err)}
		}
		pid = parent
	}
	return Caller{Err: ErrPluginChain}
}

// ErrPluginChain is a Caller's Err when more than maxPluginDepth exec plugins run one
// another. No kubeconfig needs that, and one that does it wants the client unknown (its
// kuberc and PATH then stay unread), so exec-cache refuses to run under it.
var ErrPluginChain = fmt.Errorf("more than %d exec plugins run one another", maxPluginDepth)

// chainError is the refusal to run for a client that c could not be read through
// (ErrPluginChain), or nil.
func (c Caller) chainError() error {
	if !errors.Is(c.Err, ErrPluginChain) {
		return nil
	}
	return fmt.Errorf("%w, up from this one: the client's credential plugin policy cannot be read through them; wrap the plugin once", ErrPluginChain)
}

// Known reports whether the client's environment was read.
func (c Caller) Known() bool { return c.Err == nil && c.Environ != nil }

// unknown says why the Caller is not known.
func (c Caller) unknown() error {
	if c.Err != nil {
		return c.Err
	}
	return errors.New("the client process was not read")
}

// kubercFlag is the value of kubectl's --kuberc flag in the client's arguments ("" when
// absent): kubectl applies that file's policy, and a plugin never sees the flag. The
// arguments are read as cobra reads them, up to a "--".
func (c Caller) kubercFlag() string {
	value := ""
	for i := 1; i < len(c.Args); i++ {
		a := c.Args[i]
		switch {
		case a == "--":
			return value
		case a == "--kuberc" && i+1 < len(c.Args):
			value = c.Args[i+1]
			i++
		case strings.HasPrefix(a, "--kuberc="):
			value = strings.TrimPrefix(a, "--kuberc=")
		}
	}
	return value
}

// splitNUL splits NUL-terminated strings. Empty strings are kept: an empty argument is
// an argument (kubectl --kuberc "" get ns).
func splitNUL(b []byte) []string {
	if len(b) == 0 {
		return []string{}
	}
	return strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00")
}
