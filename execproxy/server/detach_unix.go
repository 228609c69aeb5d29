//go:build unix

package server

import (
	"os/exec"
	"syscall"
)

// detach starts cmd in a session of its own, so that it survives the launcher and the
// terminal's signals.
func detach(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
}
