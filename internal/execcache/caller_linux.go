package execcache

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// readCaller reads /proc/<pid>/cmdline and environ, which hold what the process was
// started with. The kernel lets only the same user (or root) read environ; the owner of
// /proc/<pid> is checked as well, so that a process of another user that reused the pid is
// never taken for the client.
func readCaller(pid int) (args, env []string, err error) {
	dir := "/proc/" + strconv.Itoa(pid)
	info, err := os.Stat(dir)
	if err != nil {
		return nil, nil, err
	}
	if st, ok := info.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Geteuid() {
		return nil, nil, fmt.Errorf("it runs as uid %d, not as uid %d", st.Uid, os.Geteuid())
	}
	cmdline, err := os.ReadFile(dir + "/cmdline") //nolint:gosec // /proc/<pid>, a number
	if err != nil {
		return nil, nil, err
	}
	if len(cmdline) == 0 {
		// A program has at least one argument (the kernel adds an empty one when
		// execve gets none); none means a zombie, or a process between execve and its
		// new program's first instruction, whose environ reads empty too.
		return nil, nil, errors.New("it has no command line: it is exiting, or starting a program")
	}
	environ, err := os.ReadFile(dir + "/environ") //nolint:gosec // /proc/<pid>, a number
	if err != nil {
		return nil, nil, err
	}
	return splitNUL(cmdline), splitNUL(environ), nil
}

// parentOf reads field 4 of /proc/<pid>/stat.
func parentOf(pid int) (int, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	stat := string(b)
	i := strings.LastIndexByte(stat, ')')
	fields := strings.Fields(stat[i+1:]) // fields 3 (state) onwards
	if i < 0 || len(fields) < 2 {
		return 0, errors.New("malformed /proc stat")
	}
	return strconv.Atoi(fields[1])
}
