//go:build !linux && !darwin

package execcache

import (
	"errors"
	"runtime"
)

// readCaller is not implemented here: exec-cache then resolves only absolute plugin paths
// under a credential plugin policy (see Options.Caller).
func readCaller(int) (args, env []string, err error) {
	return nil, nil, errors.New("reading another process's environment is not supported on " + runtime.GOOS)
}

func parentOf(int) (int, error) {
	return 0, errors.New("reading a process's parent is not supported on " + runtime.GOOS)
}
