//go:build !linux

package peercred

import "net"

// Of returns ErrUnsupported: only Linux is supported.
func Of(net.Conn) (Cred, error) { return Cred{}, ErrUnsupported }
