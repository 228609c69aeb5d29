//go:build unix

package server

import (
	"log/slog"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// closeInherited closes the descriptors this process inherited that refer to the same
// file as lock: a client that opens its lock file without close-on-exec leaks it into
// the plugin, and the proxy, holding it, would keep the client's lock alive after the
// client exits and so never exit. Inherited means without FD_CLOEXEC: Go opens every file
// close-on-exec, and only a descriptor without the flag survives an exec. Descriptors
// are listed from /dev/fd, which Linux (with /proc) and macOS list in full; where it
// lists fewer, only those are looked at.
func closeInherited(lock *os.File, log *slog.Logger) {
	var want unix.Stat_t
	if unix.Fstat(int(lock.Fd()), &want) != nil {
		return
	}
	entries, err := os.ReadDir("/dev/fd")
	if err != nil {
		return
	}
	for _, e := range entries {
		fd, err := strconv.Atoi(e.Name())
		if err != nil || fd <= 2 {
			continue
		}
		var st unix.Stat_t
		if unix.Fstat(fd, &st) != nil || st.Dev != want.Dev || st.Ino != want.Ino {
			continue
		}
		if flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != nil || flags&unix.FD_CLOEXEC != 0 {
			continue
		}
		if unix.Close(fd) == nil {
			log.Warn("exec proxy: closed a descriptor of the client's lock file that the plugin inherited; the client must open its lock file close-on-exec (O_CLOEXEC), or a proxy that keeps the descriptor never sees the client exit", "fd", fd, "lockFile", lock.Name())
		}
	}
}
