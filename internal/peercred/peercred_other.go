//go:build !linux && !darwin

package peercred

import "net"

// Of returns ErrUnsupported: only Linux and macOS are supported.
func Of(net.Conn) (Cred, error) { return Cred{}, ErrUnsupported }
