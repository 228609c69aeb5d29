package peercred

import (
	"fmt"
	"net"
	"syscall"
)

// Of returns the credentials of the peer of a unix socket connection (SO_PEERCRED).
func Of(conn net.Conn) (Cred, error) {
	uc, ok := conn.(*net.UnixConn)
	if !ok {
		return Cred{}, fmt.Errorf("not a unix socket connection (%T)", conn)
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return Cred{}, err
	}
	var cred *syscall.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	}); err != nil {
		return Cred{}, err
	}
	if credErr != nil {
		return Cred{}, credErr
	}
	return Cred{PID: cred.Pid, UID: cred.Uid}, nil
}
