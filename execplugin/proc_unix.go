//go:build unix

package execplugin

import (
	"errors"
	"os"
	"os/exec"
	"syscall"
)

// setGroup puts the plugin in a process group of its own, so that signalling the group
// reaches everything the plugin started.
func setGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}

// signalPlugin sends sig to the plugin's process group, or to the plugin alone when it
// shares the caller's group. A group with no process left is not an error.
func signalPlugin(p *os.Process, ownGroup bool, sig syscall.Signal) error {
	var err error
	if ownGroup {
		err = syscall.Kill(-p.Pid, sig)
	} else {
		err = p.Signal(sig)
	}
	if errors.Is(err, syscall.ESRCH) || errors.Is(err, os.ErrProcessDone) {
		return nil
	}
	return err
}

func terminate(p *os.Process, ownGroup bool) error { return signalPlugin(p, ownGroup, syscall.SIGTERM) }

func kill(p *os.Process, ownGroup bool) error { return signalPlugin(p, ownGroup, syscall.SIGKILL) }

// exitSignal returns the signal that killed the process, or nil.
func exitSignal(ps *os.ProcessState) os.Signal {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return ws.Signal()
	}
	return nil
}

// startErrorKind classifies an error from starting the process.
func startErrorKind(err error) (tooBig bool, reason string) {
	switch {
	case errors.Is(err, syscall.E2BIG):
		return true, ""
	case errors.Is(err, syscall.EACCES):
		return false, "permission denied"
	case errors.Is(err, syscall.ENOENT):
		// The file was there a moment ago, so the kernel could not find its interpreter.
		return false, "its interpreter (the #! line) was not found"
	case errors.Is(err, syscall.ENOEXEC):
		return false, "exec format error (not a program for this system)"
	}
	return false, err.Error()
}
