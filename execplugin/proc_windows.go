//go:build windows

package execplugin

import (
	"errors"
	"os"
	"os/exec"
	"syscall"
)

// setGroup does nothing on Windows: there are no Unix process groups, so only the plugin
// itself is killed on cancellation. Processes it started may outlive it.
func setGroup(*exec.Cmd) {}

func terminate(p *os.Process, _ bool) error { return kill(p, false) }

func kill(p *os.Process, _ bool) error {
	if err := p.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	return nil
}

func exitSignal(*os.ProcessState) os.Signal { return nil }

// errFilenameExcedRange is what CreateProcess returns for an environment block over 32 767
// characters.
const errFilenameExcedRange = syscall.Errno(206)

func startErrorKind(err error) (tooBig bool, reason string) {
	switch {
	case errors.Is(err, errFilenameExcedRange), errors.Is(err, syscall.E2BIG):
		return true, ""
	case errors.Is(err, syscall.ERROR_ACCESS_DENIED):
		return false, "access denied"
	}
	return false, err.Error()
}
