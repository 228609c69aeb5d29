package peercred

import (
	"fmt"
	"net"

	"golang.org/x/sys/unix"
)

// Of returns the credentials of the peer of a unix socket connection: LOCAL_PEERCRED for
// the uid and LOCAL_PEERPID for the pid.
func Of(conn net.Conn) (Cred, error) {
	uc, ok := conn.(*net.UnixConn)
	if !ok {
		return Cred{}, fmt.Errorf("not a unix socket connection (%T)", conn)
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return Cred{}, err
	}
	var cred *unix.Xucred
	var pid int
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptXucred(int(fd), unix.SOL_LOCAL, unix.LOCAL_PEERCRED)
		if credErr == nil {
			pid, credErr = unix.GetsockoptInt(int(fd), unix.SOL_LOCAL, unix.LOCAL_PEERPID)
		}
	}); err != nil {
		return Cred{}, err
	}
	if credErr != nil {
		return Cred{}, credErr
	}
	return Cred{PID: int32(pid), UID: cred.Uid}, nil
}
