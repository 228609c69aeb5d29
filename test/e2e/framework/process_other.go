//go:build !linux

package framework

import (
	"errors"
	"os"
	"os/exec"
)

func configureProcess(*exec.Cmd) error {
	return errors.New("the e2e control plane runs on Linux only (it needs process groups, PR_SET_PDEATHSIG and UTS namespaces)")
}

func signalGroup(p *os.Process, _ bool) { _ = p.Kill() }

func pauseGroup(*os.Process, bool) error {
	return errors.New("pausing a process needs SIGSTOP, which the framework uses on Linux only")
}
