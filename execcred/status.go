package execcred

import (
	"errors"
	"fmt"

	"github.com/kplug/kplug/execcred/wire"
	"github.com/kplug/kplug/execplugin"
)

// StatusError says the plugin failed and said why: it exited with a non-zero code and a
// metav1.Status on stdout (a Failure; see wire.Failure for the protocol and which clients
// read it). Its message is the plugin's, where client-go's proposal shows it: in place of
// the exit code alone; kplug keeps the plugin's name and code in front, and leaves the
// stderr tail to Exit. Unwrap gives Exit.
type StatusError struct {
	Failure Failure
	Exit    *execplugin.ExitError // the code, and the stderr tail
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("plugin %q exited with code %d: %s", e.Exit.Command, e.Exit.Code, e.Failure.Message)
}

func (e *StatusError) Unwrap() error { return e.Exit }

// explained makes a plugin's exit error a *StatusError when its stdout is a Failure, and
// leaves every other error as it is. Only the Failure's fields are kept: the rest of what
// the plugin printed is never shown nor logged.
func explained(err error) error {
	var exit *execplugin.ExitError
	if !errors.As(err, &exit) || exit.Signal != nil || len(exit.Stdout) == 0 {
		return err
	}
	f, perr := wire.ParseFailure(exit.Stdout)
	if perr != nil {
		return err
	}
	return &StatusError{Failure: *f, Exit: exit}
}
