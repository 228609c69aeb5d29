//go:build windows

package server

import (
	"os/exec"
	"syscall"
)

// detach starts cmd without a console of its own and in a new process group, so that it
// survives the launcher.
func detach(cmd *exec.Cmd) {
	const detachedProcess, newProcessGroup = 0x00000008, 0x00000200
	cmd.SysProcAttr = &syscall.SysProcAttr{CreationFlags: detachedProcess | newProcessGroup}
}
