package execcache

import (
	"encoding/binary"
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// readCaller asks the kernel for pid's arguments and environment (sysctl kern.procargs2),
// which it gives only to the same user or root: a 32-bit argument count, the executable's
// path, NUL padding, then the arguments and the environment, each NUL-terminated.
func readCaller(pid int) (args, env []string, err error) {
	p, err := unix.SysctlKinfoProc("kern.proc.pid", pid)
	if err != nil {
		return nil, nil, err
	}
	if uid := int(p.Eproc.Ucred.Uid); uid != unix.Geteuid() {
		return nil, nil, fmt.Errorf("it runs as uid %d, not as uid %d", uid, unix.Geteuid())
	}
	b, err := unix.SysctlRaw("kern.procargs2", pid)
	if err != nil {
		return nil, nil, err
	}
	return parseProcargs(b)
}

// parentOf asks the kernel for pid's parent.
func parentOf(pid int) (int, error) {
	p, err := unix.SysctlKinfoProc("kern.proc.pid", pid)
	if err != nil {
		return 0, err
	}
	return int(p.Eproc.Ppid), nil
}

func parseProcargs(b []byte) (args, env []string, err error) {
	if len(b) < 4 {
		return nil, nil, errors.New("kern.procargs2: too short")
	}
	argc := int(binary.LittleEndian.Uint32(b))
	rest := b[4:]
	// Skip the executable path and its padding.
	i := 0
	for i < len(rest) && rest[i] != 0 {
		i++
	}
	for i < len(rest) && rest[i] == 0 {
		i++
	}
	strs := splitNULKeepEmpty(rest[i:])
	if len(strs) < argc {
		return nil, nil, fmt.Errorf("kern.procargs2: %d arguments, want %d", len(strs), argc)
	}
	args = strs[:argc]
	env = []string{}
	for _, s := range strs[argc:] {
		if s == "" {
			break // the environment ends at the first empty string
		}
		env = append(env, s)
	}
	return args, env, nil
}

func splitNULKeepEmpty(b []byte) []string {
	var out []string
	for len(b) > 0 {
		j := 0
		for j < len(b) && b[j] != 0 {
			j++
		}
		out = append(out, string(b[:j]))
		if j == len(b) {
			break
		}
		b = b[j+1:]
	}
	return out
}
