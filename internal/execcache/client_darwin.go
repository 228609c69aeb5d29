package execcache

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// processStart asks the kernel (sysctl kern.proc.pid) when pid started.
func processStart(pid int) (string, error) {
	p, err := unix.SysctlKinfoProc("kern.proc.pid", pid)
	if err != nil {
		return "", err
	}
	t := p.Proc.P_starttime
	if t.Sec == 0 && t.Usec == 0 {
		return "", fmt.Errorf("execcache: no process %d", pid)
	}
	return fmt.Sprintf("%d.%06d", t.Sec, t.Usec), nil
}
